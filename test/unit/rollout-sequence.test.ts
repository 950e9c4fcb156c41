// Rollout sequence tests (after cluster-api's machinedeployment rollout
// sequence tests): the whole pure plan of a reconcile (src/reconcile/plan.ts:
// scaling, rollout, children, status) drives a small simulated world — a Deployment that rolls
// pods with maxSurge 25% / maxUnavailable 0, pods that start, become ready,
// drain for a while when terminated, or crash-loop — one simulated second at
// a time, with the simulated controllers in a fixed order or a seeded random
// one. Every step checks what users rely on:
//   1. no revision the gate would refuse ever gets a consuming pod;
//   2. in a rollback, no pod of the restored revision consumes while a pod
//      of the aborted one still exists (unless the drain deadline passed);
//   3. a drain ends by its deadline, and pods get the drain deadline to exit;
//   4. status is consistent: observedGeneration, currentRevision names the
//      revision whose pods run, and a Healthy phase means nothing pending;
//   5. an operator restart (or a lost and regained leadership) at any step —
//      reconciles missed, then a fresh one — ends the same way.
import { afterEach, describe, expect, it } from 'vitest';
import { parseSpec, type JobWorkerSpec, type JobWorkerStatus } from '../../src/api/jobworker.js';
import type { KubeObject } from '../../src/kube/client.js';
import { deployedContract, revisionOf } from '../../src/reconcile/children/desired.js';
import type { Observation } from '../../src/reconcile/model/observation.js';
import { planToCompletion, type ScalingMemory } from '../../src/reconcile/plan.js';

import { gate, type Contract } from '../../src/reconcile/rollout/gate.js';
import { prng } from '../ground/prng.js';
import { answerFromWorld } from './sequence-answers.js';
import { Transcript } from './transcript.js';
import { applied, deleted, recorded } from './plan-writes.js';

const REPLICAS = 2;
const START_S = 2; // a pod is ready this long after it is created
const DRAIN_S = 4; // a terminated worker finishes its in-flight jobs in this long

interface Pod {
  id: number;
  revision: string;
  contract: Contract;
  createdAt: number;
  terminatingAt?: number;
  /** ready (consuming) unless terminating */
  ready: boolean;
  crashLoop: boolean;
  restarts: number;
  /** how long it takes to exit once terminated (a worker stuck in a handler takes longer) */
  drainS: number;
}

interface Scenario {
  historyLimit?: number;
  /** the queue's oldest-message age at simulated second t */
  age?: (t: number) => number;
  /** revisions whose pods crash-loop */
  crashLoops?: string[];
  /** pods that ignore SIGTERM until the grace period ends */
  stuckDrain?: boolean;
  seed?: number;
  /** seconds during which the operator does not reconcile (restart, lost leadership) */
  operatorDown?: (t: number) => boolean;
  /** the work queue's type on the broker; the spec's when unset */
  queueType?: 'classic' | 'quorum';
}

function specJson(
  overrides: {
    keyRule?: string;
    schemaVersions?: number[];
    producerVersions?: number[];
    image?: string;
    paused?: boolean;
    queueType?: 'classic' | 'quorum';
  } = {},
  historyLimit = 10,
) {
  return {
    ...(overrides.paused !== undefined && { paused: overrides.paused }),
    image: overrides.image ?? 'registry.example.com/w:1',
    broker: {
      urlSecretRef: { name: 'r', key: 'url' },
      queue: 'q',
      ...(overrides.queueType && { queueType: overrides.queueType }),
    },
    claims: { urlSecretRef: { name: 'c', key: 'url' } },
    contract: {
      idempotencyKey: overrides.keyRule ?? 'order:{id}',
      schemaVersions: overrides.schemaVersions ?? [1],
      ...(overrides.producerVersions && { producerVersions: overrides.producerVersions }),
    },
    deadLetter: { owner: 'team' },
    scaling: { minReplicas: REPLICAS, maxReplicas: REPLICAS, targetOldestAgeSeconds: 30 },
    shutdown: { drainDeadlineSeconds: 10 },
    rollout: { historyLimit, analysisSeconds: 120, verifySeconds: 60 },
  };
}

