// The operator's pure decisions: conditions, phase, revisions, the desired
// Deployment and the no-op check that keeps a steady state write-free.
import { describe, expect, it } from 'vitest';
import { parseSpec, type JobWorker } from '../../src/api/jobworker.js';
import { phaseOf, setCondition } from '../../src/reconcile/model/conditions.js';
import {
  contractHash,
  deployedContract,
  desiredDeployment,
  envProblems,
  templateHash,
} from '../../src/reconcile/children/desired.js';
import { assignRevision } from '../../src/reconcile/rollout/revisions.js';
import {
  computeStatus,
  deadLetterCondition,
  deadLetterDueInMs,
} from '../../src/reconcile/status/status.js';
import { isSubset } from '../../src/reconcile/children/subset.js';
import { loadConfig } from '../../worker/config.js';

const spec = (over: Record<string, unknown> = {}) => {
  const r = parseSpec({
    image: 'img:1',
    broker: { urlSecretRef: { name: 'r', key: 'url' }, queue: 'q' },
    claims: { urlSecretRef: { name: 'c', key: 'url' } },
    contract: { idempotencyKey: 'k:{id}', schemaVersions: [3, 2] },
    deadLetter: { owner: 'team' },
    ...over,
  });
  if (!r.ok) throw new Error(r.problems.join('\n'));
  return r.spec;
};
const jw = (s = spec()): JobWorker => ({
  apiVersion: 'jobfleet.dev/v1alpha1',
  kind: 'JobWorker',
  metadata: { name: 'w', namespace: 'ns', uid: 'u-1', generation: 1 },
  spec: s,
});

describe('conditions', () => {
  const t1 = new Date('2026-11-29T10:00:00Z');
  const t2 = new Date('2026-11-29T11:00:00Z');
  it('lastTransitionTime moves only when the status changes', () => {
    let c = setCondition(
      [],
      { type: 'Available', status: 'False', reason: 'NoReplicasAvailable', message: 'a' },
      1,
      t1,
    );
    c = setCondition(
      c,
      { type: 'Available', status: 'False', reason: 'Paused', message: 'b' },
      2,
      t2,
    );
    expect(c[0]).toMatchObject({
      reason: 'Paused',
      observedGeneration: 2,
      lastTransitionTime: '2026-11-29T10:00:00Z',
    });
    c = setCondition(
      c,
      { type: 'Available', status: 'True', reason: 'MinimumReplicasAvailable', message: 'c' },
      2,
      t2,
    );
    expect(c[0]!.lastTransitionTime).toBe('2026-11-29T11:00:00Z');
  });

  it.each([
    [{ Available: 'True' }, 'Healthy'],
    [{ Available: 'True', Progressing: 'True' }, 'Progressing'],
    // none ready and no revision rolling out: waking from zero or resuming, not a rollout
    [{ Available: 'False' }, 'Scaling'],
    [{ Available: 'False', Progressing: 'True' }, 'Progressing'],
    [{ Available: 'True', Degraded: 'True' }, 'Degraded'],
    [{ Available: 'True', Degraded: 'True', RolloutBlocked: 'True' }, 'Blocked'],
    [{ Available: 'True', Draining: 'True' }, 'Draining'],
  ] as const)('%j → %s', (set, phase) => {
    const conds = Object.entries(set).map(([type, status]) => ({
      type,
      status,
      reason: 'R',
      message: 'm',
      lastTransitionTime: '',
    }));
    expect(phaseOf(conds as never)).toBe(phase);
  });
});

