// Scale-down removes the idlest pods first: the choice (src/reconcile/scaling/scale-down.ts),
// and the plan that asks what each pod holds before it lowers the replicas,
// marks the chosen pods, and says what the scale-down interrupted.
import { describe, expect, it } from 'vitest';
import { parseSpec } from '../../src/api/jobworker.js';
import type { KubeObject } from '../../src/kube/client.js';
import type { Observation } from '../../src/reconcile/model/observation.js';
import { planToCompletion, type Plan } from '../../src/reconcile/plan.js';
import {
  CHOSEN_COST,
  chooseRemovals,
  type PodLoad,
} from '../../src/reconcile/scaling/scale-down.js';
import { applied, podCosts } from './plan-writes.js';

const idle = (pod: string, cost?: string): PodLoad => ({
  pod,
  held: { deliveries: 0, oldestSeconds: 0 },
  ...(cost !== undefined && { cost }),
});
const busy = (pod: string, deliveries: number, oldestSeconds: number): PodLoad => ({
  pod,
  held: { deliveries, oldestSeconds },
});

describe('chooseRemovals', () => {
  it('takes the idle pods, marks only them, and interrupts nothing', () => {
    const r = chooseRemovals([busy('a', 8, 120), idle('b'), busy('c', 3, 40), idle('d')], 2);
    expect(r.chosen).toEqual(['b', 'd']);
    expect(r.writes).toEqual([
      { pod: 'b', cost: CHOSEN_COST },
      { pod: 'd', cost: CHOSEN_COST },
    ]);
    expect(r.heldDeliveries).toBe(0);
  });

  it('short of idle pods, the ones holding least, then the youngest work; it counts what they hold', () => {
    const r = chooseRemovals([busy('a', 2, 300), busy('b', 2, 5), busy('c', 7, 1), idle('d')], 3);
    expect(r.chosen).toEqual(['d', 'b', 'a']);
    expect(r.heldDeliveries).toBe(4);
  });

  it('a pod that did not answer goes after the idle ones and before any that holds work', () => {
    const r = chooseRemovals([busy('a', 1, 1), { pod: 'b' }, idle('c')], 2);
    expect(r.chosen).toEqual(['c', 'b']);
  });

  it('no write for a pod already marked; an earlier mark on a pod that stays is taken off', () => {
    const r = chooseRemovals([idle('a', CHOSEN_COST), busy('b', 4, 10), busy('c', 1, 1)], 1);
    expect(r.chosen).toEqual(['a']);
    expect(r.writes).toEqual([]);
    const later = chooseRemovals(
      [busy('a', 3, 10), idle('b'), { ...busy('c', 5, 5), cost: CHOSEN_COST }],
      1,
    );
    expect(later.writes).toEqual([
      { pod: 'b', cost: CHOSEN_COST },
      { pod: 'c', cost: null },
    ]);
  });

  it('leaves a cost someone else set alone', () => {
    const r = chooseRemovals([idle('a'), { ...busy('b', 1, 1), cost: '100' }], 1);
    expect(r.writes).toEqual([{ pod: 'a', cost: CHOSEN_COST }]);
  });
});