/**
 * Every World a test made, checked after the test: the invariants hold at
 * every simulated second of every sequence, whether or not the test looks.
 */
const worlds: World[] = [];
afterEach(() => {
  for (const w of worlds.splice(0)) expect(w.violations, 'invariants broken').toEqual([]);
});

class World {
  t = 0;
  generation = 1;
  spec: Record<string, unknown>;
  status: JobWorkerStatus | undefined;
  deployment: KubeObject | undefined;
  pods: Pod[] = [];
  private nextPod = 1;
  private readonly random: () => number;
  readonly violations: string[] = [];
  /** what the planner saw and decided, step by step (./transcript.ts) */
  readonly transcript = new Transcript();
  /** every revision that ever had a consuming pod, with the contract it ran */
  readonly consumed = new Map<string, Contract>();
  /** the revision whose pods consumed most recently, and its contract */
  private running: { revision: string; contract: Contract } | undefined;
  private memory: ScalingMemory | undefined;
  /** how long a new pod takes to be ready */
  startS = START_S;
  /** each revision's recorded spec (its ControllerRevision), by revision */
  readonly records = new Map<string, Record<string, unknown>>();

  constructor(
    spec: Record<string, unknown>,
    private readonly sc: Scenario = {},
  ) {
    this.spec = spec;
    this.random = prng(sc.seed ?? 1);
    worlds.push(this);
  }

  get parsed(): JobWorkerSpec {
    const p = parseSpec(this.spec);
    if (!p.ok) throw new Error(p.problems.join('; '));
    return p.spec;
  }

  edit(spec: Record<string, unknown>): void {
    this.spec = spec;
    this.generation++;
  }

  private raw(): KubeObject {
    return {
      apiVersion: 'jobfleet.dev/v1alpha1',
      kind: 'JobWorker',
      metadata: { name: 'w', namespace: 'ns', uid: 'u-1', generation: this.generation },
      spec: this.spec,
      ...(this.status && { status: this.status }),
    };
  }

  /** What the operator would read now: the world as an Observation. */
  private observe(now: Date): Observation {
    const age = this.sc.age?.(this.t);
    return {
      raw: this.raw(),
      spec: this.parsed,
      problems: [],
      secrets: new Map(),
      others: [],
      pods: [],
      records: [],
      deployment: this.deployment && structuredClone(this.deployment),
      queue:
        age === undefined
          ? { ok: false, missing: 'no queue signal in this scenario' }
          : {
              ok: true,
              stats: {
                type: this.sc.queueType ?? this.parsed.broker.queueType,
                messagesReady: age > 0 ? 10 : 0,
                messagesUnacked: 0,
                consumers: REPLICAS,
                headMessageTimestamp: now.getTime() / 1000 - age,
                publishRate: 1,
                ackRate: 1,
              },
            },
      polling: age !== undefined,
    };
  }

