// A reconcile that finds nothing new since the last plan makes none: after
// the operator's own status write (or a resync), no spec validation and no
// plan (so no revision hash and no status digest), counted, not timed. What
// is news: a new spec generation, a child's new version, a new leadership
// term, a requeue that is due.
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { JobWorkerReconciler } from '../../src/controller/reconciler.js';
import type { ObjectCache } from '../../src/controller/observe.js';
import { deploymentHasNews, hasNews } from '../../src/controller/unchanged.js';
import type { KubeClient, KubeObject } from '../../src/kube/client.js';
import type { EventRecorder } from '../../src/kube/events.js';
import { operatorMetrics } from '../../src/metrics.js';
import type { DeadLetterReader, DeadLetterStats } from '../../src/signals/dead-letters.js';
import { FIRST_STATUS_HOLD_MS } from '../../src/reconcile/status/index.js';
import { jobWorkerObject } from './jobworker-fixture.js';

/** `old`: a JobWorker with a status written before (not a new one, whose first status is held). */
function setUp(deadLetters?: () => DeadLetterStats, opts: { old?: boolean } = {}) {
  let rv = 10;
  let now = Date.parse('2026-12-01T12:00:00Z');
  let jobWorker: KubeObject = {
    ...jobWorkerObject({ uid: 'u1', resourceVersion: String(rv) }),
    ...(opts.old && { status: { observedGeneration: 1 } }),
  };
  let deleted = false;
  const statusWrites: KubeObject[] = [];
  const applied: KubeObject[] = [];
  const client = {
    find: (_apiVersion: string, kind: string, _ns: string, name: string) =>
      Promise.resolve(
        kind === 'Secret'
          ? { metadata: { name }, data: { url: Buffer.from('amqp://u:p@mq/').toString('base64') } }
          : undefined,
      ),
    // Each write lands; a status write is what the watch brings back as the JobWorker's next version.
    apply: (obj: KubeObject, _manager: string, o: { subresource?: string }) => {
      if (o.subresource === 'status') {
        statusWrites.push(obj);
        jobWorker = {
          ...jobWorker,
          metadata: { ...jobWorker.metadata, resourceVersion: String(++rv) },
          status: obj.status,
        };
        return Promise.resolve(jobWorker);
      }
      applied.push(obj);
      return Promise.resolve({ ...obj, metadata: { ...obj.metadata, resourceVersion: '1' } });
    },
    create: (obj: KubeObject) => Promise.resolve(obj),
  } as unknown as KubeClient;
  const deployments = new Map<string, KubeObject>();
  const term = (): ObjectCache => ({
    get: (kind, _ns, name) =>
      kind === 'JobWorker' ? (deleted ? undefined : jobWorker) : deployments.get(name),
    owned: () => [],
  });
  const counts = { specParsed: 0, planned: 0 };
  const metrics = operatorMetrics();
  const make = () =>
    new JobWorkerReconciler({
      client,
      events: { emit: () => Promise.resolve() } as unknown as EventRecorder,
      metrics,
      log: pino({ level: 'silent' }),
      now: () => new Date(now),
      ...(deadLetters && {
        deadLetters: { read: () => Promise.resolve(deadLetters()) } as unknown as DeadLetterReader,
      }),
      counts: { specParsed: () => counts.specParsed++, planned: () => counts.planned++ },
    });
  let reconciler = make();
  const unchanged = async () =>
    (await metrics.registry.getSingleMetric('jobfleet_reconcile_unchanged_total')?.get())?.values[0]
      ?.value ?? 0;
  return {
    get reconciler() {
      return reconciler;
    },
    /** a new operator process: nothing remembered */
    restart: () => (reconciler = make()),
    applied,
    counts,
    statusWrites,
    term,
    deployments,
    unchanged,
    jobWorker: () => jobWorker,
    later: (ms: number) => (now += ms),
    delete: () => (deleted = true),
    edit: (spec: Record<string, unknown>) => {
      jobWorker = {
        ...jobWorker,
        metadata: {
          ...jobWorker.metadata,
          resourceVersion: String(++rv),
          generation: (jobWorker.metadata.generation ?? 0) + 1,
        },
        spec: { ...(jobWorker.spec as object), ...spec },
      };
    },
  };
}

