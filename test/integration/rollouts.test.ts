// Rollouts and rollbacks on the real kube-apiserver, with pods run as real
// worker processes by the local runner (test/ground/local-runner.ts) on real
// RabbitMQ and PostgreSQL: the compatibility gate, the drain-first rollback
// order, automatic rollback on rising age, and resuming after the operator is
// killed mid-rollback.
import type { ChildProcess } from 'node:child_process';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { KubeClient } from '../../src/kube/client.js';
import { type KubeObject } from '../../src/kube/client.js';
import type { Operator } from '../../src/operator.js';
import { kubectlWithPlugin } from '../fixtures/kubectl-plugin.js';
import { operatorProcess as spawnOperator, testOperator } from '../fixtures/operator.js';
import {
  NAME,
  condition,
  runnerGround,
  type RunnerGround,
  type SpecOptions,
  type Spec,
} from '../fixtures/runner-ground.js';
import { eventually } from '../ground/eventually.js';
import type { LocalRunner } from '../ground/local-runner.js';
import type { Harness } from './worker-harness.js';

let g: RunnerGround;
let h: Harness;
let ns: RunnerGround['ns'];
let client: KubeClient;
let runner: LocalRunner;
let op: Operator | undefined;
const procs: ChildProcess[] = [];

beforeEach(async () => {
  g = await runnerGround();
  ({ h, ns, client, runner } = g);
});
afterEach(async () => {
  for (const p of procs.splice(0)) if (p.exitCode === null) p.kill('SIGKILL');
  await op?.stop();
  op = undefined;
  await g?.cleanup();
});

const spec = (over?: SpecOptions) => g.spec(over);
const apply = (s: Spec) => g.apply(s);
const getJw = () => g.getJw();
const deployedRevision = async () =>
  (await client.get<KubeObject & { spec: Spec }>('apps/v1', 'Deployment', ns.namespace, NAME)).spec
    .template.metadata.labels['jobfleet.dev/revision'] as string;

async function operator(): Promise<void> {
  op = await testOperator(client, ns.namespace, { pollMs: 1000 });
}

/** Revision `rev` runs on every replica, ready (the runner's processes answer /readyz). */
const rolledOut = (rev: string, timeoutMs = 60_000) =>
  eventually(
    `revision ${rev} rolled out`,
    async () => {
      const jw = await getJw();
      return jw.status?.currentRevision === rev &&
        condition(jw, 'Progressing')?.status === 'False' &&
        jw.status?.readyReplicas === jw.status?.desiredReplicas
        ? jw
        : undefined;
    },
    timeoutMs,
  );