  /** One reconcile: the whole pure plan (answering what it asks from the world), applied. */
  reconcile(): void {
    const now = new Date(Date.UTC(2026, 10, 30) + this.t * 1000);
    const obs = this.observe(now);
    const plan = planToCompletion(
      { obs, memory: this.memory, now, pollMs: 10_000 },
      answerFromWorld(this),
    );
    this.memory = plan.memory;
    this.transcript.step(this.t, this.generation, this.pods, plan);
    // ControllerRevisions: created once, never patched; pruned by name
    for (const r of recorded(plan)) {
      const rev = String((r as { revision?: number }).revision);
      if (!this.records.has(rev))
        this.records.set(rev, (r as unknown as { data: Record<string, unknown> }).data);
    }
    for (const name of deleted(plan, 'ControllerRevision'))
      this.records.delete(name.slice(name.lastIndexOf('-') + 1));
    const desired = applied(plan).find((c) => c.kind === 'Deployment') as KubeObject;
    const changed = JSON.stringify(desired.spec) !== JSON.stringify(this.deployment?.spec);
    if (changed) {
      const generation = (this.deployment?.metadata.generation ?? 0) + 1;
      this.deployment = {
        ...desired,
        metadata: {
          ...desired.metadata,
          generation,
          creationTimestamp: this.deployment?.metadata.creationTimestamp ?? now.toISOString(),
        },
        status: this.deployment?.status ?? {},
      };
      this.syncDeploymentStatus(false);
    }
    // A new JobWorker's first status may wait for it to turn Available (src/reconcile/status/first-status.ts).
    if (plan.statusHeldMs !== undefined) return;
    this.status = plan.status;
    this.checkStatus();
  }

  /** The Deployment controller and the kubelet, for one second. */
  private controllers(): void {
    const d = this.deployment;
    if (!d) return;
    const rev = revisionOf(d) as string;
    const contract = deployedContract(d) as Contract;
    const want = (d.spec as { replicas: number }).replicas;
    const grace = (d.spec as { template: { spec: { terminationGracePeriodSeconds: number } } })
      .template.spec.terminationGracePeriodSeconds;
    // kubelet: pods start, crash, become ready; terminated ones exit after draining (or at the grace period)
    for (const p of this.pods) {
      if (p.terminatingAt !== undefined) continue;
      if (p.crashLoop) {
        if (this.t - p.createdAt >= this.startS) p.restarts++;
      } else if (this.t - p.createdAt >= this.startS) p.ready = true;
    }
    this.pods = this.pods.filter(
      (p) =>
        p.terminatingAt === undefined ||
        this.t - p.terminatingAt < Math.min(p.drainS, grace) ||
        this.t - p.terminatingAt < 0,
    );
    const live = this.pods.filter((p) => p.terminatingAt === undefined);
    const current = live.filter((p) => p.revision === rev);
    const old = live.filter((p) => p.revision !== rev);
    const terminate = (p: Pod) => {
      p.terminatingAt = this.t;
      p.ready = false;
    };
    // scale down: the old revision's pods first, then the newest
    let excess = live.length - want - (old.length && want > 0 ? Math.ceil(want * 0.25) : 0);
    for (const p of [...old, ...current.reverse()]) {
      if (excess <= 0) break;
      if (want === 0 || p.revision !== rev || current.length > want) {
        terminate(p);
        excess--;
      }
    }
    const alive = () => this.pods.filter((p) => p.terminatingAt === undefined);
    // roll: surge new pods, retire an old one for each new one ready
    const surge = want > 0 ? Math.ceil(want * 0.25) : 0;
    while (alive().filter((p) => p.revision === rev).length < want && alive().length < want + surge)
      this.pods.push({
        id: this.nextPod++,
        revision: rev,
        contract,
        createdAt: this.t,
        ready: false,
        crashLoop: this.sc.crashLoops?.includes(rev) ?? false,
        restarts: 0,
        drainS: this.sc.stuckDrain ? Infinity : DRAIN_S,
      });
    const readyNew = alive().filter((p) => p.revision === rev && p.ready).length;
    const oldAlive = alive().filter((p) => p.revision !== rev);
    const retire = Math.max(0, oldAlive.length - Math.max(0, want - readyNew));
    for (const p of oldAlive.slice(0, retire)) terminate(p);
    this.syncDeploymentStatus(true);
  }

  private syncDeploymentStatus(observed: boolean): void {
    const d = this.deployment as KubeObject;
    const rev = revisionOf(d);
    const live = this.pods.filter((p) => p.terminatingAt === undefined);
    d.status = {
      observedGeneration: observed
        ? (d.metadata.generation ?? 0)
        : ((d.status as { observedGeneration?: number }).observedGeneration ?? 0),
      replicas: live.length,
      updatedReplicas: live.filter((p) => p.revision === rev).length,
      readyReplicas: live.filter((p) => p.ready).length,
      availableReplicas: live.filter((p) => p.ready).length,
    };
  }