describe('revisions', () => {
  const now = new Date('2026-11-29T10:00:00Z');
  const rev = (templateHash: string, image: string) => ({
    templateHash,
    image,
    contractHash: 'c',
    keyRule: 'k:{id}',
    schemaVersions: [1],
    spec: { image },
  });
  it('numbers new templates in order, returns to an earlier number for an earlier template, keeps the last N', () => {
    let h = assignRevision([], rev('a', 'i:1'), now, 2);
    expect(h.revision).toBe('1');
    h = assignRevision(h.history, rev('b', 'i:2'), now, 2);
    expect(h.revision).toBe('2');
    const back = assignRevision(h.history, rev('a', 'i:1'), now, 2);
    expect(back).toMatchObject({ revision: '1', isNew: false });
    h = assignRevision(h.history, rev('c', 'i:3'), now, 2);
    expect(h.history.map((e) => e.revision)).toEqual(['2', '3']);
  });

  // The gate reads the running revision's contract: with historyLimit 1, fifteen edits
  // must not evict the revision the Deployment still runs (nor the current one).
  it.each([1, 2, 10])(
    'never evicts a protected revision, whatever the limit (%i) and the number of edits',
    (limit) => {
      let h = assignRevision([], rev('a', 'i:1'), now, limit);
      for (let edit = 2; edit <= 16; edit++) {
        h = assignRevision(h.history, rev(`t${edit}`, `i:${edit}`), now, limit, ['1', undefined]);
        expect(h.history.map((e) => e.revision)).toContain('1');
        expect(h.history.at(-1)?.revision).toBe(String(edit));
        expect(h.history.length).toBeLessThanOrEqual(limit + 1);
      }
      expect(h.history.find((e) => e.revision === '1')).toMatchObject({ keyRule: 'k:{id}' });
    },
  );

  it('the template hash follows the image and config; the contract hash ignores version order', () => {
    expect(templateHash(jw(spec({ image: 'img:2' })))).not.toBe(templateHash(jw()));
    expect(
      templateHash(
        jw(spec({ broker: { urlSecretRef: { name: 'r', key: 'url' }, queue: 'q', prefetch: 16 } })),
      ),
    ).not.toBe(templateHash(jw()));
    expect(templateHash(jw())).toBe(templateHash(jw()));
    // kept per parsed spec: the same spec object under another name is another template
    const named = (w: JobWorker, name: string): JobWorker => ({
      ...w,
      metadata: { ...w.metadata, name },
    });
    const parsed = jw();
    expect(templateHash(named(parsed, 'a'))).not.toBe(templateHash(named(parsed, 'b')));
    // ... and a fresh parse of the same spec under the same name, the same template
    expect(templateHash(named(parsed, 'a'))).toBe(templateHash(named(jw(), 'a')));
    expect(
      contractHash(spec({ contract: { idempotencyKey: 'k:{id}', schemaVersions: [2, 3] } })),
    ).toBe(contractHash(spec()));
  });
});

