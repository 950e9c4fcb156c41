// The JobWorker's status, pure: a function of the spec, what was observed and
// what the reconcile did. Written once per reconcile, and only when it changed.
import type { ScalingOutcome } from '../scaling/index.js';
import type { Condition, JobWorkerStatus } from '../../api/jobworker.js';
import {
  phaseOf,
  setCondition,
  type ConditionInput,
  type Problem,
  iso,
  type DeadLetterInput,
  type OutboxInput,
} from '../model/index.js';
import type { KubeObject } from '../../api/kube-object.js';
import { revisionOf } from '../children/index.js';
import type { HistoryEntry, PauseSwitch, RolloutStatus } from '../rollout/index.js';
import type { WorkerReason } from '../../api/reasons.js';
import { duration } from './duration.js';
import { outboxCondition, outboxField } from './outbox.js';

export interface DeploymentObservation {
  /** the revision its pod template carries */
  revision: string | undefined;
  generation: number;
  observedGeneration: number;
  replicas: number;
  /** every pod it has, of any revision (status.replicas): more than `replicas` mid-rollout */
  podReplicas: number;
  readyReplicas: number;
  updatedReplicas: number;
  availableReplicas: number;
}

/**
 * AgeObjectiveMet: is the oldest waiting message within the objective? False
 * says so while the phase may still read Healthy (the fleet is fine, the
 * backlog is not); Unknown when there is no age to compare.
 */
export function ageObjectiveCondition(
  scaling: NonNullable<StatusInput['scaling']>,
): ConditionInput {
  const type = 'AgeObjectiveMet';
  const age = scaling.oldestAgeSeconds;
  const targetAgeSeconds = scaling.targetAgeSeconds;
  if (!scaling.signalOk || age === undefined || targetAgeSeconds === undefined)
    return {
      type,
      status: 'Unknown',
      reason: 'SignalMissing',
      message: `No queue age to hold against the objective: ${scaling.message}`,
    };
  return age <= targetAgeSeconds
    ? {
        type,
        status: 'True',
        reason: 'WithinObjective',
        message: `The oldest waiting message is within the ${targetAgeSeconds} s objective.`,
      }
    : {
        type,
        status: 'False',
        reason: 'OverObjective',
        message: `The oldest waiting message is ${coarse(age)} s old, over the ${targetAgeSeconds} s objective (limited by ${scaling.limitedBy}).`,
      };
}

/** AgeMeasured: whether the age scaled and alerted on is measured, and what to do when it is not. */
export function ageMeasuredCondition(scaling: NonNullable<StatusInput['scaling']>): ConditionInput {
  const type = 'AgeMeasured';
  switch (scaling.ageSource) {
    case 'HeadTimestamp':
      return {
        type,
        status: 'True',
        reason: 'HeadTimestamp',
        message: 'The age is the head message’s timestamp, from the RabbitMQ management API.',
      };
    case 'DeliveryTimestamps':
      return {
        type,
        status: 'True',
        reason: 'DeliveryTimestamps',
        message:
          'The age is measured from the timestamps of the messages the workers receive (docs/scaling.md).',
      };
    default:
      return scaling.estimatedBecause === 'NoMessageTimestamps'
        ? {
            type,
            status: 'False',
            reason: 'NoMessageTimestamps',
            message:
              'Deliveries carry no timestamp, so the age is estimated from depth and rates. Publish with the timestamp property (the worker library’s publish() sets it), or set message_interceptors.incoming.set_header_timestamp.overwrite = false in rabbitmq.conf (RabbitMQ 3.12+).',
          }
        : {
            type,
            status: 'False',
            reason: 'Estimated',
            message:
              'No worker has reported a delivery (none running, or none answered on its metrics port), so the age is estimated from depth and rates.',
          };
  }
}

/** The DeadLettersOverdue condition: True once the oldest quarantined entry is older than maxAgeSeconds. */
export function deadLetterCondition(dl: DeadLetterInput, now: Date): ConditionInput {
  const type = 'DeadLettersOverdue';
  if (!dl.stats)
    return { type, status: 'Unknown', reason: 'Unreadable', message: dl.error ?? 'Not read yet.' };
  const { quarantined, oldestAt } = dl.stats;
  if (quarantined === 0 || !oldestAt)
    return { type, status: 'False', reason: 'Empty', message: 'No dead letters are quarantined.' };
  const where = `Owner ${dl.owner}: \`jobfleet dlq list --queue ${dl.queue}\`, then docs/dead-letters.md.`;
  const since = iso(oldestAt);
  if (now.getTime() - oldestAt.getTime() > dl.maxAgeSeconds * 1000)
    return {
      type,
      status: 'True',
      reason: 'OldestDeadLetterOverdue',
      message: `${quarantined} dead letter${quarantined === 1 ? '' : 's'} quarantined; the oldest, from ${since}, is past maxAgeSeconds ${dl.maxAgeSeconds}. ${where}`,
    };
  return {
    type,
    status: 'False',
    reason: 'WithinMaxAge',
    message: `${quarantined} dead letter${quarantined === 1 ? '' : 's'} quarantined, the oldest from ${since}, within maxAgeSeconds ${dl.maxAgeSeconds}. ${where}`,
  };
}