  /** Invariants 1–3, on the pods as they are. */
  private checkPods(): void {
    const consuming = this.pods.filter((p) => p.ready && p.terminatingAt === undefined);
    const spec = this.parsed;
    for (const p of consuming) {
      if (!this.consumed.has(p.revision)) {
        // A revision starts consuming: the one that consumed last must let it.
        if (this.running && this.running.revision !== p.revision) {
          const g = gate({
            kind: Number(p.revision) < Number(this.running.revision) ? 'rollback' : 'rollout',
            runningRevision: this.running.revision,
            running: this.running.contract,
            candidateRevision: p.revision,
            candidate: p.contract,
            producerVersions: spec.contract.producerVersions,
          });
          if (!g.ok)
            this.violations.push(
              `t=${this.t}: revision ${p.revision} consumes after ${this.running.revision}: ${g.message}`,
            );
        }
        this.consumed.set(p.revision, p.contract);
      }
    }
    const newest = consuming.at(-1);
    if (newest) this.running = { revision: newest.revision, contract: newest.contract };
    const r = this.status?.rollout;
    if (r && (r.phase === 'Draining' || r.phase === 'Restoring')) {
      const pastDeadline = this.t * 1000 + Date.UTC(2026, 10, 30) > Date.parse(r.drainDeadline);
      const fromLeft = this.pods.some((p) => p.revision === r.from);
      // pods of the restored revision started by the rollback (an unfinished
      // rollout's old pods were there before it, and are drained with the rest)
      const started = Date.parse(r.startedAt);
      const restored = consuming.filter(
        (p) => p.revision === r.to && Date.UTC(2026, 10, 30) + p.createdAt * 1000 >= started,
      );
      if (!pastDeadline && fromLeft && restored.length)
        this.violations.push(
          `t=${this.t}: revision ${r.to} consumes while revision ${r.from}'s pods still exist`,
        );
    }
    if (r?.phase === 'Draining') {
      const overdue = Date.UTC(2026, 10, 30) + this.t * 1000 - Date.parse(r.drainDeadline) > 2000;
      if (overdue) this.violations.push(`t=${this.t}: draining past its deadline`);
    }
    const grace = (
      this.deployment?.spec as
        { template?: { spec?: { terminationGracePeriodSeconds?: number } } } | undefined
    )?.template?.spec?.terminationGracePeriodSeconds;
    if (grace !== undefined && grace < spec.shutdown.drainDeadlineSeconds)
      this.violations.push(
        `t=${this.t}: pods get ${grace} s to exit, less than the drain deadline`,
      );
  }

  /** Invariant 4, right after a status write. */
  private checkStatus(): void {
    const s = this.status as JobWorkerStatus;
    if (s.observedGeneration !== this.generation)
      this.violations.push(`t=${this.t}: observedGeneration ${s.observedGeneration}`);
    const cond = (type: string) => s.conditions?.find((c) => c.type === type)?.status;
    const running = new Set(
      this.pods.filter((p) => p.ready && p.terminatingAt === undefined).map((p) => p.revision),
    );
    if (s.currentRevision && running.size && !running.has(s.currentRevision))
      this.violations.push(
        `t=${this.t}: currentRevision ${s.currentRevision} but pods of [${[...running].join(', ')}] run`,
      );
    if (
      s.phase === 'Healthy' &&
      (cond('RolloutBlocked') !== 'False' ||
        cond('Draining') !== 'False' ||
        cond('Progressing') !== 'False' ||
        s.rollout !== undefined)
    )
      this.violations.push(`t=${this.t}: Healthy with a change pending`);
    if (s.rollout && s.phase === 'Healthy')
      this.violations.push(`t=${this.t}: Healthy while rolling back`);
  }