describe('desired Deployment', () => {
  it('merges podTemplate without letting user labels break the selector, and keeps the restricted defaults', () => {
    const d = desiredDeployment(
      jw(
        spec({
          podTemplate: {
            labels: { 'jobfleet.dev/jobworker': 'evil', team: 'billing' },
            env: [{ name: 'EXTRA', value: '1' }],
            resources: { limits: { memory: '256Mi' } },
          },
        }),
      ),
      '4',
      3,
    ) as any;
    expect(d.spec.replicas).toBe(3);
    expect(d.spec.template.metadata.labels).toMatchObject({
      'jobfleet.dev/jobworker': 'w',
      team: 'billing',
      'jobfleet.dev/revision': '4',
    });
    const c = d.spec.template.spec.containers[0];
    expect(c.env.at(-1)).toEqual({ name: 'EXTRA', value: '1' });
    expect(c.env.find((e: any) => e.name === 'JOBFLEET_SCHEMA_VERSIONS').value).toBe('3,2');
    expect(c.resources).toEqual({ limits: { memory: '256Mi' } });
    expect(c.securityContext.readOnlyRootFilesystem).toBe(true);
    expect(d.spec.template.spec.automountServiceAccountToken).toBe(false);
    expect(JSON.stringify(d)).not.toMatch(/amqp:|postgres:/); // credentials only by reference
  });

  it('the Deployment the operator renders loads as a valid worker config with the spec values', () => {
    const s = spec({
      broker: { urlSecretRef: { name: 'r', key: 'url' }, queue: 'q', prefetch: 24 },
      retry: { maxAttempts: 7, initialDelaySeconds: 2, maxDelaySeconds: 30 },
    });
    const d = desiredDeployment(jw(s), '4', 3) as any;
    const secrets: Record<string, string> = { r: 'amqp://u:p@rabbit/v', c: 'postgres://u:p@pg/db' };
    const env = Object.fromEntries(
      (d.spec.template.spec.containers[0].env as any[]).map((e) => [
        e.name,
        e.value ?? secrets[e.valueFrom.secretKeyRef.name],
      ]),
    );
    expect(loadConfig({}, env)).toMatchObject({
      queue: 'q',
      brokerUrl: 'amqp://u:p@rabbit/v',
      claimsUrl: 'postgres://u:p@pg/db',
      prefetch: 24,
      maxAttempts: 7,
      initialDelaySeconds: 2,
      maxDelaySeconds: 30,
      deadLetterQueue: 'q.dlq',
      deadLetterOwner: 'team',
      leaseSeconds: s.claims.leaseSeconds,
      drainDeadlineSeconds: s.shutdown.drainDeadlineSeconds,
      keyRule: 'k:{id}',
      schemaVersions: [3, 2],
      revision: '4',
      metricsPort: 9464,
    });
  });

  it('spec.retry.inDoubt: Hold reaches the worker as JOBFLEET_IN_DOUBT=hold; Rerun (the default) adds nothing, so pods made before the field existed do not roll', () => {
    const envOf = (s: ReturnType<typeof spec>) =>
      (desiredDeployment(jw(s), '4', 1) as any).spec.template.spec.containers[0].env as Array<{
        name: string;
        value?: string;
      }>;
    const held = spec({ retry: { inDoubt: 'Hold' } });
    expect(envOf(held).find((e) => e.name === 'JOBFLEET_IN_DOUBT')).toEqual({
      name: 'JOBFLEET_IN_DOUBT',
      value: 'hold',
    });
    const base = {
      JOBFLEET_QUEUE: 'q',
      JOBFLEET_BROKER_URL: 'amqp://r',
      JOBFLEET_CLAIMS_URL: 'postgres://c',
    };
    expect(loadConfig({}, { ...base, JOBFLEET_IN_DOUBT: 'hold' }).inDoubt).toBe('hold');
    expect(loadConfig({}, base).inDoubt).toBe('rerun');
    expect(envOf(spec()).map((e) => e.name)).not.toContain('JOBFLEET_IN_DOUBT');
    expect(spec().retry.inDoubt).toBe('Rerun');
    expect(templateHash(jw(spec({ retry: { inDoubt: 'Rerun' } })))).toBe(templateHash(jw()));
    expect(templateHash(jw(held))).not.toBe(templateHash(jw()));
  });

  it('the contract a Deployment runs is read back from its pod template', () => {
    const d = desiredDeployment(jw(), '4', 3);
    expect(deployedContract(d)).toEqual({ keyRule: 'k:{id}', schemaVersions: [3, 2] });
    const stripped = JSON.parse(JSON.stringify(d));
    stripped.spec.template.spec.containers[0].env =
      stripped.spec.template.spec.containers[0].env.filter(
        (e: { name: string }) => e.name !== 'JOBFLEET_KEY_RULE',
      );
    expect(deployedContract(stripped)).toBeUndefined(); // unknown: the gate blocks
    expect(deployedContract(undefined)).toBeUndefined();
  });
});