/** When the oldest entry will pass maxAge (ms from now), so the condition turns on time; undefined if never. */
export function deadLetterDueInMs(dl: DeadLetterInput, now: Date): number | undefined {
  const oldest = dl.stats?.oldestAt;
  if (!oldest) return undefined;
  const due = oldest.getTime() + dl.maxAgeSeconds * 1000 - now.getTime();
  return due > 0 ? due + 1000 : undefined;
}

export interface StatusInput {
  generation: number;
  previous: JobWorkerStatus | undefined;
  /** why the spec cannot be acted on (invalid spec, missing Secret…): Degraded, nothing rolled */
  problems: Problem[];
  desiredReplicas: number;
  deployment: DeploymentObservation | undefined;
  updateRevision: string | undefined;
  history: HistoryEntry[];
  now: Date;
  deadLetters?: DeadLetterInput;
  /** OutboxDelivering and status.outbox, when spec.outbox names one */
  outbox?: OutboxInput;
  /** BrokerSettingsSafe (../broker/), when the broker's settings were read */
  broker?: ConditionInput;
  /** what the rollout planned (../rollout/planner.ts) */
  rollout?: RolloutStatus;
  /** WorkersReady (./workers.ts): a False one degrades the JobWorker */
  workers?: ConditionInput;
  /** spec.paused is set: who set it and why */
  paused?: PauseSwitch;
  /** replicas the Deployment was given (0 while a rollback drains or paused) */
  appliedReplicas?: number;
  /** the cohort Deployment of a Cohort rollout (../cohort/steps.ts), when there is one */
  cohort?: DeploymentObservation;
  /** this reconcile lowers the replicas, removing the pods ../scaling/scale-down.ts chose */
  scaleDown?: { from: number; to: number; heldDeliveries: number };
  /** the scaling decision (../scaling/outcome.ts), the objective optional (a test of one condition may leave it out) */
  scaling?: Omit<ScalingOutcome, 'desired' | 'targetAgeSeconds'> & { targetAgeSeconds?: number };
  /** the JobWorker, for the commands a message names */
  target?: { name: string; namespace?: string };
  /** the leader-election Lease of the operator writing this status (what `kubectl jobworker status` checks) */
  operatorLease?: { namespace: string; name: string };
}

/** Two significant figures: status tracks age without a write for every second that passes. */
export function coarse(n: number): number {
  if (n < 100) return Math.round(n);
  const p = 10 ** (Math.floor(Math.log10(n)) - 1);
  return Math.round(n / p) * p;
}

export function computeStatus(i: StatusInput): JobWorkerStatus {
  const prev = i.previous ?? {};
  const d = i.deployment;
  const rolledOut = isRolledOut(i);
  const conditions = conditionsOf(i, rolledOut, prev.conditions ?? []).reduce(
    (all, c) => setCondition(all, c, i.generation, i.now),
    prev.conditions ?? [],
  );
  // what only a pause says goes with it (a resumed fleet whose queue was not read yet)
  const kept: JobWorkerStatus = { ...prev };
  delete kept.resumeReplicas;
  if (!i.paused && kept.scaling?.limitedBy === 'paused') delete kept.scaling;
  const status: JobWorkerStatus = {
    ...kept,
    observedGeneration: i.generation,
    // Paused, the fleet is meant to run none: the scaler's count waits in resumeReplicas.
    desiredReplicas: i.paused ? 0 : i.desiredReplicas,
    ...(i.paused && { resumeReplicas: i.desiredReplicas }),
    // the fleet: the stable Deployment and the cohort beside it
    replicas: (d?.replicas ?? 0) + (i.cohort?.replicas ?? 0),
    readyReplicas: (d?.readyReplicas ?? 0) + (i.cohort?.readyReplicas ?? 0),
    updateRevision: i.updateRevision ?? prev.updateRevision,
    currentRevision: rolledOut ? i.updateRevision : (prev.currentRevision ?? undefined),
    history: i.history,
    conditions,
    ...(i.scaling && scalingFields(i.scaling, prev)),
    ...(i.paused && { scaling: pausedScaling(i, prev.scaling) }),
    ...(i.operatorLease && { operatorLease: i.operatorLease }),
    ...(i.scaleDown && { lastScaleDown: lastScaleDown(prev.lastScaleDown, i.scaleDown, i.now) }),
    ...(i.deadLetters?.stats && { deadLetters: deadLettersField(i.deadLetters) }),
    ...(i.deadLetters?.stats?.inDoubt && inDoubtField(i.deadLetters.stats.inDoubt)),
    ...(i.outbox?.stats && { outbox: outboxField(i.outbox) }),
    ...(i.rollout && {
      rollout: i.rollout.rollout,
      lastRollback: i.rollout.lastRollback,
      analysis: i.rollout.analysis,
      abortedRevision: i.rollout.abortedRevision,
      cohort: i.rollout.cohort,
      lastCohort: i.rollout.lastCohort,
    }),
    phase: phaseOf(conditions, i.rollout?.rollingBack),
  };
  return dropUndefined(status);
}

