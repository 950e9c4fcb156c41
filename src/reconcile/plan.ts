// One JobWorker reconcile's decisions, pure: from an Observation (what the
// controller read), the scaler's memory and the time, to the children to
// apply, the full status, the events a change deserves, the gauges, and when
// to look again. Like planRollout, it asks (`need`) for the few reads that
// matter only in some states, and is called again with the answer.
import type { JobWorker, JobWorkerStatus } from '../api/jobworker.js';
import type { KubeObject } from '../kube/client.js';
import type { Observation } from './observation.js';
import type { FiguresMemory } from './cohort-figures.js';
import {
  cohortDeploymentName,
  desiredCohortDeployment,
  desiredDeployment,
  desiredMetricsService,
  desiredPdb,
  desiredRevisionRecord,
  revisionOf,
  revisionRecordName,
} from './desired.js';
import { pauseSwitch, wasPaused } from './pause.js';
import { chooseRemovals, type PodLoad, type Removal } from './scale-down.js';
import { iso } from './rollout.js';
import { workersNeedChecking, workersReadyCondition, type WorkerReport } from './workers.js';
import { queueAge, type AgeMemory, type AgeSource, type EstimatedBecause } from './queue-age.js';
import {
  estimateCapacity,
  type CapacityEstimate,
  type CapacityMemory,
  type CapacitySource,
} from './capacity.js';
import {
  planRollout,
  type RolloutAnswers,
  type RolloutNeed,
  type RolloutPlan,
} from './rollout-plan.js';
import {
  decideReplicas,
  type LimitedBy,
  type ScalingSpec,
  type ScalingState,
  type Signals,
} from './scaling.js';
import { computeStatus, deadLetterDueInMs, observeDeployment } from './status.js';

/** What a reconcile remembers of a JobWorker between reconciles (lost on restart, and that is fine). */
export interface ScalingMemory {
  scaling: ScalingState;
  age: AgeMemory;
  capacity?: CapacityMemory;
  /** a Cohort rollout's last read of each pod's counters (./cohort-figures.ts) */
  cohort?: FiguresMemory;
}

export interface PlanEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

export interface ScalingOutcome {
  desired: number;
  /** the objective (spec.scaling.targetOldestAgeSeconds), for the alerts' gauge */
  targetAgeSeconds: number;
  limitedBy: LimitedBy;
  message: string;
  signalOk: boolean;
  oldestAgeSeconds?: number;
  queueDepth?: number;
  ageSource?: AgeSource;
  /** why the age is estimated, when the user can change it */
  estimatedBecause?: EstimatedBecause;
  capacitySource?: CapacitySource | 'Saturation';
  capacityPerReplica?: number;
  throttling?: boolean;
}

export interface Plan {
  /** children to apply (Deployment first); none while the spec or its Secrets are broken */
  children: KubeObject[];
  /** created when absent, never patched: the spec revision's ControllerRevision */
  records: KubeObject[];
  /** ControllerRevisions of revisions dropped from history, to delete */
  prune: string[];
  status: JobWorkerStatus;
  /** emitted once the status that carries the change is written */
  events: PlanEvent[];
  /** children to delete: a Cohort rollout's Deployment once it is over */
  remove: Array<{ apiVersion: string; kind: string; name: string }>;
  /** only when this reconcile creates the Deployment */
  createdEvent?: PlanEvent;
  /** pod-deletion-cost annotations to write before the Deployment (./scale-down.ts) */
  podCosts?: Removal['writes'];
  /** deliveries the pods chosen for removal hold: counted by the operator's metric */
  scaleDownHeld?: number;
  memory?: ScalingMemory;
  scaling?: ScalingOutcome;
  desiredReplicas: number;
  rolloutBlocked?: boolean;
  requeueAfterMs?: number;
}

export interface PlanInput {
  obs: Observation;
  /** undefined for a JobWorker this process has not scaled yet */
  memory: ScalingMemory | undefined;
  now: Date;
  /** how often the queue is read while scaling on its age */
  pollMs: number;
  deadLetterReadMs: number;
  answers: PlanAnswers;
}