describe('a reconcile with nothing new', () => {
  it('after its own status write: no spec validation, no plan', async () => {
    const w = setUp();
    const cache = w.term();
    // A new JobWorker: its first status waits for it to turn Available (src/reconcile/status/first-status.ts) …
    expect(await w.reconciler.reconcile('ns/w', cache)).toEqual({
      requeueAfterMs: FIRST_STATUS_HOLD_MS,
    });
    expect(w.statusWrites).toHaveLength(0);
    // … which this one does not do (its Deployment never shows): written when the hold is over.
    w.later(FIRST_STATUS_HOLD_MS);
    await w.reconciler.reconcile('ns/w', cache);
    expect(w.statusWrites).toHaveLength(1);
    expect(w.statusWrites[0]?.status).toMatchObject({ phase: 'Progressing' });
    expect(w.counts).toEqual({ specParsed: 1, planned: 2 });
    // Woken again (a resync, a wake-up of another cause) at the version our status write made.
    await w.reconciler.reconcile('ns/w', cache);
    await w.reconciler.reconcile('ns/w', cache);
    expect(w.counts).toEqual({ specParsed: 1, planned: 2 });
    expect(await w.unchanged()).toBe(2);
    expect(w.statusWrites).toHaveLength(1);
  });

  it('a spec edited while its first status is held: the next revision is numbered after the held one, and written at once', async () => {
    const w = setUp();
    const cache = w.term();
    await w.reconciler.reconcile('ns/w', cache);
    expect(w.statusWrites).toHaveLength(0);
    w.later(2000);
    w.edit({ image: 'r/w:2' });
    expect(await w.reconciler.reconcile('ns/w', cache)).not.toMatchObject({
      requeueAfterMs: FIRST_STATUS_HOLD_MS - 2000,
    });
    expect(w.statusWrites).toHaveLength(1);
    const status = w.statusWrites[0]?.status as {
      observedGeneration: number;
      updateRevision: string;
      history: Array<{ revision: string; image: string }>;
    };
    expect(status.observedGeneration).toBe(2);
    expect(status.history.map((h) => [h.revision, h.image])).toEqual([
      ['1', 'r/w:1'],
      ['2', 'r/w:2'],
    ]);
    expect(status.updateRevision).toBe('2');
  });

  it('after a restart, a spec edited before any status was written is numbered after the revision its Deployment runs', async () => {
    const w = setUp();
    await w.reconciler.reconcile('ns/w', w.term());
    expect(w.statusWrites).toHaveLength(0);
    const d = w.applied.find((o) => o.kind === 'Deployment')!;
    w.deployments.set('w', {
      ...d,
      metadata: { ...d.metadata, resourceVersion: '5', creationTimestamp: '2026-12-01T12:00:00Z' },
    });
    w.restart();
    w.edit({ image: 'r/w:2' });
    w.later(FIRST_STATUS_HOLD_MS);
    await w.reconciler.reconcile('ns/w', w.term());
    const status = w.statusWrites.at(-1)?.status as {
      updateRevision: string;
      history: Array<{ revision: string; image: string }>;
    };
    expect(status.history.map((h) => [h.revision, h.image])).toEqual([
      ['1', 'r/w:1'],
      ['2', 'r/w:2'],
    ]);
    expect(status.updateRevision).toBe('2');
  });

  it('a child’s new version plans again, without validating the unchanged spec', async () => {
    const w = setUp();
    const cache = w.term();
    await w.reconciler.reconcile('ns/w', cache);
    w.deployments.set('w', {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'w', resourceVersion: '7' },
    });
    await w.reconciler.reconcile('ns/w', cache);
    expect(w.counts).toEqual({ specParsed: 1, planned: 2 });
  });

  it('its own Deployment apply is known by version: that watch event wakes nothing, a later one does', async () => {
    const w = setUp();
    expect(w.reconciler.ownDeploymentWrite('ns', 'w', '1')).toBe(false);
    await w.reconciler.reconcile('ns/w', w.term());
    // the fake apiserver gives every applied child resourceVersion 1
    expect(w.reconciler.ownDeploymentWrite('ns', 'w', '1')).toBe(true);
    expect(w.reconciler.ownDeploymentWrite('ns', 'w', '2')).toBe(false);
    expect(w.reconciler.ownDeploymentWrite('ns', 'other', '1')).toBe(false);
  });

  it('a new spec generation is parsed and planned', async () => {
    const w = setUp();
    const cache = w.term();
    await w.reconciler.reconcile('ns/w', cache);
    w.edit({ image: 'r/w:2' });
    await w.reconciler.reconcile('ns/w', cache);
    expect(w.counts).toEqual({ specParsed: 2, planned: 2 });
  });

  it('a new leadership term plans afresh', async () => {
    const w = setUp();
    await w.reconciler.reconcile('ns/w', w.term());
    await w.reconciler.reconcile('ns/w', w.term());
    expect(w.counts.planned).toBe(2);
  });
});