/** Paused, the pause switch sets the count, whatever the scaler would do (its reasoning stays in the message). */
function pausedScaling(
  i: StatusInput,
  last: JobWorkerStatus['scaling'],
): NonNullable<JobWorkerStatus['scaling']> {
  return {
    ...(i.scaling ? scalingFields(i.scaling, i.previous ?? {}).scaling : last),
    limitedBy: 'paused',
    message:
      i.scaling?.message ?? `Paused: 0 replicas held, ${i.desiredReplicas} restored on resume.`,
  };
}

/**
 * Rolled out: the Deployment runs the revision being moved to, on every pod
 * it has. While an older revision's pods remain, the ready ones may be
 * theirs (a new pod that cannot pull its image beside an old one serving).
 * A rollback drains the old revision at 0 replicas first: that is not the
 * new one running; nor is a paused fleet's revision at 0 (its rollout holds).
 */
function isRolledOut(i: StatusInput): boolean {
  const d = i.deployment;
  return (
    !i.paused &&
    !!d &&
    d.revision === i.updateRevision &&
    d.observedGeneration >= d.generation &&
    d.updatedReplicas >= d.replicas &&
    d.podReplicas === d.updatedReplicas &&
    d.readyReplicas >= d.replicas &&
    d.replicas === (i.appliedReplicas ?? i.desiredReplicas)
  );
}

/** Every condition this reconcile sets, in order: a later one of a type replaces an earlier one. */
function conditionsOf(
  i: StatusInput,
  rolledOut: boolean,
  recorded: readonly Condition[],
): ConditionInput[] {
  const optional = (c: ConditionInput | undefined) => (c ? [c] : []);
  return [
    degradedCondition(i),
    ...optional(i.workers),
    pausedCondition(i),
    progressingCondition(i, rolledOut),
    availableCondition(i),
    ...optional(scalingActiveCondition(i)),
    ...optional(i.scaling && ageObjectiveCondition(i.scaling)),
    ...optional(i.scaling?.ageSource ? ageMeasuredCondition(i.scaling) : undefined),
    ...optional(i.deadLetters && deadLetterCondition(i.deadLetters, i.now)),
    ...optional(i.outbox && outboxCondition(i.outbox)),
    ...optional(i.broker),
    ...optional(i.rollout?.progressing),
    ...(i.rollout?.conditions ?? []),
    ...rolloutDefaults(i, recorded),
  ];
}

function degradedCondition(i: StatusInput): ConditionInput {
  if (i.problems.length)
    return {
      type: 'Degraded',
      status: 'True',
      reason: i.problems[0]!.reason,
      message: i.problems.map((p) => p.message).join(' '),
    };
  if (i.rollout?.degraded) return i.rollout.degraded;
  if (i.workers?.status === 'False')
    return {
      type: 'Degraded',
      status: 'True',
      // WorkersReady is False only with a worker's fault (./workers.ts)
      reason: i.workers.reason as WorkerReason,
      message: i.workers.message,
    };
  return {
    type: 'Degraded',
    status: 'False',
    reason: 'AsExpected',
    message: 'The spec is valid and its Secrets are in place.',
  };
}