  /** One simulated second: the controllers and the operator, in a fixed or seeded order. */
  step(): void {
    this.t++;
    const operator = () => {
      if (this.sc.operatorDown?.(this.t)) {
        this.memory = undefined; // a restarted operator (or a new leader) remembers nothing
        return;
      }
      this.reconcile();
    };
    const actors = [() => this.controllers(), operator];
    if (this.sc.seed !== undefined && this.random() < 0.5) actors.reverse();
    for (const a of actors) {
      a();
      this.checkPods();
    }
  }

  run(seconds: number): void {
    for (let i = 0; i < seconds; i++) this.step();
  }

  /** What a scenario ends as: what runs, and what status says. */
  outcome() {
    const s = this.status as JobWorkerStatus;
    return {
      running: [
        ...new Set(this.pods.filter((p) => p.terminatingAt === undefined).map((p) => p.revision)),
      ],
      deployed: revisionOf(this.deployment),
      currentRevision: s.currentRevision,
      phase: s.phase,
      lastRollback: s.lastRollback && {
        from: s.lastRollback.from,
        to: s.lastRollback.to,
        result: s.lastRollback.result,
      },
      abortedRevision: s.abortedRevision,
    };
  }
}

/** A world running revision 1 on every replica. */
function settled(sc: Scenario = {}, spec = specJson({}, sc.historyLimit)): World {
  const w = new World(spec, sc);
  w.run(10);
  expect(w.outcome()).toMatchObject({ running: ['1'], currentRevision: '1', phase: 'Healthy' });
  return w;
}

const SEEDS = [1, 7, 42, 1234, 99_999];

