// Cohort rollout sequence tests: the whole pure plan of a reconcile
// (src/reconcile/plan.ts) drives a simulated world of two Deployments — the
// stable one and the cohort beside it — whose pods start, become ready, do
// work (each revision with its own dead-letter, retry, duplicate and latency
// rates, or a crash loop) and drain when removed, one simulated second at a
// time. Every second checks what users rely on:
//   1. the pods taking new work never exceed the fleet the scaler wants
//      (so the downstream budget that caps it holds), and never fall below
//      it while the fleet is steady, in any phase;
//   2. a revision the gate refuses never gets a pod;
//   3. an abort drains the cohort first: the stable revision's pods keep
//      consuming throughout, and the cohort's are gone by the drain deadline;
//   4. an operator restart mid-step (its memory lost) ends the same way.
import { afterEach, describe, expect, it } from 'vitest';
import { parseSpec, type JobWorkerStatus } from '../../src/api/jobworker.js';
import type { KubeObject } from '../../src/kube/client.js';
import {
  ANNOTATION_COHORT_COMMAND,
  cohortReplicas,
  type CohortCommand,
} from '../../src/reconcile/cohort/steps.js';
import {
  LATENCY_BOUNDS,
  zeroCounters,
  type PodCounters,
} from '../../src/reconcile/cohort/figures.js';
import { cohortDeploymentName, revisionOf } from '../../src/reconcile/children/desired.js';
import { prng } from '../ground/prng.js';
import { answerFromWorld } from './sequence-answers.js';
import { Transcript } from './transcript.js';
import type { Observation } from '../../src/reconcile/model/observation.js';
import { planToCompletion, type Plan, type ScalingMemory } from '../../src/reconcile/plan.js';
import { applied, deleted, recorded } from './plan-writes.js';

const TOTAL = 4;
const PREFETCH = 8;
const START_S = 3;
const DRAIN_S = 5;
const JOBS_PER_POD_S = 2;
const NAME = 'w';

interface Behaviour {
  deadLetter?: number;
  retry?: number;
  duplicate?: number;
  /** handler latency, seconds */
  latency?: number;
  /** each pod's first runs are this slow (connections opened, code not yet optimised) */
  coldStart?: { runs: number; seconds: number };
  /** this share of runs takes 2 s (every 1/share-th, or at random) */
  slowShare?: number;
  crashLoop?: boolean;
  /** outcomes drawn at random (seeded) instead of every 1/rate-th job */
  random?: boolean;
  /** jobs per second as a share of a healthy pod's (a hung handler: near 0) */
  pace?: number;
}

interface Pod {
  name: string;
  owner: string;
  revision: string;
  prefetch: number;
  createdAt: number;
  ready: boolean;
  terminatingAt?: number;
  restarts: number;
  counters: PodCounters;
  /** fractional work carried to the next second */
  carry: number;
}

