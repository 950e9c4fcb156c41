// The writes a reconcile still has to make (src/reconcile/children/writes.ts,
// settle): what the watches show as done is not written again, a record of
// another object's is replaced, and an event announcing the Deployment waits
// for that Deployment's write.
import { describe, expect, it } from 'vitest';
import { parseSpec, type JobWorker } from '../../src/api/jobworker.js';
import type { KubeObject } from '../../src/kube/client.js';
import {
  desiredDeployment,
  desiredMetricsService,
  desiredPdb,
  desiredRevisionRecord,
} from '../../src/reconcile/children/desired.js';
import type { Observation } from '../../src/reconcile/model/observation.js';
import {
  afterConflict,
  settle,
  writesOf,
  type PlannedWrites,
  type Write,
} from '../../src/reconcile/children/writes.js';
import { jobWorkerObject } from './jobworker-fixture.js';

const raw = jobWorkerObject({ uid: 'u-1', resourceVersion: '10' });
const parsed = parseSpec(raw.spec);
if (!parsed.ok) throw new Error(parsed.problems.join('; '));
const jw = { ...raw, spec: parsed.spec } as unknown as JobWorker;
const deployment = desiredDeployment(jw, '1', 2);
const service = desiredMetricsService(jw);
const pdb = desiredPdb(jw);
const record = desiredRevisionRecord(jw, '1', raw.spec as Record<string, unknown>);

function obs(o: Partial<Observation> = {}): Observation {
  return {
    raw,
    spec: parsed.ok ? parsed.spec : undefined,
    problems: [],
    secrets: new Map(),
    deployment: undefined,
    others: [],
    pods: [],
    records: [],
    polling: false,
    ...o,
  };
}

/** As the server keeps it: our fields and some defaults. */
const live = (o: KubeObject, extra: Record<string, unknown> = {}): KubeObject => ({
  ...o,
  metadata: { ...o.metadata, resourceVersion: '5', uid: 'x' },
  ...extra,
});

/** `record` as left by an earlier JobWorker of the same name (another uid). */
const foreign: KubeObject = {
  ...live(record),
  metadata: { ...live(record).metadata, ownerReferences: [{ uid: 'earlier' }] },
};

function planned(o: Observation, more: Partial<PlannedWrites> = {}): PlannedWrites {
  return {
    writes: writesOf(o, {
      children: [deployment, service, pdb],
      records: [record],
      prune: [],
      remove: [],
    }),
    status: { phase: 'Progressing', observedGeneration: 1 },
    events: [],
    ...more,
  };
}

const ops = (ws: Write[]) =>
  ws.map((w) =>
    w.op === 'apply' || w.op === 'record'
      ? `${w.op} ${w.object.kind}/${w.object.metadata.name}${w.op === 'record' && w.replace ? ' (replace)' : ''}`
      : w.op,
  );