describe('status', () => {
  const base = {
    generation: 3,
    previous: undefined,
    problems: [],
    desiredReplicas: 2,
    updateRevision: '1',
    history: [],
    now: new Date('2026-11-29T10:00:00Z'),
  };
  it('is Healthy with the revision current once every replica is updated and ready', () => {
    const s = computeStatus({
      ...base,
      deployment: {
        revision: '1',
        generation: 1,
        observedGeneration: 1,
        replicas: 2,
        podReplicas: 2,
        readyReplicas: 2,
        updatedReplicas: 2,
        availableReplicas: 2,
      },
    });
    expect(s).toMatchObject({
      phase: 'Healthy',
      observedGeneration: 3,
      currentRevision: '1',
      readyReplicas: 2,
    });
  });

  it('counts in-doubt jobs being decided and held, naming the oldest held; none leaves status as it was', () => {
    const read = (inDoubt?: { deciding: number; held: number; heldJobs: never[] | object[] }) =>
      computeStatus({
        ...base,
        deployment: undefined,
        deadLetters: {
          owner: 'team',
          maxAgeSeconds: 3600,
          queue: 'q',
          stats: {
            quarantined: 1,
            oldestAt: null,
            ...(inDoubt && { inDoubt: inDoubt as never }),
          },
        },
      });
    expect(
      read({
        deciding: 2,
        held: 1,
        heldJobs: [{ id: 7, key: 'order:42:ship', reason: 'held for a person …' }],
      }).inDoubt,
    ).toEqual({
      deciding: 2,
      held: 1,
      heldJobs: [{ id: 7, key: 'order:42:ship', reason: 'held for a person …' }],
    });
    expect(read({ deciding: 3, held: 0, heldJobs: [] }).inDoubt).toEqual({ deciding: 3, held: 0 });
    expect(read({ deciding: 0, held: 0, heldJobs: [] })).not.toHaveProperty('inDoubt');
    expect(read()).not.toHaveProperty('inDoubt');
  });

  it('a rollback draining revision 2 at 0 replicas has not rolled out revision 1', () => {
    const s = computeStatus({
      ...base,
      previous: { currentRevision: '2' },
      appliedReplicas: 0,
      deployment: {
        revision: '2',
        generation: 4,
        observedGeneration: 4,
        replicas: 0,
        podReplicas: 0,
        readyReplicas: 0,
        updatedReplicas: 0,
        availableReplicas: 0,
      },
    });
    expect(s.currentRevision).toBe('2');
    expect(s.conditions?.find((c) => c.type === 'Progressing')?.status).toBe('True');
  });

  it("a new revision's pod that cannot start beside an old one still serving has not rolled out", () => {
    const s = computeStatus({
      ...base,
      desiredReplicas: 1,
      updateRevision: '2',
      previous: { currentRevision: '1' },
      deployment: {
        revision: '2',
        generation: 2,
        observedGeneration: 2,
        replicas: 1,
        podReplicas: 2, // the old pod, ready, and the new one, pulling
        readyReplicas: 1,
        updatedReplicas: 1,
        availableReplicas: 1,
      },
    });
    expect(s.currentRevision).toBe('1');
    expect(s.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'True',
    });
  });

  it('a missing Secret with nothing running is not Available (not "scaled to zero")', () => {
    const s = computeStatus({
      ...base,
      desiredReplicas: 0,
      problems: [{ reason: 'SecretMissing', message: 'Secret ns/r is missing.' }],
      deployment: undefined,
    });
    expect(s.conditions?.find((c) => c.type === 'Available')).toMatchObject({
      status: 'False',
      reason: 'SecretMissing',
      message: 'No worker can run: Secret ns/r is missing.',
    });
  });

  it.each([
    [37, true, 'False', 'OverObjective'],
    [3, true, 'True', 'WithinObjective'],
    [undefined, false, 'Unknown', 'SignalMissing'],
  ] as const)(
    'oldest message %s s against a 5 s objective: AgeObjectiveMet %s (%s)',
    (age, signalOk, status, reason) => {
      const s = computeStatus({
        ...base,
        scaling: {
          targetAgeSeconds: 5,
          limitedBy: 'maxReplicas',
          message: signalOk ? 'Capped by maxReplicas.' : 'no queue-age signal',
          signalOk,
          ...(age !== undefined && { oldestAgeSeconds: age }),
        },
        deployment: undefined,
      });
      expect(s.conditions?.find((c) => c.type === 'AgeObjectiveMet')).toMatchObject({
        status,
        reason,
      });
    },
  );

  it('the Capacity column keeps its figure until the estimate moves 10 % or more, then shows the new one', () => {
    const at = (
      estimate: number,
      previous?: ReturnType<typeof computeStatus>,
      source = 'Prometheus',
    ) =>
      computeStatus({
        ...base,
        previous,
        scaling: {
          limitedBy: 'age',
          message: 'ok',
          signalOk: true,
          capacityPerReplica: estimate,
          capacitySource: source as 'Prometheus',
        },
        deployment: undefined,
      });
    const first = at(29.43);
    expect(first.capacityPerReplica).toBe(29);
    // jitter: the same row, so no status write
    for (const e of [27, 30.9, 31.4]) expect(at(e, first).capacityPerReplica).toBe(29);
    // a move of 10 % or more: the new figure, in two significant figures
    expect(at(32.4, first).capacityPerReplica).toBe(32);
    expect(at(26.1, first).capacityPerReplica).toBe(26);
    expect(at(0.271, at(0.3)).capacityPerReplica).toBe(0.27);
    // a new source is a new figure, however close
    expect(at(30, first, 'WorkerMetrics').capacityPerReplica).toBe(30);
  });

  it('is Degraded, naming the problem, and identical when recomputed from itself (no write)', () => {
    const s = computeStatus({
      ...base,
      problems: [{ reason: 'SecretMissing', message: 'Secret ns/r is missing.' }],
      deployment: undefined,
    });
    expect(s.phase).toBe('Degraded');
    expect(s.conditions?.find((c) => c.type === 'Degraded')).toMatchObject({
      status: 'True',
      reason: 'SecretMissing',
      message: 'Secret ns/r is missing.',
    });
    const again = computeStatus({
      ...base,
      previous: s,
      problems: [{ reason: 'SecretMissing', message: 'Secret ns/r is missing.' }],
      deployment: undefined,
      now: new Date('2026-11-29T12:00:00Z'),
    });
    expect(again).toEqual(s);
  });

  // The deployment as the watch shows it `n` replicas in, every pod of revision 1.
  const fleet = (replicas: number, ready: number) => ({
    revision: '1',
    generation: 5,
    observedGeneration: 5,
    replicas,
    podReplicas: replicas,
    readyReplicas: ready,
    updatedReplicas: replicas,
    availableReplicas: ready,
  });
  const progressing = (st: ReturnType<typeof computeStatus>) =>
    st.conditions?.find((c) => c.type === 'Progressing');

  it('a scale-up of a rolled-out revision is no rollout: Healthy while a replica serves, Progressing False', () => {
    const settled = computeStatus({ ...base, deployment: fleet(2, 2) });
    expect(settled).toMatchObject({ phase: 'Healthy', currentRevision: '1' });
    // 2 → 5: the pods start, one at a time; the revision stays 1
    for (const ready of [2, 3, 4, 5]) {
      const s = computeStatus({
        ...base,
        previous: settled,
        desiredReplicas: 5,
        deployment: fleet(5, ready),
      });
      expect(s.phase, `ready ${ready}`).toBe('Healthy');
      expect(progressing(s)).toMatchObject({ status: 'False', reason: 'RolloutComplete' });
    }
    // waking from zero: nothing serves yet, and that is said as Scaling, not Progressing
    const zero = computeStatus({
      ...base,
      previous: settled,
      desiredReplicas: 0,
      deployment: fleet(0, 0),
    });
    expect(zero.phase).toBe('Healthy');
    const waking = computeStatus({
      ...base,
      previous: zero,
      desiredReplicas: 1,
      deployment: fleet(1, 0),
    });
    expect(waking.phase).toBe('Scaling');
    expect(progressing(waking)).toMatchObject({ status: 'False', reason: 'RolloutComplete' });
    // a new revision is a rollout, at any replica count
    const rolling = computeStatus({
      ...base,
      previous: settled,
      updateRevision: '2',
      deployment: { ...fleet(2, 2), revision: '2', updatedReplicas: 1 },
    });
    expect(rolling.phase).toBe('Progressing');
    expect(progressing(rolling)).toMatchObject({ status: 'True', reason: 'RollingOut' });
  });

  it('paused: Desired 0 and Limited By paused, the count to restore beside them, no "draining" once nothing runs', () => {
    const settled = computeStatus({ ...base, deployment: fleet(2, 2) });
    const paused = { by: 'alice', reason: 'payments incident' };
    const draining = computeStatus({
      ...base,
      previous: settled,
      paused,
      appliedReplicas: 0,
      target: { name: 'w', namespace: 'ns' },
      deployment: { ...fleet(0, 0), podReplicas: 2 },
    });
    expect(draining).toMatchObject({
      phase: 'Paused',
      desiredReplicas: 0,
      resumeReplicas: 2,
      scaling: { limitedBy: 'paused' },
    });
    const words = (st: ReturnType<typeof computeStatus>) =>
      st.conditions?.find((c) => c.type === 'Paused')?.message;
    expect(words(draining)).toBe(
      'Paused by alice: payments incident. 2 replicas draining (in-flight jobs finish within spec.shutdown.drainDeadlineSeconds), then none runs; 2 restored on resume: kubectl jobworker resume w -n ns --reason ….',
    );
    const held = computeStatus({
      ...base,
      previous: draining,
      paused,
      appliedReplicas: 0,
      target: { name: 'w', namespace: 'ns' },
      deployment: fleet(0, 0),
    });
    expect(words(held)).toBe(
      'Paused by alice: payments incident. No replica runs; 2 restored on resume: kubectl jobworker resume w -n ns --reason ….',
    );
    // resumed: the count comes back, the pause's fields go
    const resumed = computeStatus({ ...base, previous: held, deployment: fleet(2, 0) });
    expect(resumed.desiredReplicas).toBe(2);
    expect(resumed.resumeReplicas).toBeUndefined();
    expect(resumed.scaling?.limitedBy).toBeUndefined();
    expect(resumed.phase).toBe('Scaling');
  });
});