/** A read the plan needs in this state: the rollout's, or the unready workers' reports. */
export type PlanNeed = RolloutNeed | { kind: 'workers' } | { kind: 'podLoad' };
export type PlanAnswers = RolloutAnswers & {
  /** what the unready pods say (./workers.ts); a key present with undefined: unreadable */
  workers?: WorkerReport[] | undefined;
  /** what each pod holds, before a scale-down (./scale-down.ts); undefined: unreadable */
  podLoad?: PodLoad[] | undefined;
};

export function planJobWorker(i: PlanInput): Plan | { need: PlanNeed } {
  const { obs, now } = i;
  const { raw, spec, problems, deployment } = obs;
  const previous = raw.status as JobWorkerStatus | undefined;
  const live = (deployment?.spec as { replicas?: number } | undefined)?.replicas;
  const paused = spec?.paused === true;
  const pausedBefore = wasPaused(previous);
  // While a rollback drains or the fleet is paused, the Deployment sits at 0,
  // and beside a cohort it holds only the stable share: the autoscaler keeps
  // its own count, to restore at.
  const current = Number(
    (((previous?.rollout || pausedBefore || paused) && live === 0) || previous?.cohort
      ? previous?.desiredReplicas
      : live) ??
      previous?.desiredReplicas ??
      0,
  );
  const healthy = spec !== undefined && problems.length === 0;
  const scaled =
    healthy && obs.queue ? scale(obs, spec, current, i.memory, now.getTime()) : undefined;
  let scaling = scaled?.outcome;
  // Paused, scaling holds: the age is still read and reported, nothing acts on it.
  if (paused && scaling)
    scaling = {
      ...scaling,
      desired: current,
      message: `Paused: 0 replicas held, ${current} restored on resume (the scaler would run ${scaling.desired}). ${scaling.message}`,
    };
  const desiredReplicas = scaling?.desired ?? current;

  let rollout: RolloutPlan | undefined;
  let appliedReplicas = desiredReplicas;
  const children: KubeObject[] = [];
  const events: PlanEvent[] = [];
  let createdEvent: PlanEvent | undefined;
  let removal: Removal | undefined;
  const records: KubeObject[] = [];
  const prune: string[] = [];
  const remove: Plan['remove'] = [];
  let cohortMemory: FiguresMemory | undefined;
  if (paused && spec && deployment) {
    // Rollouts hold: the pod template that ran stays, as it is, at 0 —
    // whatever the spec says now, and whether or not its Secrets are in place.
    appliedReplicas = 0;
    const jw = { ...raw, spec } as unknown as JobWorker;
    children.push(
      liveTemplateDeployment(jw, deployment, 0),
      desiredMetricsService(jw),
      desiredPdb(jw),
    );
    // A cohort stops too, as it is; its step resumes with the fleet.
    if (obs.cohortDeployment && previous?.cohort)
      children.push(
        cohortDeployment(
          jw,
          { revision: previous.cohort.revision, replicas: 0, prefetch: spec.broker.prefetch },
          obs.cohortDeployment,
        ),
      );
  } else if (healthy) {
    const r = planRollout({
      raw,
      spec,
      previous:
        pausedBefore && !paused
          ? resumed(previous, scaling, spec.rollout.verifySeconds, now)
          : previous,
      deployment,
      now,
      ageSeconds: scaling?.signalOk && !paused ? scaling.oldestAgeSeconds : undefined,
      answers: i.answers,
      ...(obs.cohortDeployment && { cohortDeployment: obs.cohortDeployment }),
      total: desiredReplicas,
      ...(i.memory?.cohort && { cohortMemory: i.memory.cohort }),
      ...(obs.queue?.ok && { queueType: obs.queue.stats.type }),
    });
    if ('need' in r) return r;
    rollout = r;
    records.push(
      desiredRevisionRecord(
        raw as unknown as JobWorker,
        r.specRevision,
        JSON.parse(JSON.stringify(raw.spec)) as Record<string, unknown>,
      ),
    );
    prune.push(...r.evicted.map((rev) => revisionRecordName(raw.metadata.name, rev)));
    appliedReplicas = r.scaleToZero || paused ? 0 : (r.mainReplicas ?? desiredReplicas);
    cohortMemory = r.cohortMemory;
    // The template applied is the planned revision's, from that revision's
    // spec, or the live one kept as it is (see planRollout).
    const jw = { ...raw, spec: r.deploySpec ?? spec } as unknown as JobWorker;
    const d = r.deploySpec
      ? desiredDeployment(jw, r.deployRevision, appliedReplicas)
      : deployment && liveTemplateDeployment(jw, deployment, appliedReplicas);
    children.push(...(d ? [d] : []), desiredMetricsService(jw), desiredPdb(jw));
    if (r.cohort) children.push(cohortDeployment(jw, r.cohort, obs.cohortDeployment));
    if (r.removeCohort)
      remove.push({
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        name: cohortDeploymentName(raw.metadata.name),
      });
    // Going down (not to zero: then every pod goes): the idlest pods first —
    // not beside a cohort, whose pods the stable Deployment cannot remove.
    if (
      deployment &&
      !obs.cohortDeployment &&
      !r.cohort &&
      spec.scaling.removeIdleFirst &&
      appliedReplicas > 0 &&
      appliedReplicas < (live ?? 0)
    ) {
      if (!('podLoad' in i.answers)) return { need: { kind: 'podLoad' } };
      if (i.answers.podLoad)
        removal = chooseRemovals(i.answers.podLoad, (live ?? 0) - appliedReplicas);
    }
    if (!deployment && r.deploySpec)
      createdEvent = {
        type: 'Normal',
        reason: 'DeploymentCreated',
        message: `Created Deployment ${raw.metadata.name} at revision ${r.deployRevision} (${r.deploySpec.image}) with ${appliedReplicas} replicas.${scaling ? ` ${scaling.message}` : ''}`,
      };
    const revisionChanged =
      previous?.updateRevision !== undefined && previous.updateRevision !== r.targetRevision;
    // (a Cohort rollout's own events tell its story)
    if (deployment && revisionChanged && !r.status.rollingBack && !previous?.cohort)
      events.push({
        type: 'Normal',
        reason: 'RevisionChanged',
        message: `Rolling to revision ${r.targetRevision}${r.deploySpec ? ` (${r.deploySpec.image})` : ''}.`,
      });
    events.push(...r.events);
    if (deployment && scaling && !r.scaleToZero && !paused && desiredReplicas !== current)
      events.push({
        type: 'Normal',
        reason: desiredReplicas > current ? 'ScaledUp' : 'ScaledDown',
        message: `Scaled from ${current} to ${desiredReplicas} replicas. ${scaling.message}${removal ? ` ${removedWords(removal)}` : ''}`,
      });
  }
  // A broken spec or a missing Secret holds what runs: it must not take down the fleet.
  if (problems.length)
    events.push({
      type: 'Warning',
      reason: problems[0]!.reason,
      message: problems.map((p) => p.message).join(' '),
    });
  // Pods short of ready for a while are asked why (a refused password, a database down).
  const checkWorkers = appliedReplicas > 0 && workersNeedChecking(deployment, now);
  if (checkWorkers && !('workers' in i.answers)) return { need: { kind: 'workers' } };
  const observed = observeDeployment(deployment);
  const workers = workersReadyCondition(
    observed,
    appliedReplicas,
    checkWorkers ? (i.answers.workers ?? []) : undefined,
  );
  // Once per fault, not for every change of the ready count while it lasts.
  const before = previous?.conditions?.find((c) => c.type === 'WorkersReady');
  if (
    workers.status === 'False' &&
    (before?.status !== 'False' || before.reason !== workers.reason)
  )
    events.push({ type: 'Warning', reason: 'WorkersNotReady', message: workers.message });
  const pause = spec && pauseSwitch(raw);
  if (pause && paused !== pausedBefore)
    events.push(
      paused
        ? {
            type: 'Normal',
            reason: 'Paused',
            message: `Paused by ${pause.by}: ${pause.reason}. Consumers drain within ${spec.shutdown.drainDeadlineSeconds} s, then 0 replicas are held; scaling and rollouts hold until resumed.`,
          }
        : {
            type: 'Normal',
            reason: 'Resumed',
            message: `Resumed by ${pause.by}: ${pause.reason}. Replicas follow the scaler again, from ${current}.`,
          },
    );

  const status = computeStatus({
    generation: raw.metadata.generation ?? 0,
    previous,
    problems,
    desiredReplicas,
    deployment: observed,
    updateRevision: rollout?.targetRevision ?? previous?.updateRevision,
    history: rollout?.history ?? previous?.history ?? [],
    now,
    scaling,
    paused: paused && pause ? pause : undefined,
    workers,
    deadLetters: obs.deadLetters,
    rollout: rollout?.status,
    appliedReplicas,
    ...(rollout?.cohort &&
      obs.cohortDeployment && { cohort: observeDeployment(obs.cohortDeployment) }),
    ...(removal &&
      live !== undefined && {
        scaleDown: { from: live, to: appliedReplicas, heldDeliveries: removal.heldDeliveries },
      }),
  });
  return {
    children,
    records,
    prune,
    remove,
    status,
    events,
    ...(createdEvent && { createdEvent }),
    ...(removal && { podCosts: removal.writes, scaleDownHeld: removal.heldDeliveries }),
    // Paused, the scaler's window holds; the age estimate keeps learning.
    ...(scaled && {
      memory: {
        ...(paused && i.memory ? { ...scaled.memory, scaling: i.memory.scaling } : scaled.memory),
        ...((cohortMemory ?? (paused ? i.memory?.cohort : undefined)) && {
          cohort: cohortMemory ?? i.memory?.cohort,
        }),
      },
    }),
    ...(scaling && { scaling }),
    desiredReplicas,
    ...(rollout && { rolloutBlocked: rollout.blocked }),
    requeueAfterMs: requeue(i, status, rollout, scaling !== undefined),
  };
}

