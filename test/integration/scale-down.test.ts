// Scale-down removes idle workers first, on the real apiserver (its real
// ReplicaSet controller picks the pods) with real worker processes (the local
// runner): a fleet of 4 where 2 pods hold long jobs goes to 2, ten times; the
// pods that go are the idle ones, and no job is interrupted or run twice —
// from the runner's process timestamps and the claims table.
// JOBFLEET_TEST_REMOVE_IDLE_FIRST=false runs the same scenario with the
// feature off, to see that the test bites.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { KubeObject } from '../../src/kube/client.js';
import type { Operator } from '../../src/operator.js';
import { testOperator } from '../fixtures/operator.js';
import { NAME, runnerGround, type RunnerGround } from '../fixtures/runner-ground.js';
import { eventually } from '../ground/eventually.js';

let g: RunnerGround;
let op: Operator | undefined;

beforeEach(async () => {
  g = await runnerGround();
});
afterEach(async () => {
  await op?.stop();
  op = undefined;
  await g?.cleanup();
});

const RUNS = 10;
const LONG_MS = 6000;
const removeIdleFirst = process.env.JOBFLEET_TEST_REMOVE_IDLE_FIRST !== 'false';

describe('scale-down removes idle workers first', () => {
  it(`4 → 2 with two pods holding long jobs: the idle pods go, nothing is interrupted (${RUNS} times)`, async () => {
    op = await testOperator(g.client, g.ns.namespace, { pollMs: 1000 });
    const spec = (replicas: number) =>
      g.spec({
        prefetch: 1, // a pod holds at most one delivery: two long jobs are on two pods
        scaling: {
          minReplicas: replicas,
          maxReplicas: replicas,
          targetOldestAgeSeconds: 60,
          removeIdleFirst,
        },
        shutdown: { drainDeadlineSeconds: 1 }, // a busy pod chosen would cut its job short
      });
    const livePods = async () =>
      (
        await g.client.list<
          KubeObject & { status?: { conditions?: Array<{ type: string; status: string }> } }
        >('v1', 'Pod', g.ns.namespace, { labelSelector: `jobfleet.dev/jobworker=${NAME}` })
      ).items.filter((p) => !p.metadata.deletionTimestamp);
    const pidPod = (pid: number) =>
      g.runner.events.find((e) => e.kind === 'started' && e.detail === `pid ${pid}`)?.pod;

    const interrupted: string[] = [];
    for (let run = 1; run <= RUNS; run++) {
      await g.apply(spec(4));
      await eventually(
        'four ready workers',
        async () => {
          const pods = await livePods();
          return pods.length === 4 &&
            pods.every((p) =>
              p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
            )
            ? true
            : undefined;
        },
        60_000,
      );
      // A few quick jobs first move RabbitMQ's round robin on, so that the long jobs land on
      // different pods from run to run (old ones, new ones), not always where the ReplicaSet
      // would not look.
      const before = await g.h.effects();
      const quick = run % 4;
      for (let i = 0; i < quick; i++) await g.h.job(`quick-${run}-${i}`);
      await eventually('the quick jobs done', async () =>
        (await g.h.effects()) >= before + quick ? true : undefined,
      );
      const t0 = Date.now();
      const keys = [
        (await g.h.job(`long-${run}-a`, { payload: { orderId: `long-${run}-a`, ms: LONG_MS } }))
          .key,
        (await g.h.job(`long-${run}-b`, { payload: { orderId: `long-${run}-b`, ms: LONG_MS } }))
          .key,
      ];
      await eventually('both long jobs running', async () =>
        (await g.h.effects(keys[0])) >= 1 && (await g.h.effects(keys[1])) >= 1 ? true : undefined,
      );
      await g.apply(spec(2));
      await eventually(
        'two pods left',
        async () => ((await livePods()).length === 2 ? true : undefined),
        60_000,
      );
      const claims = await eventually(
        'both long jobs completed',
        async () => {
          const cs = await Promise.all(keys.map((k) => g.h.claim(k)));
          return cs.every((c) => c?.completed_at) ? cs : undefined;
        },
        60_000,
      );
      // Who ran them: the pid in the handler's result, the pod the runner started with it.
      const holders = claims.map((c) => pidPod((c!.result as { pid: number }).pid));
      const stopped = g.runner.events
        .filter((e) => e.kind === 'sigterm' && e.at >= t0)
        .map((e) => e.pod);
      for (const [i, key] of keys.entries()) {
        const effects = await g.h.effects(key);
        if (effects !== 1 || stopped.includes(holders[i]!))
          interrupted.push(
            `run ${run}: ${key} on ${holders[i]} (effects ${effects}, stopped ${stopped.join(', ')})`,
          );
      }
      expect(stopped).toHaveLength(2);
    }
    expect(interrupted).toEqual([]);
    const jw = await g.getJw();
    expect(jw.status?.lastScaleDown).toMatchObject({ from: 4, to: 2, heldDeliveries: 0 });
  }, 600_000);
});