describe('the quarantine, read between reconciles (src/controller/quarantine-poll.ts)', () => {
  it('a settled JobWorker asks for no reconcile to read it; a read that says something new wakes it, and it plans', async () => {
    let stats = { quarantined: 0, oldestAt: null } as DeadLetterStats;
    const w = setUp(() => stats, { old: true });
    const cache = w.term();
    const woken: string[] = [];
    const poll = w.reconciler.quarantinePoll((key) => woken.push(key))!;
    expect(await w.reconciler.reconcile('ns/w', cache)).toEqual({});
    w.later(30_000);
    await poll.poll();
    expect(woken).toEqual([]);
    stats = { quarantined: 2, oldestAt: new Date('2026-12-01T12:00:30Z') };
    await poll.poll();
    expect(woken).toEqual(['ns/w']);
    await w.reconciler.reconcile('ns/w', cache);
    expect(w.counts).toEqual({ specParsed: 1, planned: 2 });
    expect(w.statusWrites.at(-1)?.status).toMatchObject({
      deadLetters: { quarantined: 2 },
    });
    // the same read again wakes nothing
    await poll.poll();
    expect(woken).toEqual(['ns/w']);
  });

  it('a read that fails, then works again, wakes the JobWorker each time', async () => {
    let fail = false;
    const w = setUp(() => {
      if (fail) throw new Error('connection refused');
      return { quarantined: 0, oldestAt: null };
    });
    const woken: string[] = [];
    const poll = w.reconciler.quarantinePoll((key) => woken.push(key))!;
    await w.reconciler.reconcile('ns/w', w.term());
    fail = true;
    await poll.poll();
    fail = false;
    await poll.poll();
    expect(woken).toEqual(['ns/w', 'ns/w']);
  });

  it('a deleted JobWorker is not read', async () => {
    let reads = 0;
    const w = setUp(() => (reads++, { quarantined: 0, oldestAt: null }));
    const poll = w.reconciler.quarantinePoll(() => undefined)!;
    await w.reconciler.reconcile('ns/w', w.term());
    const before = reads;
    w.delete();
    await w.reconciler.reconcile('ns/w', w.term());
    await poll.poll();
    expect(reads).toBe(before);
  });

  it('the condition still turns when the oldest entry passes maxAge: the plan asks for that time', async () => {
    // maxAge 86,400 s; the oldest entry passes it 45 s from now (the turn is a second past it)
    const w = setUp(() => ({ quarantined: 1, oldestAt: new Date('2026-11-30T12:00:44Z') }), {
      old: true,
    });
    expect(await w.reconciler.reconcile('ns/w', w.term())).toEqual({ requeueAfterMs: 45_000 });
  });
});