function removedWords(r: Removal): string {
  return r.heldDeliveries === 0
    ? `Removing the idlest pods (${r.chosen.join(', ')}): no delivery interrupted.`
    : `Removing the idlest pods (${r.chosen.join(', ')}), which hold ${r.heldDeliveries} deliveries: they finish within the drain deadline or go back to the queue.`;
}

/** A Cohort rollout's Deployment: the revision's template, or the live one while it drains. */
function cohortDeployment(
  jw: JobWorker,
  c: NonNullable<RolloutPlan['cohort']>,
  live: KubeObject | undefined,
): KubeObject {
  const d = desiredCohortDeployment(
    c.spec ? { ...jw, spec: c.spec } : jw,
    c.revision,
    c.replicas,
    c.prefetch,
  );
  const template = (live?.spec as { template?: unknown } | undefined)?.template;
  return c.spec || !template ? d : { ...d, spec: { ...(d.spec as object), template } };
}

/**
 * The Deployment with its live pod template untouched (the revision that
 * runs, gate-checked when it started) at `replicas`: what a paused fleet
 * holds, and what keeps running while the revision to move to cannot start.
 */
function liveTemplateDeployment(jw: JobWorker, live: KubeObject, replicas: number): KubeObject {
  const d = desiredDeployment(jw, revisionOf(live) ?? '', replicas);
  const template = (live.spec as { template?: unknown } | undefined)?.template;
  return { ...d, spec: { ...(d.spec as object), template } };
}