function specJson(
  o: { image?: string; keyRule?: string; steps?: unknown[]; strategy?: string } = {},
) {
  return {
    image: o.image ?? 'registry.example.com/w:1',
    broker: { urlSecretRef: { name: 'r', key: 'url' }, queue: 'q', prefetch: PREFETCH },
    claims: { urlSecretRef: { name: 'c', key: 'url' } },
    contract: { idempotencyKey: o.keyRule ?? 'order:{id}', schemaVersions: [1] },
    deadLetter: { owner: 'team' },
    scaling: {
      minReplicas: TOTAL,
      maxReplicas: TOTAL,
      targetOldestAgeSeconds: 30,
      downstream: { maxConcurrency: TOTAL * PREFETCH },
    },
    shutdown: { drainDeadlineSeconds: 10 },
    rollout: {
      strategy: o.strategy ?? 'Cohort',
      analysisSeconds: 60,
      steps: o.steps ?? [
        { cohort: { replicas: 1, prefetch: 2 } },
        { cohort: { percent: 50 } },
        { cohort: { percent: 100 } },
      ],
    },
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
  status: JobWorkerStatus | undefined;
  deployments = new Map<string, KubeObject>();
  pods: Pod[] = [];
  annotations: Record<string, string> = {};
  readonly violations: string[] = [];
  /** what the planner saw and decided, step by step (./transcript.ts) */
  readonly transcript = new Transcript();
  readonly events: Array<{ t: number; reason: string; message: string }> = [];
  /** revisions that ever had a pod */
  readonly revisionsRun = new Set<string>();
  /** each revision's recorded spec (its ControllerRevision) */
  readonly records = new Map<string, Record<string, unknown>>();
  private memory: ScalingMemory | undefined;
  private nextPod = 1;
  private readonly random = prng(7);
  operatorDown: (t: number) => boolean = () => false;
  age: (t: number) => number = () => 2;

  constructor(
    public spec: Record<string, unknown>,
    readonly behaviour: Record<string, Behaviour> = {},
  ) {
    worlds.push(this);
  }

  edit(spec: Record<string, unknown>): void {
    this.spec = spec;
    this.generation++;
  }

  command(c: Omit<CohortCommand, 'by' | 'reason'>): void {
    this.annotations[ANNOTATION_COHORT_COMMAND] = JSON.stringify({
      ...c,
      by: 'alice',
      reason: 'checked by hand',
    });
  }

  /** Forget the operator's memory, as a restart does. */
  restart(): void {
    this.memory = undefined;
  }

  private observe(now: Date): Observation {
    const p = parseSpec(this.spec);
    if (!p.ok) throw new Error(p.problems.join('; '));
    const age = this.age(this.t);
    return {
      raw: {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobWorker',
        metadata: {
          name: NAME,
          namespace: 'ns',
          uid: 'u-1',
          generation: this.generation,
          annotations: { ...this.annotations },
        },
        spec: this.spec,
        ...(this.status && { status: this.status }),
      },
      spec: p.spec,
      problems: [],
      secrets: new Map(),
      others: [],
      pods: [],
      records: [],
      deployment: structuredClone(this.deployments.get(NAME)),
      ...(this.deployments.has(cohortDeploymentName(NAME)) && {
        cohortDeployment: structuredClone(this.deployments.get(cohortDeploymentName(NAME))),
      }),
      queue: {
        ok: true,
        stats: {
          type: p.spec.broker.queueType, // the queue the spec declares
          messagesReady: age > 0 ? 50 : 0,
          messagesUnacked: 0,
          consumers: TOTAL,
          headMessageTimestamp: now.getTime() / 1000 - age,
          publishRate: age > 0 ? 1 : 0,
          ackRate: age > 0 ? 1 : 0,
        },
      },
      polling: true,
    };
  }

  reconcile(): Plan | undefined {
    if (this.operatorDown(this.t)) return undefined;
    const now = new Date(Date.UTC(2026, 11, 1) + this.t * 1000);
    const obs = this.observe(now);
    const plan = planToCompletion(
      { obs, memory: this.memory, now, pollMs: 10_000 },
      answerFromWorld({
        pods: this.pods,
        records: this.records,
        cohortSamples: () =>
          this.pods.map((p) => ({
            pod: p.name,
            revision: p.revision,
            createdAt: new Date(Date.UTC(2026, 11, 1) + p.createdAt * 1000).toISOString(),
            restarts: p.restarts,
            ...(p.ready || p.terminatingAt !== undefined
              ? { counters: structuredClone(p.counters) }
              : {}),
          })),
      }),
    );
    this.memory = plan.memory;
    this.transcript.step(this.t, this.generation, this.pods, plan);
    for (const r of recorded(plan)) {
      const rev = String((r as { revision?: number }).revision);
      if (!this.records.has(rev))
        this.records.set(rev, (r as unknown as { data: Record<string, unknown> }).data);
    }
    for (const d of applied(plan).filter((c) => c.kind === 'Deployment'))
      this.applyDeployment(d, now);
    for (const name of deleted(plan, 'Deployment')) {
      this.deployments.delete(name);
      for (const p of this.pods) if (p.owner === name) this.terminate(p);
    }
    // A new JobWorker's first status may wait for it to turn Available (src/reconcile/status/first-status.ts).
    if (plan.statusHeldMs === undefined) {
      if (JSON.stringify(plan.status) !== JSON.stringify(this.status))
        for (const e of plan.events)
          this.events.push({ t: this.t, reason: e.reason, message: e.message });
      this.status = plan.status;
    }
    this.checkPlan(plan);
    return plan;
  }

  private terminate(p: Pod): void {
    if (p.terminatingAt !== undefined) return;
    p.terminatingAt = this.t;
    p.ready = false;
  }

  /** The apiserver and the ReplicaSet controller: a changed Deployment, and an immediate scale-down. */
  private applyDeployment(d: KubeObject, now: Date): void {
    const live = this.deployments.get(d.metadata.name);
    if (JSON.stringify(live?.spec) !== JSON.stringify(d.spec))
      this.deployments.set(d.metadata.name, {
        ...d,
        metadata: {
          ...d.metadata,
          generation: (live?.metadata.generation ?? 0) + 1,
          creationTimestamp: live?.metadata.creationTimestamp ?? now.toISOString(),
        },
        status: live?.status ?? {},
      });
    this.scaleDown(d.metadata.name);
    this.syncStatus();
  }

  private scaleDown(owner: string): void {
    const d = this.deployments.get(owner)!;
    const want = (d.spec as { replicas: number }).replicas;
    const rev = revisionOf(d)!;
    const live = this.pods.filter((p) => p.owner === owner && p.terminatingAt === undefined);
    const old = live.filter((p) => p.revision !== rev);
    const current = live.filter((p) => p.revision === rev);
    // unready pods first, then the newest
    const byChoice = (a: Pod, b: Pod) =>
      Number(a.ready) - Number(b.ready) || b.createdAt - a.createdAt;
    let excess = live.length - want - (old.length && want > 0 ? Math.ceil(want * 0.25) : 0);
    for (const p of [...old.sort(byChoice), ...current.sort(byChoice)]) {
      if (excess <= 0) break;
      if (want === 0 || p.revision !== rev || current.length > want) {
        this.terminate(p);
        excess--;
      }
    }
  }

  /** The kubelet, the Deployment controllers and the work, for one second. */
  tick(): void {
    this.t++;
    for (const p of this.pods) {
      if (p.terminatingAt !== undefined) continue;
      const b = this.behaviour[p.revision] ?? {};
      if (this.t - p.createdAt < START_S) continue;
      if (b.crashLoop) {
        if ((this.t - p.createdAt) % 5 === 0) p.restarts++;
      } else p.ready = true;
    }
    this.pods = this.pods.filter(
      (p) => p.terminatingAt === undefined || this.t - p.terminatingAt < DRAIN_S,
    );
    for (const [owner, d] of this.deployments) this.roll(owner, d);
    this.work();
    this.syncStatus();
  }

  private roll(owner: string, d: KubeObject): void {
    const want = (d.spec as { replicas: number }).replicas;
    const rev = revisionOf(d)!;
    const env = (
      d.spec as {
        template: { spec: { containers: Array<{ env: Array<{ name: string; value?: string }> }> } };
      }
    ).template.spec.containers[0]!.env;
    const prefetch = Number(env.find((e) => e.name === 'JOBFLEET_PREFETCH')?.value);
    const live = () => this.pods.filter((p) => p.owner === owner && p.terminatingAt === undefined);
    const current = live().filter((p) => p.revision === rev);
    const old = live().filter((p) => p.revision !== rev);
    // maxSurge 25%, maxUnavailable 0: new pods up to the surge, an old one retired per new one ready
    const surge = old.length ? Math.ceil(want * 0.25) : 0;
    let create = Math.min(want - current.length, want + surge - live().length);
    while (create-- > 0) {
      this.revisionsRun.add(rev);
      this.pods.push({
        name: `${owner}-${this.nextPod++}`,
        owner,
        revision: rev,
        prefetch,
        createdAt: this.t,
        ready: false,
        restarts: 0,
        counters: zeroCounters(),
        carry: 0,
      });
    }
    const readyNew = current.filter((p) => p.ready).length;
    const retire = old.length - Math.max(0, want - readyNew);
    for (const p of old
      .sort((a, b) => Number(a.ready) - Number(b.ready))
      .slice(0, Math.max(0, retire)))
      this.terminate(p);
  }

  private work(): void {
    for (const p of this.pods) {
      if (!p.ready) continue;
      const b = this.behaviour[p.revision] ?? {};
      p.carry += ((JOBS_PER_POD_S * p.prefetch) / PREFETCH) * (b.pace ?? 1);
      const n = Math.floor(p.carry);
      p.carry -= n;
      for (let j = 0; j < n; j++) {
        const c = p.counters;
        c.handled++;
        // deterministic shares: every 1/rate-th job
        const k = c.handled;
        const hit = (rate = 0) =>
          b.random
            ? this.random() < rate
            : rate > 0 && Math.floor(k * rate) > Math.floor((k - 1) * rate);
        if (hit(b.deadLetter)) {
          c.deadLettered++;
          c.deadLettersByClass.permanent = (c.deadLettersByClass.permanent ?? 0) + 1;
        } else if (hit(b.duplicate)) c.duplicates++;
        else c.completed++;
        if (hit(b.retry)) c.retried++;
        const latency =
          b.coldStart && k <= b.coldStart.runs
            ? b.coldStart.seconds
            : hit(b.slowShare)
              ? 2
              : (b.latency ?? 0.04);
        LATENCY_BOUNDS.forEach((bound, i) => {
          if (latency <= bound) c.latency[i]!++;
        });
      }
    }
  }

  private syncStatus(): void {
    for (const [owner, d] of this.deployments) {
      const rev = revisionOf(d);
      const pods = this.pods.filter((p) => p.owner === owner && p.terminatingAt === undefined);
      d.status = {
        observedGeneration: d.metadata.generation,
        replicas: pods.length,
        updatedReplicas: pods.filter((p) => p.revision === rev).length,
        readyReplicas: pods.filter((p) => p.ready).length,
        availableReplicas: pods.filter((p) => p.ready).length,
      };
    }
  }

  /** Pods taking new work: ready, not terminating. */
  consuming(revision?: string): Pod[] {
    return this.pods.filter(
      (p) => p.ready && p.terminatingAt === undefined && (!revision || p.revision === revision),
    );
  }

  private checkPlan(plan: Plan): void {
    const v = (m: string) => this.violations.push(`t=${this.t}: ${m}`);
    const budget = (this.spec.scaling as { downstream: { maxConcurrency: number } }).downstream
      .maxConcurrency;
    const slots = this.consuming().reduce((n, p) => n + p.prefetch, 0);
    if (slots > budget) v(`${slots} delivery slots consume, over the budget ${budget}`);
    if (this.consuming().length > plan.desiredReplicas)
      v(`${this.consuming().length} pods consume, over the ${plan.desiredReplicas} wanted`);
  }

  run(seconds: number, each?: (w: World) => void): void {
    for (let i = 0; i < seconds; i++) {
      this.reconcile();
      each?.(this);
      this.tick();
    }
  }

  /** Runs until `done`, failing after `max` seconds. */
  until(what: string, done: (w: World) => boolean, max = 1200, each?: (w: World) => void): void {
    for (let i = 0; i < max; i++) {
      this.reconcile();
      each?.(this);
      if (done(this)) return;
      this.tick();
    }
    throw new Error(
      `${what}: not reached in ${max} s (t=${this.t}); status ${JSON.stringify(this.status?.cohort ?? this.status?.lastCohort)}; scaling ${JSON.stringify(this.status?.scaling)} desired ${this.status?.desiredReplicas}`,
    );
  }
}

/** A world whose revision 1 runs everywhere, steady. */
function steady(behaviour: Record<string, Behaviour> = {}, spec = specJson()): World {
  const w = new World(spec, behaviour);
  w.until(
    'revision 1 runs',
    (x) => x.status?.currentRevision === '1' && x.consuming('1').length === TOTAL,
  );
  w.run(5);
  return w;
}

const image2 = (o: Parameters<typeof specJson>[0] = {}) =>
  specJson({ image: 'registry.example.com/w:2', ...o });

describe('Cohort strategy: a healthy revision', () => {
  it('grows through every step (1 replica at prefetch 2, 50%, 100%), then is promoted; the fleet never exceeds its budget', async () => {
    const w = steady();
    w.edit(image2());
    const seen: Array<{ step: number; replicas: number; phase: string }> = [];
    w.until(
      'promoted',
      (x) => x.status?.lastCohort?.result === 'Promoted',
      1200,
      (x) => {
        const c = x.status?.cohort;
        if (c && !seen.some((s) => s.step === c.step && s.phase === c.phase))
          seen.push({ step: c.step, replicas: c.replicas, phase: c.phase });
      },
    );
    expect(seen.filter((s) => s.phase === 'Analyzing')).toEqual([
      { step: 1, replicas: 1, phase: 'Analyzing' },
      { step: 2, replicas: 2, phase: 'Analyzing' },
      { step: 3, replicas: 4, phase: 'Analyzing' },
    ]);
    expect(seen.at(-1)?.phase).toBe('Promoting');
    w.until(
      'only revision 2 runs',
      (x) => x.pods.every((p) => p.revision === '2') && x.consuming('2').length === TOTAL,
      120,
    );
    expect(w.status?.currentRevision).toBe('2');
    expect(w.status?.phase).toBe('Healthy');
    expect(w.deployments.has(cohortDeploymentName(NAME))).toBe(false);
    expect(revisionOf(w.deployments.get(NAME))).toBe('2');
    expect(w.events.map((e) => e.reason).filter((r) => r.startsWith('Cohort'))).toEqual([
      'CohortStarted',
      'CohortStepPassed',
      'CohortStep',
      'CohortStepPassed',
      'CohortStep',
      'CohortStepPassed',
      'CohortPromoting',
      'CohortPromoted',
    ]);
    // the cohort's first step ran at the step's prefetch
    expect(w.violations).toEqual([]);
    await expect(w.transcript.text()).toMatchFileSnapshot('__golden__/cohort-promoted.txt');
  });

  it('at every step the fleet stays at the scaler’s total, with no gap', () => {
    const w = steady();
    w.edit(image2());
    let minConsuming = Infinity;
    w.until(
      'promoted',
      (x) => x.status?.lastCohort?.result === 'Promoted',
      1200,
      (x) => {
        // the stable revision gives way only as cohort pods become ready
        minConsuming = Math.min(minConsuming, x.consuming().length);
      },
    );
    expect(minConsuming).toBe(TOTAL);
    expect(w.violations).toEqual([]);
  });

  it('waits at the end of a window without enough jobs, and `promote` skips the step, audited', () => {
    const w = steady();
    // a step whose window ends before the cohort has handled minJobs
    const spec = image2({
      steps: [
        { cohort: { replicas: 1, prefetch: 1 }, analysisSeconds: 0 },
        { cohort: { percent: 100 } },
      ],
    });
    (spec.rollout as Record<string, unknown>).cohortChecks = { minJobs: 1_000_000 };
    w.edit(spec);
    w.until('waiting', (x) => x.status?.cohort?.phase === 'Waiting', 60);
    expect(w.status?.cohort?.message).toContain('needed to judge it');
    w.run(30);
    expect(w.status?.cohort?.step).toBe(1);
    w.command({ action: 'promote', revision: '2', step: 1 });
    w.until('step 2', (x) => x.status?.cohort?.step === 2, 10);
    expect(w.events.find((e) => e.reason === 'CohortStepSkipped')?.message).toContain(
      'skipped by alice: checked by hand',
    );
  });

  it('resumes after an operator restart mid-step (memory lost, reconciles missed) and is still promoted', () => {
    const w = steady();
    w.edit(image2());
    w.until('step 2', (x) => x.status?.cohort?.step === 2 && !!x.status.cohort.analysisUntil, 600);
    const down = w.t;
    w.operatorDown = (t) => t >= down && t < down + 20;
    w.restart();
    w.until('promoted', (x) => x.status?.lastCohort?.result === 'Promoted', 1200);
    expect(w.violations).toEqual([]);
  });
});

describe('Cohort strategy and the scaler', () => {
  it('follows the scaler’s total as it moves mid-step, capped by the downstream budget; slots never exceed it', () => {
    // a backlog from before: the scaler wants the most, the budget (32 slots) allows 4 of 8
    const spec = specJson({
      steps: [
        { cohort: { replicas: 1 } },
        { cohort: { percent: 50 }, analysisSeconds: 600 },
        { cohort: { percent: 100 } },
      ],
    });
    Object.assign(spec.scaling, {
      minReplicas: 2,
      maxReplicas: 8,
      scaleDownStabilizationSeconds: 0,
    });
    const w = new World(spec);
    w.age = () => 60;
    w.until('revision 1 at the budget', (x) => x.consuming('1').length === 4, 120);
    w.edit({ ...spec, image: 'registry.example.com/w:2' });
    w.until('step 2', (x) => x.status?.cohort?.step === 2 && !!x.status.cohort.analysisUntil, 600);
    expect(w.status?.cohort).toMatchObject({ replicas: 2, stableReplicas: 2 });
    // the backlog is gone: the fleet goes down mid-step, the cohort keeps its share of it
    w.age = () => 0;
    w.until('a smaller fleet', (x) => (x.status?.desiredReplicas ?? 4) < 4, 120);
    w.until(
      'the step’s share of it',
      (x) => {
        const total = x.status!.desiredReplicas!;
        return (
          x.status?.cohort?.step === 2 &&
          x.consuming().length === total &&
          x.consuming('2').length === cohortReplicas({ cohort: { percent: 50 } }, total)
        );
      },
      120,
    );
    w.until('promoted', (x) => !!x.status?.lastCohort, 1200);
    expect(w.status?.lastCohort?.result).toBe('Promoted');
    expect(w.violations).toEqual([]);
  });
});

describe('Cohort strategy: the fleet around it', () => {
  it('keeps the scaler’s count through every step, 100% included: the fleet does not shrink to the stable share', () => {
    const spec = specJson();
    Object.assign(spec.scaling, { minReplicas: 1, maxReplicas: 8 });
    const w = new World(spec);
    w.age = () => 60; // a backlog from before: the scaler wants the most the budget allows
    w.until('revision 1 at the budget', (x) => x.consuming('1').length === 4, 120);
    w.edit({ ...spec, image: 'registry.example.com/w:2' });
    const edited = w.t;
    let fewest = Infinity;
    w.until(
      'promoted',
      (x) => !!x.status?.lastCohort,
      1200,
      (x) => {
        fewest = Math.min(fewest, x.status?.desiredReplicas ?? 0);
      },
    );
    expect(w.status?.lastCohort?.result).toBe('Promoted');
    expect(fewest).toBe(4);
    expect(
      w.events.filter(
        (e) => e.t >= edited && (e.reason === 'ScaledUp' || e.reason === 'ScaledDown'),
      ),
    ).toEqual([]);
  });

  it('a pause stops the cohort too; on resume the step goes on and ends promoted', () => {
    const w = steady();
    w.edit(image2());
    w.until('step 2', (x) => x.status?.cohort?.step === 2 && !!x.status.cohort.analysisUntil, 600);
    w.edit({ ...image2(), paused: true });
    w.until('nothing consumes', (x) => x.consuming().length === 0, 60);
    w.run(30);
    expect(w.consuming().length).toBe(0);
    w.edit(image2());
    w.until('promoted', (x) => !!x.status?.lastCohort, 1200);
    expect(w.status?.lastCohort?.result).toBe('Promoted');
    expect(w.violations).toEqual([]);
  });

  it('steps shortened mid-cohort: it goes on with the steps there are', () => {
    const w = steady();
    w.edit(image2());
    w.until('step 3', (x) => x.status?.cohort?.step === 3, 600);
    w.edit(image2({ steps: [{ cohort: { replicas: 1 } }] }));
    w.until('promoted', (x) => !!x.status?.lastCohort, 600);
    expect(w.status?.lastCohort?.result).toBe('Promoted');
  });

  it('a cohort Deployment left without a cohort (a lost delete) is removed', () => {
    const w = steady();
    w.edit(image2());
    w.until('a cohort Deployment', (x) => x.deployments.has(cohortDeploymentName(NAME)), 60);
    const left = structuredClone(w.deployments.get(cohortDeploymentName(NAME))!);
    w.until('promoted', (x) => !!x.status?.lastCohort, 1200);
    w.deployments.set(cohortDeploymentName(NAME), left);
    w.run(3);
    expect(w.deployments.has(cohortDeploymentName(NAME))).toBe(false);
  });
});

describe('Cohort strategy: aborts', () => {
  it('aborts a cohort too slow to reach minJobs where the stable pace would have (a hung handler)', () => {
    const w = steady({ '2': { pace: 0.05 } });
    const spec = image2({ steps: [{ cohort: { replicas: 1 } }, { cohort: { percent: 100 } }] });
    (spec.rollout as Record<string, unknown>).cohortChecks = { minJobs: 100 };
    w.edit(spec);
    w.until('aborted', (x) => !!x.status?.lastCohort, 300);
    expect(w.status?.lastCohort).toMatchObject({ result: 'Aborted', check: 'Throughput' });
    expect(w.status?.lastCohort?.message).toMatch(
      /the cohort handled \d+ deliveries in the window/,
    );
  });

  it('does not abort a slow cohort on its throughput while nothing waits in the queue: it had nothing to handle', () => {
    const w = steady({ '2': { pace: 0.05 } });
    w.age = () => 0;
    const spec = image2({ steps: [{ cohort: { replicas: 1 } }, { cohort: { percent: 100 } }] });
    (spec.rollout as Record<string, unknown>).cohortChecks = { minJobs: 100 };
    w.edit(spec);
    w.run(300);
    expect(w.status?.lastCohort).toBeUndefined();
    expect(w.status?.cohort).toMatchObject({ step: 1, phase: 'Waiting' });
  });

  const cases: Array<[string, Behaviour, string]> = [
    ['DeadLetters', { deadLetter: 0.1 }, 'dead-lettered per handled delivery: cohort 10.0%'],
    ['Retries', { retry: 0.4 }, 'retries per handled delivery'],
    ['Duplicates', { duplicate: 0.3 }, 'duplicates suppressed and claim conflicts'],
    ['Latency', { latency: 4 }, 'handler latency p95: cohort ≤5 s vs stable ≤0.05 s'],
    ['Restarts', { crashLoop: true }, 'restarted 3 times'],
  ];
  it.each(cases)(
    'a revision failing %s is aborted at step 1, its cohort drained first while the stable revision keeps consuming',
    (check, behaviour, words) => {
      const w = steady({ '2': behaviour });
      w.edit(image2());
      let abortedAt: number | undefined;
      let stableMin = Infinity;
      w.until(
        'aborted',
        (x) => x.status?.lastCohort?.result === 'Aborted',
        600,
        (x) => {
          if (x.status?.cohort?.phase === 'Aborting') abortedAt ??= x.t;
          if (abortedAt !== undefined) stableMin = Math.min(stableMin, x.consuming('1').length);
        },
      );
      const last = w.status!.lastCohort!;
      expect(last).toMatchObject({ revision: '2', stable: '1', check });
      // the status that records the abort is already Degraded: an alert on the phase fires at once
      expect(w.status?.phase).toBe('Degraded');
      expect(last.message).toContain(words);
      expect(last.message).toContain('at step 1 of 3');
      // drained first: revision 1 kept at least its share consuming, and ended with the whole fleet
      expect(stableMin).toBeGreaterThanOrEqual(TOTAL - 1);
      w.run(10);
      expect(w.consuming('1').length).toBe(TOTAL);
      expect(w.pods.some((p) => p.revision === '2')).toBe(false);
      expect(w.deployments.has(cohortDeploymentName(NAME))).toBe(false);
      // the revision stays off, and the JobWorker says why, until the spec changes
      w.run(120);
      expect(w.pods.some((p) => p.revision === '2')).toBe(false);
      expect(w.status?.phase).toBe('Degraded');
      expect(w.status?.conditions?.find((c) => c.type === 'Degraded')).toMatchObject({
        status: 'True',
        reason: 'CohortAborted',
      });
      expect(w.violations).toEqual([]);
    },
  );

  it('a spec that moves on while a cohort drains after a failed check raises no Degraded for the revision it left', () => {
    const w = steady({ '2': { deadLetter: 0.1 } });
    w.edit(image2());
    w.until('aborting', (x) => x.status?.cohort?.phase === 'Aborting', 600);
    w.edit(specJson({ image: 'registry.example.com/w:3' }));
    const phases = new Set<string>();
    w.until(
      'the abort recorded',
      (x) => !!x.status?.lastCohort,
      600,
      (x) => phases.add(x.status?.phase ?? ''),
    );
    w.run(5);
    expect(w.status?.lastCohort).toMatchObject({ revision: '2', result: 'Aborted' });
    expect([...phases]).not.toContain('Degraded');
  });

  it('aborts when duplicate suppression collapses: the stable revision suppresses duplicates the cohort runs again', () => {
    const w = steady({ '1': { duplicate: 0.2 }, '2': {} });
    w.edit(image2());
    w.until('aborted', (x) => x.status?.lastCohort?.result === 'Aborted', 600);
    expect(w.status?.lastCohort).toMatchObject({ check: 'Duplicates' });
    expect(w.status?.lastCohort?.message).toMatch(
      /duplicate suppression collapsed: cohort 0\.0% \(0 of \d+\) .* vs stable 2\d\.\d%/,
    );
  });

  it('does not judge a collapse on a handful of stable duplicates (a redelivered batch landing on stable pods)', () => {
    const w = steady();
    // the cohort at three times the stable share, as at the demo's last step
    w.edit(
      image2({
        steps: [
          { cohort: { replicas: 1 } },
          { cohort: { percent: 75 } },
          { cohort: { percent: 100 } },
        ],
      }),
    );
    w.until('step 2', (x) => x.status?.cohort?.step === 2 && !!x.status.cohort.analysisUntil, 600);
    // as in a demo run: 4 suppressed copies, all on the stable side, none on the cohort's
    const stable = w.pods.find((p) => p.revision === '1' && p.ready && !p.terminatingAt)!;
    stable.counters.handled += 4;
    stable.counters.duplicates += 4;
    w.until('promoted', (x) => !!x.status?.lastCohort, 1200);
    expect(w.status?.lastCohort).toMatchObject({ result: 'Promoted' });
  });

  it.each([1, 2, 3])(
    'does not abort a revision as good as the stable one, whose outcomes are random (seed %i)',
    (seed) => {
      const noisy: Behaviour = { deadLetter: 0.05, retry: 0.2, duplicate: 0.1, random: true };
      const w = steady({ '1': noisy, '2': noisy });
      for (let i = 0; i < seed; i++) w.tick();
      w.edit(image2());
      w.until('promoted', (x) => !!x.status?.lastCohort, 1200);
      expect(w.status?.lastCohort?.message).toContain('promoted');
    },
  );

  it("does not abort on a new pod's few slow first runs (a cold start)", () => {
    const cold: Behaviour = { coldStart: { runs: 2, seconds: 2 } };
    const w = steady({ '2': cold });
    w.edit(image2());
    w.until('promoted', (x) => !!x.status?.lastCohort, 1200);
    expect(w.status?.lastCohort).toMatchObject({ result: 'Promoted' });
  });

  it('aborts a revision slow on a steady share of its runs (a third: 2 s instead of 0.04), naming how many', () => {
    const w = steady({ '2': { slowShare: 1 / 3 } });
    w.edit(image2());
    w.until('aborted', (x) => !!x.status?.lastCohort, 600);
    expect(w.status?.lastCohort).toMatchObject({ result: 'Aborted', check: 'Latency' });
    const m = /(\d+) of the cohort's (\d+) runs took over 0\.1 s/.exec(
      w.status?.lastCohort?.message ?? '',
    );
    expect(m).not.toBeNull();
    expect(Number(m![1]) / Number(m![2])).toBeCloseTo(1 / 3, 1);
  });

  it('a queue already over its objective that holds steady (within a second) does not abort the cohort', () => {
    const w = steady();
    w.age = () => 31;
    w.run(5);
    w.edit(image2());
    const started = w.t;
    // the reading moves by less than its whole-second resolution
    w.age = (t) => (t > started + 3 ? 31.8 : 31);
    w.until('promoted', (x) => !!x.status?.lastCohort, 1200);
    expect(w.status?.lastCohort).toMatchObject({ result: 'Promoted' });
  });

  it('aborts when queue age rises past the objective once the cohort runs', () => {
    const w = steady();
    w.edit(image2());
    const started = w.t;
    w.age = (t) => (t > started + 10 ? 20 + (t - started) : 2);
    w.until('aborted', (x) => x.status?.lastCohort?.result === 'Aborted', 300);
    expect(w.status?.lastCohort).toMatchObject({ check: 'Age' });
    expect(w.status?.lastCohort?.message).toMatch(
      /queue age rose from 2 s to \d+ s, past the 30 s objective/,
    );
  });

  it('`abort` drains the cohort at once, audited, and the revision stays off', () => {
    const w = steady();
    w.edit(image2());
    w.until('step 2', (x) => x.status?.cohort?.step === 2, 600);
    w.command({ action: 'abort', revision: '2' });
    w.until('aborted', (x) => x.status?.lastCohort?.result === 'Aborted', 60);
    expect(w.status?.lastCohort).toMatchObject({ check: 'Manual' });
    expect(w.status?.lastCohort?.message).toContain('aborted by alice: checked by hand');
    w.run(60);
    expect(w.pods.some((p) => p.revision === '2')).toBe(false);
  });

  it('restart mid-step: a failing revision is still aborted on the same check', () => {
    const w = steady({ '2': { deadLetter: 0.1 } });
    w.edit(image2({ steps: [{ cohort: { replicas: 1 } }, { cohort: { percent: 100 } }] }));
    (w.spec.rollout as Record<string, unknown>).cohortChecks = { minJobs: 200 };
    w.until('cohort ready', (x) => !!x.status?.cohort?.analysisUntil, 60);
    const down = w.t;
    w.operatorDown = (t) => t >= down && t < down + 15;
    w.restart();
    w.until('aborted', (x) => x.status?.lastCohort?.result === 'Aborted', 600);
    expect(w.status?.lastCohort?.check).toBe('DeadLetters');
  });
});