describe('isSubset', () => {
  it.each([
    [{ a: 1 }, { a: 1, b: 2 }, true],
    [{ a: { b: [1, { c: 'x' }] } }, { a: { b: [1, { c: 'x', d: 0 }] }, z: 1 }, true],
    [{ a: [1, 2] }, { a: [1, 2, 3] }, false],
    [{ a: 1 }, { a: 2 }, false],
    [{ a: 1 }, {}, false],
    [{ port: 9464 }, { port: '9464' }, true],
    [{ a: { b: 1 } }, { a: null }, false],
  ])('%j ⊆ %j → %s', (d, l, r) => {
    expect(isSubset(d, l)).toBe(r);
  });
});

describe('dead-letter condition', () => {
  const now = new Date('2026-11-30T12:00:00Z');
  const dl = (stats?: { quarantined: number; oldestAt: Date | null }, error?: string) => ({
    owner: 'team-billing',
    maxAgeSeconds: 3600,
    queue: 'invoices.send',
    stats,
    error,
  });

  it('is Unknown until a read succeeds, with the read error', () => {
    expect(deadLetterCondition(dl(undefined, 'connection refused'), now)).toMatchObject({
      status: 'Unknown',
      reason: 'Unreadable',
      message: 'connection refused',
    });
  });

  it('is False when empty or within maxAge, True past it, naming the owner and the command', () => {
    expect(deadLetterCondition(dl({ quarantined: 0, oldestAt: null }), now)).toMatchObject({
      status: 'False',
      reason: 'Empty',
    });
    const young = dl({ quarantined: 2, oldestAt: new Date(now.getTime() - 3599_000) });
    expect(deadLetterCondition(young, now)).toMatchObject({
      status: 'False',
      reason: 'WithinMaxAge',
    });
    const old = dl({ quarantined: 1, oldestAt: new Date(now.getTime() - 3601_000) });
    expect(deadLetterCondition(old, now)).toEqual({
      type: 'DeadLettersOverdue',
      status: 'True',
      reason: 'OldestDeadLetterOverdue',
      message:
        '1 dead letter quarantined; the oldest, from 2026-11-30T10:59:59Z, is past maxAgeSeconds 3600. Owner team-billing: `jobfleet dlq list --queue invoices.send`, then docs/dead-letters.md.',
    });
  });

  it('schedules the next look for the moment the oldest entry turns overdue', () => {
    const young = dl({ quarantined: 2, oldestAt: new Date(now.getTime() - 3000_000) });
    expect(deadLetterDueInMs(young, now)).toBe(601_000);
    expect(deadLetterDueInMs(dl({ quarantined: 0, oldestAt: null }), now)).toBeUndefined();
  });
});

describe('podTemplate.env', () => {
  it('may add variables, never replace the contract’s: the error names the spec field to use', () => {
    const s = spec({
      podTemplate: {
        env: [
          { name: 'HTTP_TIMEOUT_MS', value: '500' },
          { name: 'JOBFLEET_KEY_RULE', value: 'x:{y}' },
        ],
      },
    });
    expect(envProblems(s)).toEqual([
      'spec.podTemplate.env[1] sets JOBFLEET_KEY_RULE, which the operator sets from spec.contract.idempotencyKey: set it there and remove it from spec.podTemplate.env.',
    ]);
  });
});