/**
 * Resumed: the windows a pause interrupted start again. An analysis starts
 * its window now, anchored at the first age read once a worker consumes (the
 * backlog the pause left is not the new revision's doing); a rollback's
 * verification gets its window again, against the age now.
 */
function resumed(
  previous: JobWorkerStatus | undefined,
  scaling: ScalingOutcome | undefined,
  verifySeconds: number,
  now: Date,
): JobWorkerStatus | undefined {
  if (!previous) return previous;
  const a = previous.analysis;
  const r = previous.rollout;
  const age = scaling?.signalOk ? scaling.oldestAgeSeconds : undefined;
  return {
    ...previous,
    ...(a && { analysis: { revision: a.revision, stable: a.stable, startedAt: iso(now) } }),
    ...(r?.phase === 'Verifying' && {
      rollout: {
        ...r,
        verifyUntil: iso(new Date(now.getTime() + verifySeconds * 1000)),
        ...(age !== undefined && { ageAtRestore: Math.round(age) }),
      },
    }),
  };
}

/** Desired replicas from the queue's signals (src/reconcile/scaling.ts), with the scaler's memory. */
function scale(
  obs: Observation,
  spec: NonNullable<Observation['spec']>,
  current: number,
  memory: ScalingMemory | undefined,
  nowMs: number,
): { outcome: ScalingOutcome; memory: ScalingMemory } {
  const sc = spec.scaling;
  const scalingSpec: ScalingSpec = {
    ...sc,
    prefetch: spec.broker.prefetch,
    maxConcurrency: sc.downstream?.maxConcurrency,
  };
  const mem = memory ?? { scaling: { recommendations: [] }, age: {} };
  // the fleet's ready workers: the stable Deployment's and a cohort's beside it
  const ready = (d: KubeObject | undefined) =>
    Number((d?.status as { readyReplicas?: number } | undefined)?.readyReplicas ?? 0);
  const readyReplicas = ready(obs.deployment) + ready(obs.cohortDeployment);
  let signals: Signals;
  let age: ReturnType<typeof queueAge>['age'] | undefined;
  let ageMemory = mem.age;
  let capacityMemory = mem.capacity;
  let capacity: CapacityEstimate | undefined;
  const q = obs.queue;
  if (q?.ok) {
    const r = queueAge(q.stats, nowMs, mem.age, q.heads);
    ageMemory = r.memory;
    age = r.age;
    const c = estimateCapacity(q.capacity, spec.broker.prefetch, mem.capacity, nowMs);
    capacityMemory = c.memory;
    capacity = c.estimate;
    signals = {
      ...age.signals,
      readyReplicas,
      ...(q.throttleRate !== undefined && { throttleRate: q.throttleRate }),
      ...(capacity && { capacityPerReplica: capacity.perReplica }),
      ...(capacity?.completedRate !== undefined && { workerCompletedRate: capacity.completedRate }),
    };
  } else signals = { ok: false, missing: q?.missing ?? 'no queue signal' };
  // A new fleet starts at minReplicas; an unreadable signal never moves it.
  const base = current === 0 && !memory ? sc.minReplicas : current;
  const d = decideReplicas(scalingSpec, base, signals, mem.scaling, nowMs);
  const desired = signals.ok ? d.desired : Math.min(sc.maxReplicas, Math.max(sc.minReplicas, base));
  return {
    outcome: {
      desired,
      targetAgeSeconds: sc.targetOldestAgeSeconds,
      limitedBy: d.limitedBy,
      message: d.message,
      signalOk: signals.ok,
      oldestAgeSeconds: age?.signals.oldestAgeSeconds,
      queueDepth: age?.signals.depth,
      ageSource: age?.ageSource,
      ...(age?.estimatedBecause && { estimatedBecause: age.estimatedBecause }),
      throttling: d.throttling,
      ...(capacity
        ? { capacitySource: capacity.source, capacityPerReplica: capacity.perReplica }
        : d.state.perReplicaRate !== undefined && {
            capacitySource: 'Saturation' as const,
            capacityPerReplica: d.state.perReplicaRate,
          }),
    },
    memory: {
      scaling: d.state,
      age: ageMemory,
      ...(capacityMemory && { capacity: capacityMemory }),
    },
  };
}

/**
 * When to look again: Deployment changes wake the reconcile through its
 * watch; queue age and the quarantine have none, so they are polled.
 */
function requeue(
  i: PlanInput,
  status: JobWorkerStatus,
  rollout: RolloutPlan | undefined,
  scaled: boolean,
): number | undefined {
  if (i.obs.problems.length) return undefined; // retried with backoff instead
  if (rollout?.requeueMs !== undefined) return rollout.requeueMs;
  if (status.conditions?.some((c) => c.type === 'Progressing' && c.status === 'True'))
    return Math.min(5000, i.pollMs);
  // Turn the condition at the moment the oldest quarantined entry passes maxAge.
  const deadLetterDue = i.obs.deadLetters
    ? Math.min(i.deadLetterReadMs, deadLetterDueInMs(i.obs.deadLetters, i.now) ?? Infinity)
    : Infinity;
  const after = Math.min(scaled && i.obs.polling ? i.pollMs : Infinity, deadLetterDue);
  return Number.isFinite(after) ? after : undefined;
}