describe('the compatibility gate', () => {
  it('blocks an idempotency-key rule change: the running revision keeps consuming; restoring the rule unblocks', async () => {
    await operator();
    await apply(spec());
    await rolledOut('1');
    await apply(spec({ contract: { idempotencyKey: 'order:{orderId}:ship:v2' } }));
    const blocked = await eventually('RolloutBlocked', async () => {
      const jw = await getJw();
      return condition(jw, 'RolloutBlocked')?.status === 'True' ? jw : undefined;
    });
    expect(condition(blocked, 'RolloutBlocked')).toMatchObject({
      reason: 'IdempotencyKeyRuleChanged',
      message: expect.stringContaining(
        'Revision 2 changes the idempotency-key rule from "order:{orderId}:ship" (revision 1) to "order:{orderId}:ship:v2"',
      ),
    });
    expect(blocked.status?.phase).toBe('Blocked');
    expect(await deployedRevision()).toBe('1');
    // The running revision keeps consuming.
    const { key } = await h.job('g-1');
    await eventually('g-1 done by revision 1', async () =>
      (await h.claim(key))?.state === 'completed' ? true : undefined,
    );
    expect(runner.events.some((e) => e.revision === '2')).toBe(false);

    await apply(spec());
    await eventually('unblocked', async () => {
      const jw = await getJw();
      return condition(jw, 'RolloutBlocked')?.status === 'False' ? jw : undefined;
    });
    expect(await deployedRevision()).toBe('1');
    expect(runner.events.some((e) => e.revision === '2')).toBe(false);
  });

  // The gate once read the running contract from status.history only, which keeps the last
  // historyLimit entries: after that many further edits the blocked change went through.
  it.each([1, 2])(
    'stays blocked through 15 edits of a key-rule change with historyLimit %i',
    async (historyLimit) => {
      await operator();
      await apply(spec({ rollout: { historyLimit } }));
      await rolledOut('1');
      for (let edit = 1; edit <= 15; edit++) {
        const applied = await apply(
          spec({
            image: `registry.example.com/shipping/worker:edit-${edit}`,
            contract: { idempotencyKey: 'order:{orderId}:ship:v2' },
            rollout: { historyLimit },
          }),
        );
        const jw = await eventually(`edit ${edit} reconciled`, async () => {
          const j = await getJw();
          return j.status?.observedGeneration === applied.metadata.generation ? j : undefined;
        });
        expect(condition(jw, 'RolloutBlocked'), `edit ${edit}`).toMatchObject({
          status: 'True',
          reason: 'IdempotencyKeyRuleChanged',
        });
        expect(jw.status?.phase, `edit ${edit}`).toBe('Blocked');
        expect(await deployedRevision(), `edit ${edit}`).toBe('1');
        expect(
          (jw.status?.history as Array<{ revision: string }>).map((e) => e.revision),
        ).toContain('1');
      }
      expect(runner.events.filter((e) => e.revision !== '1')).toEqual([]);
    },
  );

  it('blocks a rollout and a rollback that drop a schema version still in flight, naming the versions', async () => {
    await operator();
    await apply(spec());
    await rolledOut('1');
    await apply(spec({ contract: { schemaVersions: [2] } }));
    const fwd = await eventually('forward blocked', async () => {
      const jw = await getJw();
      return condition(jw, 'RolloutBlocked')?.status === 'True' ? jw : undefined;
    });
    expect(condition(fwd, 'RolloutBlocked')).toMatchObject({
      reason: 'SchemaVersionIncompatible',
      message: expect.stringContaining(
        'Revision 2 accepts schema versions [2], but [1] may still be queued (the running revision 1 accepts [1, 2])',
      ),
    });
    expect(await deployedRevision()).toBe('1');

    // A compatible step forward: [1, 2, 3] is revision 3.
    await apply(spec({ contract: { schemaVersions: [1, 2, 3] } }));
    await rolledOut('3');
    // Producers now send version 3 only; going back to revision 1 ([1, 2]) would strand it.
    await apply(spec({ contract: { schemaVersions: [1, 2], producerVersions: [3] } }));
    const back = await eventually('rollback blocked', async () => {
      const jw = await getJw();
      return condition(jw, 'RolloutBlocked')?.status === 'True' ? jw : undefined;
    });
    expect(condition(back, 'RolloutBlocked')).toMatchObject({
      reason: 'SchemaVersionIncompatible',
      message: expect.stringContaining(
        'Rolling back to revision 1 accepts schema versions [1, 2], but [3] may still be queued (producers declare [3])',
      ),
    });
    expect(await deployedRevision()).toBe('3');
    expect(back.status?.rollout).toBeUndefined();
  });
});