describe('the plan of a scale-down', () => {
  const NOW = new Date('2026-11-30T12:00:00Z');
  const spec = (removeIdleFirst: boolean) => ({
    image: 'registry.example.com/w:1',
    broker: { urlSecretRef: { name: 'r', key: 'url' }, queue: 'q' },
    claims: { urlSecretRef: { name: 'c', key: 'url' } },
    contract: { idempotencyKey: 'order:{id}', schemaVersions: [1] },
    deadLetter: { owner: 'team' },
    scaling: { minReplicas: 2, maxReplicas: 2, targetOldestAgeSeconds: 30, removeIdleFirst },
  });

  /** Plans once, answering what the plan asks; `podLoad` answers the scale-down's read. */
  function plan(obs: Observation, podLoad?: PodLoad[]): { plan: Plan; asked: string[] } {
    const asked: string[] = [];
    const p = planToCompletion(
      {
        obs,
        memory: {
          scaling: { recommendations: [{ at: NOW.getTime() - 400_000, replicas: 2 }] },
          age: {},
        },
        now: NOW,
        pollMs: 10_000,
      },
      (need, answers) => {
        asked.push(need.kind);
        if (need.kind === 'podLoad') answers.podLoad = podLoad;
        else if (need.kind === 'workers') answers.workers = [];
        else if (need.kind === 'pods') answers.pods = { ...answers.pods, [need.revision]: [] };
        else if (need.kind === 'seenVersions') answers.seenVersions = undefined;
        else if (need.kind === 'queued') answers.queued = undefined;
        else if (need.kind === 'revisionSpec')
          answers.revisionSpecs = { ...answers.revisionSpecs, [need.revision]: undefined };
        else answers.cohortSamples = [];
      },
    );
    return { plan: p, asked };
  }

  /** A JobWorker whose fleet of `live` replicas is settled, and an empty queue. */
  function settled(removeIdleFirst: boolean, live: number): Observation {
    const raw: KubeObject = {
      apiVersion: 'jobfleet.dev/v1alpha1',
      kind: 'JobWorker',
      metadata: { name: 'w', namespace: 'ns', uid: 'u-1', generation: 1 },
      spec: spec(removeIdleFirst),
    };
    const parsed = parseSpec(raw.spec);
    if (!parsed.ok) throw new Error(parsed.problems.join('; '));
    const obs = (deployment?: KubeObject, status?: unknown): Observation => ({
      raw: { ...raw, ...(status !== undefined && { status }) },
      spec: parsed.spec,
      problems: [],
      secrets: new Map(),
      others: [],
      pods: [],
      records: [],
      deployment,
      queue: {
        ok: true,
        stats: {
          type: 'classic',
          messagesReady: 0,
          messagesUnacked: 0,
          consumers: live,
          publishRate: 0,
          ackRate: 0,
        },
      },
      polling: true,
    });
    // First reconcile: the Deployment as the operator would create it; then the fleet at `live`, ready.
    const first = plan(obs()).plan;
    const d = applied(first).find((c) => c.kind === 'Deployment')!;
    const deployment: KubeObject = {
      ...d,
      metadata: { ...d.metadata, generation: 1 },
      spec: { ...(d.spec as object), replicas: live },
      status: {
        observedGeneration: 1,
        replicas: live,
        readyReplicas: live,
        updatedReplicas: live,
        availableReplicas: live,
      },
    };
    return obs(deployment, first.status);
  }

  it('asks what each pod holds, marks the idle ones, then lowers the replicas, saying nothing was interrupted', () => {
    const load = [busy('w-a', 6, 90), idle('w-b'), busy('w-c', 2, 30), idle('w-d')];
    const { plan: p, asked } = plan(settled(true, 4), load);
    expect(asked).toContain('podLoad');
    expect(p.desiredReplicas).toBe(2);
    expect(podCosts(p)).toEqual([
      { pod: 'w-b', cost: CHOSEN_COST },
      { pod: 'w-d', cost: CHOSEN_COST },
    ]);
    expect(p.scaleDownHeld).toBe(0);
    expect(p.events.find((e) => e.reason === 'ScaledDown')?.message).toMatch(
      /Scaled from 4 to 2 replicas\. .* Removing the idlest pods \(w-b, w-d\): no delivery interrupted\.$/,
    );
    expect(p.status.lastScaleDown).toMatchObject({ from: 4, to: 2, heldDeliveries: 0 });
  });

  it('pods that do not answer: the scale-down goes ahead, the ReplicaSet choosing', () => {
    const { plan: p } = plan(settled(true, 4), undefined);
    expect(p.desiredReplicas).toBe(2);
    expect(podCosts(p)).toBeUndefined();
  });

  it('switched off (removeIdleFirst: false): no read, no pod write', () => {
    const { plan: p, asked } = plan(settled(false, 4));
    expect(asked).not.toContain('podLoad');
    expect(p.desiredReplicas).toBe(2);
    expect(podCosts(p)).toBeUndefined();
  });

  it('a steady fleet asks nothing and writes no pod', () => {
    const { plan: p, asked } = plan(settled(true, 2));
    expect(asked).not.toContain('podLoad');
    expect(podCosts(p)).toBeUndefined();
  });
});