function pausedCondition(i: StatusInput): ConditionInput {
  return i.paused
    ? {
        type: 'Paused',
        status: 'True',
        reason: 'PausedByUser',
        message: `Paused by ${i.paused.by}: ${i.paused.reason}. ${pausedFleetWords(i.deployment)}; ${i.desiredReplicas} restored on resume: kubectl jobworker resume ${i.target?.name ?? 'NAME'}${i.target?.namespace ? ` -n ${i.target.namespace}` : ''} --reason ….`,
      }
    : {
        type: 'Paused',
        status: 'False',
        reason: 'NotPaused',
        message: 'Replicas follow the scaler.',
      };
}

/** What a paused fleet still runs: pods draining, or none. */
function pausedFleetWords(d: DeploymentObservation | undefined): string {
  const left = d?.podReplicas ?? 0;
  if (left === 0) return 'No replica runs';
  return `${left} replica${left === 1 ? '' : 's'} draining (in-flight jobs finish within spec.shutdown.drainDeadlineSeconds), then none runs`;
}

function progressingCondition(i: StatusInput, rolledOut: boolean): ConditionInput {
  const d = i.deployment;
  const revision = i.updateRevision ?? '?';
  if (i.paused)
    return {
      type: 'Progressing',
      status: 'False',
      reason: 'Paused',
      message: `Rollouts hold while paused; revision ${revision} is next.`,
    };
  if (!d)
    return {
      type: 'Progressing',
      status: 'True',
      reason: 'Creating',
      message: 'The worker Deployment is being created.',
    };
  // Once the revision has rolled out, a change of the replica count alone is scaling, not a rollout.
  if (
    rolledOut ||
    (i.updateRevision !== undefined && i.previous?.currentRevision === i.updateRevision)
  )
    return {
      type: 'Progressing',
      status: 'False',
      reason: 'RolloutComplete',
      message: `Revision ${revision} is rolled out: every pod runs it; replicas follow the scaler.`,
    };
  return {
    type: 'Progressing',
    status: 'True',
    reason: 'RollingOut',
    message: `Revision ${revision}: ${d.updatedReplicas} of ${i.desiredReplicas} replicas updated, ${d.readyReplicas} ready.`,
  };
}

function availableCondition(i: StatusInput): ConditionInput {
  const available = i.deployment?.availableReplicas ?? 0;
  if (i.problems.length && available === 0)
    // Nothing runs and nothing can start until a person fixes it: not "scaled to zero".
    return {
      type: 'Available',
      status: 'False',
      reason: i.problems[0]!.reason,
      message: `No worker can run: ${i.problems.map((p) => p.message).join(' ')}`,
    };
  if (i.paused)
    return {
      type: 'Available',
      status: 'False',
      reason: 'Paused',
      message: 'Paused: nothing consumes; messages wait in the queue.',
    };
  if (i.desiredReplicas === 0)
    return {
      type: 'Available',
      status: 'True',
      reason: 'ScaledToZero',
      message: 'No replicas are wanted; messages wait in the queue.',
    };
  if (available > 0)
    return {
      type: 'Available',
      status: 'True',
      reason: 'MinimumReplicasAvailable',
      message: `${available} of ${i.desiredReplicas} replicas are available.`,
    };
  return {
    type: 'Available',
    status: 'False',
    reason: 'NoReplicasAvailable',
    message: 'No worker replica is ready to consume.',
  };
}

function scalingActiveCondition(i: StatusInput): ConditionInput | undefined {
  if (i.paused)
    return {
      type: 'ScalingActive',
      status: 'False',
      reason: 'Paused',
      message: 'Scaling holds while paused.',
    };
  if (!i.scaling) return undefined;
  return i.scaling.signalOk
    ? {
        type: 'ScalingActive',
        status: 'True',
        reason: 'QueueAgeRead',
        message: 'Replicas follow the age of the oldest waiting message.',
      }
    : {
        type: 'ScalingActive',
        status: 'False',
        reason: 'SignalMissing',
        message: i.scaling.message,
      };
}

/**
 * The defaults, in one place: a planned rollout that says nothing of a
 * condition clears it (a drain keeps its own while it lasts); without a plan
 * (a broken spec) what was recorded stays, and only a missing one is added.
 */