describe('rollback, in a fixed order', () => {
  it('drains the rolled-back revision first (deadline kept), then restores the previous one, then sees age fall', async () => {
    await operator();
    await apply(spec());
    await rolledOut('1');
    await apply(spec({ image: 'registry.example.com/shipping/worker:2' }));
    await rolledOut('2');
    // In flight on revision 2 when the rollback begins: two finish in time, two outlive the 4 s deadline.
    const short = [
      await h.job('s-1', { payload: { orderId: 's-1', ms: 1500 } }),
      await h.job('s-2', { payload: { orderId: 's-2', ms: 1500 } }),
    ];
    const long = [
      await h.job('l-1', { payload: { orderId: 'l-1', ms: 9000 } }),
      await h.job('l-2', { payload: { orderId: 'l-2', ms: 9000 } }),
    ];
    await eventually('all four running', async () =>
      (await h.effects()) === 4 ? true : undefined,
    );

    const rollbackAt = Date.now();
    await apply(spec()); // back to revision 1's template
    const phases: string[] = [];
    let drainingMessage = '';
    const done = await eventually(
      'RollbackComplete',
      async () => {
        const jw = await getJw();
        const phase = jw.status?.rollout?.phase ?? (jw.status?.lastRollback ? 'Done' : 'None');
        if (phases.at(-1) !== phase) phases.push(phase);
        const d = condition(jw, 'Draining');
        if (d?.status === 'True') drainingMessage = d.message ?? '';
        return condition(jw, 'Progressing')?.reason === 'RollbackComplete' ? jw : undefined;
      },
      90_000,
      100,
    );
    expect(phases.filter((p) => p !== 'None')).toEqual(
      ['Draining', 'Restoring', 'Verifying', 'Done'].filter((p) => phases.includes(p)),
    );
    expect(phases).toContain('Draining');
    expect(drainingMessage).toMatch(
      /Draining revision 2 before revision 1 starts.*deadline \d{4}-\d\d-\d\dT/,
    );
    expect(done.status?.lastRollback).toMatchObject({
      from: '2',
      to: '1',
      result: 'Complete',
      trigger: 'SpecReverted',
      drainEndedBy: 'PodsGone', // the workers finished by the deadline, so did their pods
    });
    expect(await deployedRevision()).toBe('1');

    // The order, from the runner's clock: every revision-2 process gone before any restored revision-1 pod exists.
    const ev = runner.events.filter((e) => e.at >= rollbackAt);
    const lastOldGone = Math.max(
      ...ev.filter((e) => e.revision === '2' && e.kind === 'exited').map((e) => e.at),
    );
    const firstRestored = Math.min(
      ...ev.filter((e) => e.revision === '1' && e.kind === 'seen').map((e) => e.at),
    );
    expect(Number.isFinite(lastOldGone) && Number.isFinite(firstRestored)).toBe(true);
    expect(lastOldGone).toBeLessThan(firstRestored);
    // The drain deadline (4 s) held within ±2 s for the pods whose jobs outlived it.
    const drainTimes = [
      ...new Set(ev.filter((e) => e.revision === '2' && e.kind === 'sigterm').map((e) => e.pod)),
    ].map((pod) => {
      const term = ev.find((e) => e.pod === pod && e.kind === 'sigterm')!.at;
      const exit = ev.find((e) => e.pod === pod && e.kind === 'exited')!.at;
      return (exit - term) / 1000;
    });
    console.log(
      `drain times of revision-2 pods (s): ${drainTimes.map((t) => t.toFixed(2)).join(', ')}`,
    );
    expect(Math.max(...drainTimes)).toBeGreaterThanOrEqual(3.5);
    expect(Math.max(...drainTimes)).toBeLessThanOrEqual(6);

    // Work in time was acked; the rest came back and ran once more, on revision 1.
    for (const j of [...short, ...long])
      await eventually(
        `${j.key} completed`,
        async () => ((await h.claim(j.key))?.state === 'completed' ? true : undefined),
        60_000,
      );
    for (const j of short) expect(await h.effects(j.key)).toBe(1);
    const restoredPids = new Set(
      ev
        .filter((e) => e.revision === '1' && e.kind === 'started')
        .map((e) => Number(e.detail?.split(' ')[1])),
    );
    for (const j of long) {
      const claim = await h.claim(j.key);
      expect(restoredPids.has((claim?.result as { pid: number }).pid)).toBe(true);
    }
  });

  it('rolls back by itself when a new revision makes queue age rise, end to end', async () => {
    await operator();
    const base = {
      scaling: { minReplicas: 1, maxReplicas: 1 },
      rollout: { autoRollback: true, analysisSeconds: 120, verifySeconds: 60 },
    };
    await apply(spec(base));
    await rolledOut('1');
    // Revision 2 is slow: one job a second per worker, against four a second published.
    await apply(
      spec({
        ...base,
        env: [{ name: 'JOBFLEET_TEST_HANDLER_MS', value: '1000' }],
        prefetch: 1,
      }),
    );
    await rolledOut('2');
    let producing = true;
    const producer = (async () => {
      for (let n = 0; producing; n++) {
        await h.job(`a-${n}`);
        await new Promise((r) => setTimeout(r, 250));
      }
    })();
    try {
      const done = await eventually(
        'the automatic rollback to finish',
        async () => {
          const jw = await getJw();
          return jw.status?.lastRollback?.trigger === 'AutoRollback' && !jw.status?.rollout
            ? jw
            : undefined;
        },
        120_000,
        250,
      );
      expect(done.status?.lastRollback).toMatchObject({ from: '2', to: '1', result: 'Complete' });
      expect(done.status?.abortedRevision).toBe('2');
      expect(await deployedRevision()).toBe('1');
      const events = await client.list<KubeObject & { reason: string; message: string }>(
        'v1',
        'Event',
        ns.namespace,
      );
      const started = events.items.find((e) => e.reason === 'RollbackStarted');
      expect(started?.message).toMatch(
        /Rolling back from revision 2 to 1 \(queue age rose from \d+ s to \d+ s, past the 3 s objective/,
      );
      // The spec still says revision 2; it stays off until the spec changes.
      expect(done.status?.updateRevision).toBe('1');
    } finally {
      producing = false;
      await producer;
    }
  });
});

describe('kubectl jobworker', () => {
  it('status, history, undo and why, through the real kubectl', async () => {
    const kubectl = kubectlWithPlugin(ns.kubeconfigPath);
    const jw = (...a: string[]) => kubectl('jobworker', ...a, '-n', ns.namespace);
    await operator();
    await apply(spec());
    await rolledOut('1');
    await apply(spec({ image: 'registry.example.com/shipping/worker:2' }));
    await rolledOut('2');

    const healthy = await jw('status', NAME);
    expect(healthy.stdout).toMatch(/Phase:\s+Healthy/);
    expect(healthy.stdout).toMatch(/Revision:\s+current 2, update 2/);
    expect(healthy.code).toBe(0);
    const history = await jw('history', NAME);
    expect(history.stdout.split('\n')[0]).toMatch(/^REVISION\s+IMAGE\s+KEY RULE\s+SCHEMA VERSIONS/);
    expect(history.stdout).toMatch(
      /^1\s+registry.example.com\/shipping\/worker:1\s+order:\{orderId\}:ship\s+1,2/m,
    );
    expect(history.stdout).toMatch(/^2\s+registry.example.com\/shipping\/worker:2 .*current$/m);

    const undo = await jw('undo', NAME);
    expect(undo.stdout).toContain(
      'rolling back to revision 1 (registry.example.com/shipping/worker:1)',
    );
    expect(undo.code).toBe(0);
    // --watch follows the rollback to its end and exits 0 once healthy.
    const watched = await jw('status', NAME, '--watch', '--timeout', '90s');
    expect(watched.stdout).toMatch(
      /Progressing: RollbackComplete — Rolled back from revision 2 to 1/,
    );
    expect(watched.stdout).toMatch(/Phase:\s+Healthy/);
    expect(watched.code).toBe(0);
    expect(await deployedRevision()).toBe('1');

    await apply(spec({ contract: { idempotencyKey: 'order:{orderId}:v2' } }));
    await eventually('blocked', async () =>
      condition(await getJw(), 'RolloutBlocked')?.status === 'True' ? true : undefined,
    );
    const blocked = await jw('status', NAME);
    expect(blocked.code).toBe(1);
    const why = await jw('why', NAME);
    expect(why.stdout).toContain(
      'Rollout blocked (IdempotencyKeyRuleChanged): Revision 3 changes the idempotency-key rule',
    );
    expect(why.stdout).toContain('Restore spec.contract.idempotencyKey to "order:{orderId}:ship"');
    const none = await jw('undo', NAME, '--to-revision', '9');
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('revision 9 is not in the history');
  }, 180_000); // a watched rollback and a dozen kubectl runs: slow on a loaded machine
});

describe('an operator killed mid-rollback', () => {
  /** `src/main.ts` in its own process, as a Deployment's pod runs it. */
  async function operatorProcess(): Promise<ChildProcess> {
    const { proc } = await spawnOperator(ns, `op-${procs.length}`);
    procs.push(proc);
    return proc;
  }
  const exited = (p: ChildProcess) =>
    new Promise<NodeJS.Signals | null>((r) =>
      p.exitCode !== null || p.signalCode !== null
        ? r(p.signalCode)
        : p.once('exit', (_c, sig) => r(sig)),
    );
  /**
   * SIGKILLs `proc` from outside the moment the JobWorker's status records rollback step
   * `step` (a watch on it, so the operator has no time for another reconcile), as a node
   * failing under it would: the next operator must resume from the status alone.
   */
  function killAtStep(proc: ChildProcess, step: string): Promise<void> {
    const stop = new AbortController();
    return new Promise<void>((resolve, reject) => {
      client
        .watch(
          `/apis/jobfleet.dev/v1alpha1/namespaces/${ns.namespace}/jobworkers`,
          { fieldSelector: `metadata.name=${NAME}` },
          (_type, obj) => {
            const phase = (obj as { status?: { rollout?: { phase?: string } } }).status?.rollout
              ?.phase;
            if (phase !== step) return;
            proc.kill('SIGKILL');
            stop.abort();
            resolve();
          },
          stop.signal,
        )
        .catch((err: Error) => (stop.signal.aborted ? undefined : reject(err)));
    });
  }

  it('resumes at each step — draining, restoring, verifying — and completes', async () => {
    let proc = await operatorProcess();
    await apply(spec());
    await rolledOut('1');
    await apply(spec({ image: 'registry.example.com/shipping/worker:2' }));
    await rolledOut('2');
    // A job that outlives the drain deadline is in flight when the rollback begins.
    await h.job('k-long', { payload: { orderId: 'k-long', ms: 9000 } });
    await eventually('the long job running', async () =>
      (await h.effects()) === 1 ? true : undefined,
    );
    let killer = killAtStep(proc, 'Draining');
    await apply(spec());
    const killedIn: string[] = [];
    for (const [step, next] of [
      ['Draining', 'Restoring'],
      ['Restoring', 'Verifying'],
      ['Verifying', undefined],
    ] as const) {
      // The operator records the step and is killed; the step is what the next one finds.
      await killer;
      expect(await exited(proc)).toBe('SIGKILL');
      expect((await getJw()).status?.rollout?.phase).toBe(step);
      killedIn.push(step);
      proc = await operatorProcess();
      if (next) killer = killAtStep(proc, next);
    }
    const done = await eventually(
      'RollbackComplete after the restarts',
      async () => {
        const jw = await getJw();
        return condition(jw, 'Progressing')?.reason === 'RollbackComplete' ? jw : undefined;
      },
      120_000,
    );
    expect(killedIn).toEqual(['Draining', 'Restoring', 'Verifying']);
    expect(done.status?.lastRollback).toMatchObject({ from: '2', to: '1', result: 'Complete' });
    expect(await deployedRevision()).toBe('1');
    // Never both at once: no revision-1 pod appeared before the last revision-2 process exited.
    const after = runner.events.filter((e) => e.kind === 'sigterm' && e.revision === '2')[0]!.at;
    const lastOld = Math.max(
      ...runner.events.filter((e) => e.revision === '2' && e.kind === 'exited').map((e) => e.at),
    );
    const firstNew = Math.min(
      ...runner.events
        .filter((e) => e.revision === '1' && e.kind === 'seen' && e.at > after)
        .map((e) => e.at),
    );
    expect(lastOld).toBeLessThan(firstNew);
    // The long job came back unacked and ran once more, to completion.
    await eventually('k-long completed', async () =>
      (await h.claim('order:k-long:ship'))?.state === 'completed' ? true : undefined,
    );
  }, 180_000); // three operator processes started in turn: slow on a loaded machine
});
