// One JobWorker reconcile's decisions, pure: from an Observation (what the
// controller read), the scaler's memory and the time, to the children to
// apply, the full status, the events a change deserves, the gauges, and when
// to look again. Like planRollout, it asks (`need`) for the few reads that
// matter only in some states, and is called again with the answer.
import type { JobWorker, JobWorkerStatus } from '../api/jobworker.js';
import type { KubeObject } from '../kube/client.js';
import type { Observation } from './observation.js';
import { desiredDeployment, desiredMetricsService, desiredPdb } from './desired.js';
import { queueAge, type AgeMemory } from './queue-age.js';
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
  ageSource?: 'HeadTimestamp' | 'Estimated';
}

export interface Plan {
  /** children to apply (Deployment first); none while the spec or its Secrets are broken */
  children: KubeObject[];
  status: JobWorkerStatus;
  /** emitted once the status that carries the change is written */
  events: PlanEvent[];
  /** only when this reconcile creates the Deployment */
  createdEvent?: PlanEvent;
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
  answers: RolloutAnswers;
}

export function planJobWorker(i: PlanInput): Plan | { need: RolloutNeed } {
  const { obs, now } = i;
  const { raw, spec, problems, deployment } = obs;
  const previous = raw.status as JobWorkerStatus | undefined;
  const live = (deployment?.spec as { replicas?: number } | undefined)?.replicas;
  // While a rollback drains, the Deployment sits at 0: the autoscaler keeps
  // its own count, to restore the previous revision at.
  const current = Number(
    (previous?.rollout && live === 0 ? previous.desiredReplicas : live) ??
      previous?.desiredReplicas ??
      0,
  );
  const healthy = spec !== undefined && problems.length === 0;
  const scaled =
    healthy && obs.queue ? scale(obs, spec, current, i.memory, now.getTime()) : undefined;
  const scaling = scaled?.outcome;
  const desiredReplicas = scaling?.desired ?? current;

  let rollout: RolloutPlan | undefined;
  let appliedReplicas = desiredReplicas;
  const children: KubeObject[] = [];
  const events: PlanEvent[] = [];
  let createdEvent: PlanEvent | undefined;
  if (healthy) {
    const r = planRollout({
      raw,
      spec,
      previous,
      deployment,
      now,
      ageSeconds: scaling?.signalOk ? scaling.oldestAgeSeconds : undefined,
      answers: i.answers,
    });
    if ('need' in r) return r;
    rollout = r;
    appliedReplicas = r.scaleToZero ? 0 : desiredReplicas;
    // The template applied is the planned revision's, from that revision's spec.
    const jw = { ...raw, spec: r.deploySpec } as unknown as JobWorker;
    children.push(
      desiredDeployment(jw, r.deployRevision, appliedReplicas),
      desiredMetricsService(jw),
      desiredPdb(jw),
    );
    if (!deployment)
      createdEvent = {
        type: 'Normal',
        reason: 'DeploymentCreated',
        message: `Created Deployment ${raw.metadata.name} at revision ${r.deployRevision} (${r.deploySpec.image}) with ${appliedReplicas} replicas.${scaling ? ` ${scaling.message}` : ''}`,
      };
    const revisionChanged =
      previous?.updateRevision !== undefined && previous.updateRevision !== r.targetRevision;
    if (deployment && revisionChanged && !r.status.rollingBack)
      events.push({
        type: 'Normal',
        reason: 'RevisionChanged',
        message: `Rolling to revision ${r.targetRevision} (${r.deploySpec.image}).`,
      });
    events.push(...r.events);
    if (deployment && scaling && !r.scaleToZero && desiredReplicas !== current)
      events.push({
        type: 'Normal',
        reason: desiredReplicas > current ? 'ScaledUp' : 'ScaledDown',
        message: `Scaled from ${current} to ${desiredReplicas} replicas. ${scaling.message}`,
      });
  } else if (problems.length) {
    // Hold what runs: a broken spec or a missing Secret must not take down the fleet.
    events.push({
      type: 'Warning',
      reason: problems[0]!.reason,
      message: problems.map((p) => p.message).join(' '),
    });
  }

  const status = computeStatus({
    generation: raw.metadata.generation ?? 0,
    previous,
    problems,
    desiredReplicas,
    deployment: observeDeployment(deployment),
    updateRevision: rollout?.targetRevision ?? previous?.updateRevision,
    history: rollout?.history ?? previous?.history ?? [],
    now,
    scaling,
    deadLetters: obs.deadLetters,
    rollout: rollout?.status,
    appliedReplicas,
  });
  return {
    children,
    status,
    events,
    ...(createdEvent && { createdEvent }),
    ...(scaled && { memory: scaled.memory }),
    ...(scaling && { scaling }),
    desiredReplicas,
    ...(rollout && { rolloutBlocked: rollout.blocked }),
    requeueAfterMs: requeue(i, status, rollout, scaling !== undefined),
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
  const readyReplicas = Number(
    (obs.deployment?.status as { readyReplicas?: number } | undefined)?.readyReplicas ?? 0,
  );
  let signals: Signals;
  let age: ReturnType<typeof queueAge>['age'] | undefined;
  let ageMemory = mem.age;
  const q = obs.queue;
  if (q?.ok) {
    const r = queueAge(q.stats, nowMs, mem.age);
    ageMemory = r.memory;
    age = r.age;
    signals = {
      ...age.signals,
      readyReplicas,
      ...(q.throttleRate !== undefined && { throttleRate: q.throttleRate }),
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
    },
    memory: { scaling: d.state, age: ageMemory },
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