function rolloutDefaults(i: StatusInput, recorded: readonly Condition[]): ConditionInput[] {
  const says = (type: string) => (i.rollout?.conditions ?? []).some((c) => c.type === type);
  const absent = (type: string) => !recorded.some((c) => c.type === type);
  const out: ConditionInput[] = [];
  if (!says('RolloutBlocked') && (i.rollout || absent('RolloutBlocked')))
    out.push({
      type: 'RolloutBlocked',
      status: 'False',
      reason: 'Compatible',
      message: 'No incompatible change is pending.',
    });
  if (!says('Draining') && ((i.rollout && !i.rollout.rollingBack) || absent('Draining')))
    out.push({
      type: 'Draining',
      status: 'False',
      reason: 'NotDraining',
      message: 'No drain is in progress.',
    });
  return out;
}

/** What status shows of the scaling decision; a figure not read this time keeps its last value. */
function scalingFields(
  s: NonNullable<StatusInput['scaling']>,
  prev: JobWorkerStatus,
): Partial<JobWorkerStatus> {
  const age = s.oldestAgeSeconds === undefined ? undefined : coarse(s.oldestAgeSeconds);
  return {
    scaling: {
      limitedBy: s.limitedBy,
      message: s.message,
      ...(s.throttling && { throttling: true }),
    },
    ...(age !== undefined && { oldestMessageAgeSeconds: age, oldestMessageAge: duration(age) }),
    ...(s.queueDepth !== undefined && { queueDepth: coarse(s.queueDepth) }),
    ...(s.ageSource && { ageSource: s.ageSource }),
    ...(s.capacityPerReplica !== undefined &&
      s.capacitySource && {
        capacityPerReplica: shownCapacity(
          s.capacityPerReplica,
          prev.capacitySource === s.capacitySource ? prev.capacityPerReplica : undefined,
        ),
        capacitySource: s.capacitySource,
      }),
  };
}

/**
 * The Capacity column: two significant figures, fractions too (a replica of
 * 30 s jobs does 0.27/s), and the figure shown kept until the estimate moves
 * 10 % or more from it. Each change is a status write and a row of
 * `kubectl get jw -w`: a real change shows, jitter does not.
 */
export function shownCapacity(estimate: number, shown: number | undefined): number {
  const now = Number(estimate.toPrecision(2));
  const near =
    shown !== undefined && shown > 0 && now > 0 && Math.abs(Math.log(now / shown)) < Math.log(1.1);
  return near ? shown : now;
}

/**
 * The last scale-down stays until the next one. Reconciles that run before
 * the watch shows the lowered Deployment plan the same one again: it keeps its time.
 */
function lastScaleDown(
  last: JobWorkerStatus['lastScaleDown'],
  now: NonNullable<StatusInput['scaleDown']>,
  at: Date,
): NonNullable<JobWorkerStatus['lastScaleDown']> {
  const same =
    last?.from === now.from &&
    last?.to === now.to &&
    at.getTime() - Date.parse(last?.time ?? '') < 60_000;
  return same && last ? last : { time: iso(at), ...now };
}

function deadLettersField(dl: DeadLetterInput): JobWorkerStatus['deadLetters'] {
  const oldest = dl.stats!.oldestAt;
  return {
    quarantined: dl.stats!.quarantined,
    owner: dl.owner,
    ...(oldest ? { oldestDeadLetteredAt: iso(oldest) } : {}),
  };
}

/** Jobs whose outcome is unknown; none (undefined) leaves the status as it was before they existed. */
function inDoubtField(
  d: NonNullable<NonNullable<DeadLetterInput['stats']>['inDoubt']>,
): Pick<JobWorkerStatus, 'inDoubt'> | undefined {
  if (d.deciding === 0 && d.held === 0) return undefined;
  const heldJobs = d.heldJobs.map((j) => ({
    id: j.id,
    ...(j.key !== null && { key: j.key }),
    reason: j.reason,
  }));
  return {
    inDoubt: { deciding: d.deciding, held: d.held, ...(heldJobs.length > 0 && { heldJobs }) },
  };
}

function dropUndefined<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}

/** What status needs of the live Deployment. */
export function observeDeployment(d: KubeObject | undefined): DeploymentObservation | undefined {
  if (!d) return undefined;
  const spec = d.spec as
    | { replicas?: number; template?: { metadata?: { labels?: Record<string, string> } } }
    | undefined;
  const st = (d.status ?? {}) as Record<string, number | undefined>;
  return {
    revision: revisionOf(d),
    generation: d.metadata.generation ?? 0,
    observedGeneration: st.observedGeneration ?? 0,
    replicas: spec?.replicas ?? 0,
    podReplicas: st.replicas ?? 0,
    readyReplicas: st.readyReplicas ?? 0,
    updatedReplicas: st.updatedReplicas ?? 0,
    availableReplicas: st.availableReplicas ?? 0,
  };
}