describe('Cohort strategy and the gate', () => {
  it('a key-rule change never reaches a cohort: no Deployment, no pod, blocked', () => {
    const w = steady();
    w.edit(image2({ keyRule: 'order:{id}:v2' }));
    w.run(200);
    expect(w.revisionsRun.has('2')).toBe(false);
    expect(w.deployments.has(cohortDeploymentName(NAME))).toBe(false);
    expect(w.status?.phase).toBe('Blocked');
    expect(w.status?.cohort).toBeUndefined();
  });

  it('a blocked change made mid-cohort drains the cohort of the last good change', () => {
    const w = steady();
    w.edit(image2());
    w.until('step 1 ready', (x) => !!x.status?.cohort?.analysisUntil, 60);
    w.edit(specJson({ image: 'registry.example.com/w:3', keyRule: 'order:{id}:v3' }));
    w.until('cohort gone', (x) => x.status?.lastCohort?.check === 'Blocked', 60);
    expect(w.status?.lastCohort?.message).toContain('changes the idempotency-key rule');
    w.run(30);
    expect(w.revisionsRun.has('3')).toBe(false);
    expect(w.pods.some((p) => p.revision === '2')).toBe(false);
    expect(w.status?.phase).toBe('Blocked');
  });
});

describe('cohortReplicas', () => {
  it('is a share of the fleet, at least 1 and never more than the fleet', () => {
    expect(cohortReplicas({ cohort: { percent: 25 } }, 10)).toBe(3);
    expect(cohortReplicas({ cohort: { percent: 1 } }, 10)).toBe(1);
    expect(cohortReplicas({ cohort: { replicas: 5 } }, 3)).toBe(3);
    expect(cohortReplicas({ cohort: { percent: 100 } }, 0)).toBe(0);
  });
});