describe('hasNews: which JobWorker watch events wake a reconcile', () => {
  const jw = jobWorkerObject({ uid: 'u1', resourceVersion: '5' });
  it('a status change alone does not', () => {
    const next = {
      ...jw,
      metadata: { ...jw.metadata, resourceVersion: '6' },
      status: { phase: 'Healthy' },
    };
    expect(hasNews(jw, next)).toBe(false);
  });
  it('a spec, label or annotation change, a new object and a deletion do', () => {
    const bump = (m: Partial<KubeObject['metadata']>) => ({
      ...jw,
      metadata: { ...jw.metadata, resourceVersion: '6', ...m },
    });
    expect(hasNews(jw, bump({ generation: 2 }))).toBe(true);
    expect(hasNews(jw, bump({ annotations: { a: 'b' } }))).toBe(true);
    expect(hasNews(undefined, jw)).toBe(true);
    expect(hasNews(jw, undefined)).toBe(true);
  });
});

describe('deploymentHasNews: which Deployment watch events wake a reconcile', () => {
  // a new Deployment as the deployment controller leaves it at each step (kube-controller-manager 1.37)
  const at = (rv: string, status: Record<string, unknown>, annotations = {}): KubeObject => ({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'w', namespace: 'ns', resourceVersion: rv, generation: 1, annotations },
    spec: { replicas: 1 },
    status,
  });
  const progressing = (reason: string, updated: string) => ({
    type: 'Progressing',
    status: 'True',
    reason,
    lastTransitionTime: '2026-12-06T10:00:00Z',
    lastUpdateTime: updated,
  });
  const availableTrue = {
    type: 'Available',
    status: 'True',
    reason: 'MinimumReplicasAvailable',
    lastTransitionTime: '2026-12-06T10:00:05Z',
  };
  const created = at('1', {});
  const annotated = at('2', {}, { 'deployment.kubernetes.io/revision': '1' });
  const rolling = at(
    '3',
    {
      observedGeneration: 1,
      replicas: 1,
      updatedReplicas: 1,
      unavailableReplicas: 1,
      conditions: [
        {
          type: 'Available',
          status: 'False',
          reason: 'MinimumReplicasUnavailable',
          lastTransitionTime: '2026-12-06T10:00:00Z',
        },
        progressing('ReplicaSetUpdated', '2026-12-06T10:00:00Z'),
      ],
    },
    { 'deployment.kubernetes.io/revision': '1' },
  );
  const ready = at(
    '4',
    {
      observedGeneration: 1,
      replicas: 1,
      updatedReplicas: 1,
      readyReplicas: 1,
      availableReplicas: 1,
      conditions: [availableTrue, progressing('ReplicaSetUpdated', '2026-12-06T10:00:05Z')],
    },
    { 'deployment.kubernetes.io/revision': '1' },
  );
  const complete = at(
    '5',
    {
      ...(ready.status as object),
      conditions: [availableTrue, progressing('NewReplicaSetAvailable', '2026-12-06T10:00:06Z')],
    },
    { 'deployment.kubernetes.io/revision': '1' },
  );

  it('the controller’s revision annotation and a Progressing reason once all are available do not', () => {
    expect(deploymentHasNews(created, annotated)).toBe(false);
    expect(deploymentHasNews(ready, complete)).toBe(false);
  });
  it('replica counts, a condition’s turn, a new Deployment and a deletion do', () => {
    expect(deploymentHasNews(annotated, rolling)).toBe(true);
    expect(deploymentHasNews(rolling, ready)).toBe(true);
    expect(deploymentHasNews(undefined, created)).toBe(true);
    expect(deploymentHasNews(complete, undefined)).toBe(true);
  });
  it('while a replica is unavailable, Progressing’s update time does (how long the fleet is short)', () => {
    const later = at(
      '6',
      {
        ...(rolling.status as object),
        conditions: [
          (rolling.status as { conditions: unknown[] }).conditions[0],
          progressing('ReplicaSetUpdated', '2026-12-06T10:00:09Z'),
        ],
      },
      { 'deployment.kubernetes.io/revision': '1' },
    );
    expect(deploymentHasNews(rolling, later)).toBe(true);
  });
  it('a spec change, or an annotation of anyone else, does', () => {
    expect(deploymentHasNews(complete, { ...complete, spec: { replicas: 2 } })).toBe(true);
    expect(
      deploymentHasNews(complete, {
        ...complete,
        metadata: { ...complete.metadata, annotations: { 'example.com/x': 'y' } },
      }),
    ).toBe(true);
  });
});