describe('settle', () => {
  it('a new JobWorker: every object written, the record first, then the Deployment', () => {
    const o = obs();
    expect(ops(settle(planned(o), o, undefined).writes)).toEqual([
      'record ControllerRevision/w-1',
      'apply Deployment/w',
      'apply Service/w-metrics',
      'apply PodDisruptionBudget/w',
    ]);
  });

  it('what the watches show as desired is not written; a field changed by hand is', () => {
    const o = obs({
      deployment: live(deployment, { status: { replicas: 2 } }),
      others: [live(service), { ...live(pdb), spec: { maxUnavailable: 3 } }],
      records: [foreign],
    });
    // the record is another object's: replaced
    expect(ops(settle(planned(o), o, undefined).writes)).toEqual([
      'record ControllerRevision/w-1 (replace)',
      'apply PodDisruptionBudget/w',
    ]);
    const ours = {
      ...live(record),
      metadata: { ...live(record).metadata, ownerReferences: [{ uid: 'u-1' }] },
    };
    const steady = obs({
      deployment: live(deployment),
      others: [live(service), live(pdb)],
      records: [ours],
      raw: { ...raw, status: { phase: 'Progressing', observedGeneration: 1 } },
    });
    const s = settle(planned(steady), steady, undefined);
    expect(s.writes).toEqual([]);
    expect(s.status).toBeUndefined();
  });

  it('a record found on create: replaced when another object’s, left when ours', () => {
    const w = { op: 'record' as const, object: record };
    const owned = (uid: string) => ({
      ...record,
      metadata: { ...record.metadata, ownerReferences: [{ uid }] },
    });
    expect(afterConflict(w, owned('someone-else'), raw)).toEqual([{ ...w, replace: true }]);
    expect(afterConflict(w, owned('u-1'), raw)).toEqual([]);
  });

  it('an event announcing the Deployment waits for its write; others only for the status', () => {
    const o = obs();
    const s = settle(
      planned(o, {
        events: [
          { type: 'Normal', reason: 'ScaledUp', message: 'up', of: 'Deployment' },
          { type: 'Warning', reason: 'WorkersNotReady', message: 'x' },
        ],
        createdEvent: { type: 'Normal', reason: 'DeploymentCreated', message: 'made' },
        scaleDownHeld: 3,
      }),
      o,
      undefined,
    );
    // the Deployment is the second write: announced once two are made
    expect(s.events.map((e) => [e.event.reason, e.after])).toEqual([
      ['DeploymentCreated', 2],
      ['ScaledUp', 2],
      ['WorkersNotReady', 0],
    ]);
    expect(s.scaleDownHeld).toEqual({ count: 3, after: 2 });
  });

  it('a status unchanged since this process wrote it is not written again, though the watch lags', () => {
    const o = obs();
    const first = settle(planned(o), o, undefined);
    expect(first.status?.object.status).toEqual({ phase: 'Progressing', observedGeneration: 1 });
    // The watch still shows the JobWorker as it was before that write.
    const again = settle(planned(o), o, first.status?.remember);
    expect(again.status).toBeUndefined();
    // ... and no event goes with an unchanged status.
    const withEvent = settle(
      planned(o, { events: [{ type: 'Normal', reason: 'ScaledUp', message: 'up' }] }),
      o,
      first.status?.remember,
    );
    expect(withEvent.events).toEqual([]);
    // a notice about the spec as written (a deprecated field) goes all the same
    const notice = {
      type: 'Warning' as const,
      reason: 'PodTemplateDeprecated' as const,
      message: 'm',
    };
    const withNotice = settle(planned(o, { notices: [notice] }), o, first.status?.remember);
    expect(withNotice.events).toEqual([{ event: notice, after: 0 }]);
  });

  it('a status that shows nothing new is not written: figures alone wait for the next change', () => {
    const cond = (message: string, status: 'True' | 'Unknown' = 'True') => ({
      type: 'WorkersReady',
      status,
      reason: status === 'True' ? 'AllReady' : 'Starting',
      message,
      lastTransitionTime: '2026-12-01T10:00:00Z',
    });
    const written = {
      phase: 'Healthy' as const,
      observedGeneration: 1,
      desiredReplicas: 3,
      readyReplicas: 3,
      replicas: 3,
      queueDepth: 120,
      capacityPerReplica: 4.1,
      oldestMessageAge: '2s',
      scaling: {
        limitedBy: 'age' as const,
        message:
          '3 replicas keep the oldest message 2 s ≤ 30 s objective (120 waiting, 14/s arriving).',
      },
      conditions: [cond('3 of 3 workers are ready.')],
    };
    const o = obs({ raw: { ...raw, status: written } });
    const plan = (status: object) => settle(planned(o, { status }), o, undefined).status;
    // the queue depth, the Deployment's own count, the figures in messages (the capacity's jitter
    // never reaches here: computeStatus holds the figure shown, status.test.ts)
    expect(
      plan({
        ...written,
        replicas: 5,
        queueDepth: 90,
        scaling: {
          limitedBy: 'age',
          message:
            '3 replicas keep the oldest message 1 s ≤ 30 s objective (90 waiting, 12/s arriving).',
        },
        conditions: [cond('3 of 5 workers are ready.')],
      }),
    ).toBeUndefined();
    // a printed column, a condition's status, a message's words: written, with the fresh figures
    for (const change of [
      { readyReplicas: 4 },
      { capacityPerReplica: 3.0 },
      { oldestMessageAge: '3s' },
      { scaling: { limitedBy: 'maxReplicas', message: written.scaling.message } },
      { conditions: [cond('3 of 5 workers are ready; the others are starting.', 'Unknown')] },
      { conditions: [cond('3 workers are ready, and one more word.')] },
    ])
      expect(plan({ ...written, queueDepth: 90, ...change }), JSON.stringify(change)).toMatchObject(
        {
          object: { status: { queueDepth: 90, ...change } },
        },
      );
  });

  it('a status read back with its keys sorted and its undefined fields omitted, as the server keeps it, is not written again', () => {
    const status = {
      phase: 'Healthy' as const,
      observedGeneration: 1,
      lastScaleDown: undefined,
      conditions: [
        {
          type: 'Available',
          status: 'True' as const,
          reason: 'MinimumReplicasAvailable',
          message: 'Ready.',
          observedGeneration: 1,
          lastTransitionTime: '2026-12-01T10:00:00Z',
        },
      ],
    };
    const fromServer = JSON.parse(
      '{"conditions":[{"lastTransitionTime":"2026-12-01T10:00:00Z","message":"Ready.",' +
        '"observedGeneration":1,"reason":"MinimumReplicasAvailable","status":"True","type":"Available"}],' +
        '"observedGeneration":1,"phase":"Healthy"}',
    );
    const o = obs({ raw: { ...raw, status: fromServer } });
    expect(settle(planned(o, { status }), o, undefined).status).toBeUndefined();
    // the same status object read again (a resync): still nothing; a changed phase: written
    expect(settle(planned(o, { status }), o, undefined).status).toBeUndefined();
    const changed = { ...status, phase: 'Degraded' as const };
    expect(settle(planned(o, { status: changed }), o, undefined).status?.object.status).toEqual(
      changed,
    );
  });
});