describe('rollout sequences (simulated Deployment, pods and operator)', () => {
  describe.each([1, 2, 10])(
    'a blocked key-rule change edited 15 times, historyLimit %i',
    (limit) => {
      it.each([undefined, ...SEEDS])(
        'never runs; status says Blocked throughout (seed %s)',
        async (seed) => {
          const w = settled({ historyLimit: limit, seed });
          for (let edit = 1; edit <= 15; edit++) {
            // a new key rule, and a new image each time: a new revision per edit
            w.edit(
              specJson(
                { keyRule: 'order:{id}:v2', image: `registry.example.com/w:${edit + 1}` },
                limit,
              ),
            );
            w.run(5);
            expect(w.violations).toEqual([]);
            expect(w.status?.phase, `after edit ${edit}`).toBe('Blocked');
            expect(
              w.status?.conditions?.find((c) => c.type === 'RolloutBlocked'),
              `after edit ${edit}`,
            ).toMatchObject({ status: 'True', reason: 'IdempotencyKeyRuleChanged' });
          }
          expect([...w.consumed.keys()]).toEqual(['1']);
          expect(w.outcome()).toMatchObject({
            running: ['1'],
            deployed: '1',
            currentRevision: '1',
          });
          // Status keeps summaries; each kept revision's spec is recorded once, the rest pruned.
          expect(w.status?.history?.some((h) => h.spec !== undefined)).toBe(false);
          expect([...w.records.keys()].sort()).toEqual(
            (w.status?.history ?? []).map((h) => h.revision).sort(),
          );
          if (limit === 10 && seed === undefined)
            await expect(w.transcript.text()).toMatchFileSnapshot(
              '__golden__/blocked-key-rule-15-edits.txt',
            );
        },
      );
    },
  );

  it.each([undefined, ...SEEDS])('a compatible roll forward completes (seed %s)', (seed) => {
    const w = settled({ seed });
    w.edit(specJson({ schemaVersions: [1, 2], image: 'registry.example.com/w:2' }));
    w.run(30);
    expect(w.violations).toEqual([]);
    expect(w.outcome()).toMatchObject({
      running: ['2'],
      deployed: '2',
      currentRevision: '2',
      phase: 'Healthy',
    });
  });

  it('a change dropping a schema version still queued is blocked, and runs once it is restored', () => {
    const w = settled();
    w.edit(specJson({ schemaVersions: [2], image: 'registry.example.com/w:2' }));
    w.run(10);
    expect(w.status?.conditions?.find((c) => c.type === 'RolloutBlocked')).toMatchObject({
      status: 'True',
      reason: 'SchemaVersionIncompatible',
    });
    w.edit(specJson({ schemaVersions: [1, 2], image: 'registry.example.com/w:2' }));
    w.run(30);
    expect(w.violations).toEqual([]);
    expect(w.outcome()).toMatchObject({ running: ['3'], currentRevision: '3', phase: 'Healthy' });
  });

  it('a change of queue type the broker cannot make (an upgrade changing the default under a JobWorker that never set it) is blocked, and runs once the type is set', () => {
    const classic = specJson({ queueType: 'classic' });
    const w = settled({ queueType: 'classic', age: () => 5 }, classic);
    // the spec as read after the upgrade: no queueType, so the new default
    w.edit(specJson({ image: 'registry.example.com/w:2' }));
    w.run(10);
    expect(w.status?.conditions?.find((c) => c.type === 'RolloutBlocked')).toMatchObject({
      status: 'True',
      reason: 'QueueTypeDiffers',
      message: expect.stringContaining('Set spec.broker.queueType: classic'),
    });
    expect(w.outcome()).toMatchObject({ running: ['1'], currentRevision: '1' });
    w.edit(specJson({ image: 'registry.example.com/w:2', queueType: 'classic' }));
    w.run(30);
    expect(w.violations).toEqual([]);
    expect(w.outcome()).toMatchObject({ running: ['3'], currentRevision: '3', phase: 'Healthy' });
  });

  // Age rises 20 s after revision 2 is applied: past the 30 s objective for
  // longer than the sustain window, so revision 2 is rolled back.
  const rising = (from: number) => (t: number) => (t < from ? 5 : 5 + (t - from) * 4);

  describe('automatic rollback on rising age mid-rollout', () => {
    const scenario = (sc: Scenario, applyAt = 10) => {
      const w = settled({ ...sc, age: rising(applyAt + 20) });
      // a new image, same contract: the way back is compatible
      w.edit(specJson({ image: 'registry.example.com/w:2' }));
      w.run(200);
      return w;
    };
    const expected = {
      running: ['1'],
      deployed: '1',
      currentRevision: '1',
      lastRollback: { from: '2', to: '1' },
      abortedRevision: '2',
    };

    it.each([undefined, ...SEEDS])(
      'drains revision 2 before revision 1 consumes (seed %s)',
      (seed) => {
        const w = scenario({ seed });
        expect(w.violations).toEqual([]);
        expect(w.outcome()).toMatchObject(expected);
      },
    );

    it('workers stuck in a handler: the drain ends at its deadline, not before', () => {
      const w = scenario({ stuckDrain: true });
      expect(w.violations).toEqual([]);
      expect(w.outcome()).toMatchObject(expected);
      expect(w.status?.lastRollback?.drainEndedBy).toBe('Deadline');
    });

    it('an operator restart (or a lost and regained leadership) at every step ends the same way', () => {
      const baseline = scenario({}).outcome();
      for (let at = 11; at < 150; at++) {
        const w = scenario({ operatorDown: (t) => t >= at && t < at + 4 });
        expect(w.violations, `down at ${at}`).toEqual([]);
        expect(w.outcome(), `down at ${at}`).toMatchObject({
          ...expected,
          lastRollback: { ...expected.lastRollback, result: baseline.lastRollback?.result },
        });
      }
    }, 60_000); // 139 whole scenarios: seconds of CPU, more on a loaded machine
  });

  it('an automatic rollback the gate refuses stays Blocked while the analysis would roll back, not for one reconcile', () => {
    const w = settled({ age: rising(30) });
    // Revision 2 accepts version 2, which producers may now send: the way back to 1 is closed.
    const v2 = {
      image: 'registry.example.com/w:2',
      schemaVersions: [1, 2],
      producerVersions: [1, 2],
    };
    w.edit(specJson(v2));
    let firstBlocked: number | undefined;
    for (let t = 0; t < 110; t++) {
      w.step();
      const blocked = w.status?.conditions?.find((c) => c.type === 'RolloutBlocked');
      if (blocked?.status === 'True') firstBlocked ??= w.t;
      if (firstBlocked !== undefined)
        expect(blocked, `t=${w.t}`).toMatchObject({
          status: 'True',
          reason: 'SchemaVersionIncompatible',
          message: expect.stringContaining('The automatic rollback to revision 1'),
        });
    }
    expect(firstBlocked).toBeDefined();
    expect(w.violations).toEqual([]);
    expect(w.outcome()).toMatchObject({ running: ['2'], deployed: '2', phase: 'Blocked' });
  });

  it("a rollback whose target's spec is not recorded is blocked, never started from another spec", () => {
    const w = settled({ age: rising(30) });
    w.edit(specJson({ image: 'registry.example.com/w:2' }));
    w.records.delete('1'); // its ControllerRevision deleted by hand
    w.run(200);
    expect(w.violations).toEqual([]);
    expect(w.status?.conditions?.find((c) => c.type === 'RolloutBlocked')).toMatchObject({
      status: 'True',
      reason: 'RevisionSpecUnknown',
    });
    // No pod ever ran revision 1's label with revision 2's template.
    const templates = w.pods.map((p) => [p.revision, p.contract.keyRule]);
    expect(templates.every(([rev]) => rev === '2')).toBe(true);
    expect(w.outcome()).toMatchObject({ running: ['2'], deployed: '2' });
  });

  it('a crash-looping revision is rolled back, drained first', async () => {
    const w = settled({ crashLoops: ['2'] });
    w.edit(specJson({ image: 'registry.example.com/w:2' }));
    w.run(90);
    expect(w.violations).toEqual([]);
    expect(w.outcome()).toMatchObject({
      running: ['1'],
      currentRevision: '1',
      lastRollback: { from: '2', to: '1' },
      abortedRevision: '2',
    });
    await expect(w.transcript.text()).toMatchFileSnapshot('__golden__/crash-loop-rolled-back.txt');
  });

  it('a manual undo during a blocked change: the spec goes back, nothing drains or restarts', () => {
    const w = settled({ historyLimit: 1 });
    const pods = w.pods.map((p) => p.id);
    w.edit(specJson({ keyRule: 'order:{id}:v2', image: 'registry.example.com/w:2' }, 1));
    w.run(5);
    expect(w.status?.phase).toBe('Blocked');
    w.edit(specJson({}, 1));
    w.run(10);
    expect(w.violations).toEqual([]);
    expect(w.outcome()).toMatchObject({ running: ['1'], currentRevision: '1', phase: 'Healthy' });
    expect(w.status?.lastRollback).toBeUndefined();
    expect(w.pods.map((p) => p.id)).toEqual(pods);
  });

  describe('pause and resume', () => {
    const consuming = (w: World) => w.pods.filter((p) => p.ready && p.terminatingAt === undefined);
    const replicasOf = (w: World) => (w.deployment?.spec as { replicas: number }).replicas;

    it.each([undefined, ...SEEDS])(
      'drains within the deadline, holds 0 against a growing backlog, resume restores (seed %s)',
      (seed) => {
        const w = settled({ seed, age: (t) => (t < 10 ? 5 : 5 + (t - 10) * 2) });
        w.edit(specJson({ paused: true }));
        w.run(10 + 15); // the drain deadline and the termination margin
        expect(w.pods).toEqual([]);
        for (let t = 0; t < 120; t++) {
          w.step();
          expect(w.pods, `t=${w.t}`).toEqual([]);
          expect(replicasOf(w)).toBe(0);
        }
        // Desired says what runs (none); the count to restore waits beside it, and Limited By says why.
        expect(w.status).toMatchObject({
          phase: 'Paused',
          desiredReplicas: 0,
          resumeReplicas: REPLICAS,
          scaling: { limitedBy: 'paused' },
        });
        expect(w.status?.conditions?.find((c) => c.type === 'Available')).toMatchObject({
          status: 'False',
          reason: 'Paused',
        });
        w.edit(specJson({ paused: false }));
        w.run(10);
        expect(w.violations).toEqual([]);
        expect(consuming(w)).toHaveLength(REPLICAS);
        expect(w.outcome()).toMatchObject({
          running: ['1'],
          currentRevision: '1',
          phase: 'Healthy',
        });
      },
    );

    // Revision 2 rolls out at t=10; paused at t=30, mid-analysis, while the
    // backlog grows; resumed at t=230.
    const pausedMidAnalysis = (afterResume: (t: number) => number, startS = START_S) => {
      const age = (t: number) => (t <= 30 ? 5 : t <= 230 ? 5 + (t - 30) : afterResume(t - 230));
      const w = settled({ age });
      w.edit(specJson({ image: 'registry.example.com/w:2' }));
      w.run(20);
      expect(w.status?.analysis?.revision).toBe('2');
      w.edit(specJson({ image: 'registry.example.com/w:2', paused: true }));
      w.run(200);
      expect(w.status?.lastRollback).toBeUndefined();
      expect(w.status?.phase).toBe('Paused');
      w.startS = startS;
      w.edit(specJson({ image: 'registry.example.com/w:2', paused: false }));
      w.run(150);
      expect(w.violations).toEqual([]);
      return w;
    };

    it('paused mid-analysis: the backlog the pause left does not roll the revision back', () => {
      const w = pausedMidAnalysis((t) => Math.max(5, 205 - t * 10));
      expect(w.outcome()).toMatchObject({ running: ['2'], currentRevision: '2', phase: 'Healthy' });
      expect(w.status?.lastRollback).toBeUndefined();
    });

    it('paused mid-analysis: pods slow to start after resume (age rising meanwhile) do not roll it back', () => {
      // 30 s to start: the age keeps rising until a worker consumes, then falls.
      const w = pausedMidAnalysis((t) => (t < 30 ? 205 + t : Math.max(5, 235 - (t - 30) * 10)), 30);
      expect(w.outcome()).toMatchObject({ running: ['2'], currentRevision: '2', phase: 'Healthy' });
      expect(w.status?.lastRollback).toBeUndefined();
    });

    it('paused mid-analysis: the analysis resumes, and age still rising after resume rolls back', () => {
      const w = pausedMidAnalysis((t) => 205 + t * 4);
      expect(w.outcome()).toMatchObject({
        running: ['1'],
        currentRevision: '1',
        lastRollback: { from: '2', to: '1' },
        abortedRevision: '2',
      });
    });

    it('an incompatible edit while paused runs nothing; on resume the gate blocks it', () => {
      const w = settled({ historyLimit: 1 });
      w.edit(specJson({ paused: true }, 1));
      w.run(30);
      w.edit(
        specJson({ keyRule: 'order:{id}:v2', image: 'registry.example.com/w:2', paused: true }, 1),
      );
      w.run(30);
      expect(w.outcome()).toMatchObject({ running: [], deployed: '1', phase: 'Paused' });
      w.edit(
        specJson({ keyRule: 'order:{id}:v2', image: 'registry.example.com/w:2', paused: false }, 1),
      );
      w.run(20);
      expect(w.violations).toEqual([]);
      expect([...w.consumed.keys()]).toEqual(['1']);
      expect(w.outcome()).toMatchObject({ running: ['1'], deployed: '1', phase: 'Blocked' });
    });
  });
});
