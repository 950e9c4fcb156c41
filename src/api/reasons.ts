// Every reason a JobWorker's conditions and the operator's Events can carry,
// declared once with what it means. The code may use no other (the types
// below are what its conditions and events accept), and the reference page
// docs/reference/conditions.md is generated from here (make docs-ref).
import type { NOT_READY_REASONS } from '../../worker/readiness.js';

/** The JobWorker's condition types, in the order status lists them. */
export const CONDITION_TYPES = [
  'Available',
  'Progressing',
  'Degraded',
  'Paused',
  'WorkersReady',
  'RolloutBlocked',
  'Draining',
  'ScalingActive',
  'AgeObjectiveMet',
  'AgeMeasured',
  'DeadLettersOverdue',
  'OutboxDelivering',
  'BrokerSettingsSafe',
] as const;
export type ConditionType = (typeof CONDITION_TYPES)[number];

/** What a reconcile finds wrong that a person fixes in the JobWorker or its Secrets. */
export const PROBLEM_REASONS = {
  InvalidSpec:
    'The spec fails validation the CRD schema cannot express; the message names the field and the fix.',
  SecretMissing: 'A Secret the spec names does not exist in the namespace.',
  SecretKeyMissing: 'A Secret the spec names lacks the key it names.',
} as const;
export type ProblemReason = keyof typeof PROBLEM_REASONS;

/** Where each kubelet reason is explained at length (docs/runbook.md), named in the condition's fix. */
const RUNBOOK = 'docs/runbook.md#';
const PULL_FIX = `check spec.image and the pull secret (spec.template.spec.imagePullSecrets): ${RUNBOOK}the-worker-image-cannot-be-pulled-imagepullbackoff-errimagepull`;

/** Waiting reasons of a worker container that never starts (the kubelet's own words), and what to do. */
export const CONTAINER_REASONS = {
  ImagePullBackOff: { message: 'the worker image cannot be pulled', fix: PULL_FIX },
  ErrImagePull: { message: 'the worker image cannot be pulled', fix: PULL_FIX },
  InvalidImageName: {
    message: 'spec.image is not a valid image name',
    fix: `fix spec.image: ${RUNBOOK}the-image-name-is-invalid-invalidimagename`,
  },
  CreateContainerConfigError: {
    message: 'the container cannot be configured (a Secret or key it names is missing)',
    fix: `\`kubectl describe pod\` names it; create it or fix the reference: ${RUNBOOK}the-container-cannot-be-configured-createcontainerconfigerror`,
  },
} as const;
export type ContainerReason = keyof typeof CONTAINER_REASONS;

/** Why the kubelet last stopped a worker container it had started (its last termination), and what to do. */
export const TERMINATED_REASONS = {
  OOMKilled: {
    message: 'the worker container outgrew its memory limit and the kernel killed it',
    fix: `raise the worker container's memory limit (spec.template.spec.containers[name=worker].resources.limits.memory) or lower spec.broker.prefetch: ${RUNBOOK}killed-for-memory-oomkilled`,
  },
} as const;
export type TerminatedReason = keyof typeof TERMINATED_REASONS;

/**
 * Why a worker pod is not ready: its own reason (from /readyz or its last
 * log line, worker/readiness.ts), the kubelet's, or that it exits silently.
 */
export type WorkerReason =
  (typeof NOT_READY_REASONS)[number] | ContainerReason | TerminatedReason | 'WorkerExits';
export const WORKER_EXITS =
  'The worker container exits without saying why: `kubectl logs POD --previous`.';

export interface ConditionDoc {
  means: string;
  reasons: Record<string, string>;
  /** reasons passed on from the workers (WorkerReason) as well */
  workerReasons?: string;
}

/** `o` with each value mapped, keeping its keys in the type (Object.fromEntries loses them). */
const mapValues = <T extends object, U>(o: T, f: (v: T[keyof T]) => U) =>
  Object.fromEntries(Object.entries(o).map(([k, v]) => [k, f(v as T[keyof T])])) as {
    [K in keyof T]: U;
  };

export const CONDITIONS = {
  Available: {
    means: 'The fleet is serving: enough worker replicas are ready, or none is wanted.',
    reasons: {
      MinimumReplicasAvailable: 'True. At least one wanted replica is ready.',
      ScaledToZero: 'True. The scaler wants no replica (minReplicas 0 and an empty queue).',
      NoReplicasAvailable: 'False. Replicas are wanted and none is ready.',
      Paused: 'False. The fleet is paused (kubectl jobworker pause): 0 replicas are held.',
      ...mapValues(PROBLEM_REASONS, (m) => `False. ${m}`),
    },
  },
  Progressing: {
    means:
      'A revision is being rolled out, rolled back, or created. A change of the replica count alone is no rollout: it leaves Progressing False (the Desired and Ready columns show it).',
    reasons: {
      Creating: 'True. The first revision is being created.',
      RollingOut: 'True. A new revision replaces the old one (strategy Fleet).',
      RollingBack: 'True. A revision is rolled back, drain first.',
      CohortStep: 'True. A Cohort rollout is at one of its steps, under analysis.',
      CohortPromoting: 'True. The cohort passed its last step: the fleet moves to its revision.',
      CohortAborting: 'True. The cohort is aborted: it drains first, the stable revision stays.',
      RolloutComplete:
        'False. The current revision is rolled out: every pod runs it, and replicas follow the scaler.',
      RollbackComplete: 'False. The rollback ended and queue age fell.',
      CohortPromoted: 'False. The cohort’s revision is the stable one now.',
      CohortAborted: 'False. The cohort drained and was removed; the stable revision runs.',
      Paused: 'False. Nothing progresses while the fleet is paused.',
    },
  },
  Degraded: {
    means:
      'Something needs a person: the spec, a Secret, the workers, or a rollback that did not help.',
    reasons: {
      AsExpected: 'False. Nothing is wrong.',
      RollbackNotRecovering:
        'True. A rollback ended but queue age did not fall within its analysis window.',
      CohortAborted:
        'True. A cohort was aborted; the message says which check failed, or who aborted it and why.',
      ...mapValues(PROBLEM_REASONS, (m) => `True. ${m}`),
    },
    workerReasons: 'True, with the commonest fault among the worker pods and its fix.',
  },
  Paused: {
    means: 'A person paused the fleet; who and why are in the message.',
    reasons: {
      PausedByUser:
        'True. spec.paused is true: consumers drain, then 0 replicas are held (Desired 0, Limited By paused); status.resumeReplicas come back on resume.',
      NotPaused: 'False.',
    },
  },
  WorkersReady: {
    means: 'Every wanted worker replica is ready, or why not, in the workers’ own words.',
    reasons: {
      AllReady: 'True. Every replica is ready.',
      NoneWanted: 'True. No replica is wanted.',
      Starting: 'Unknown. Replicas are starting (or their Deployment is being created).',
    },
    workerReasons: 'Unknown while the pods pass through Starting or Draining; False with a fault.',
  },
  RolloutBlocked: {
    means: 'A new revision would break the delivery contract; it gets no consumer until fixed.',
    reasons: {
      Compatible: 'False. The new revision keeps the contract.',
      IdempotencyKeyRuleChanged:
        'True. contract.idempotencyKey changed: messages in flight would get other keys. Revert it, or let the queue drain and set the allow-key-rule-change annotation.',
      SchemaVersionIncompatible:
        'True. The new revision drops a schema version that messages in the queue still carry.',
      QueueTypeDiffers:
        'True. spec.broker.queueType differs from the existing queue’s type, which RabbitMQ cannot change in place (docs/compatibility.md).',
      ContractUnknown:
        'True. The contract (key rule, schema versions) of the running or the new revision is not known, so the change cannot be checked: re-apply the running spec, or set the change again.',
      RevisionSpecUnknown:
        'True. The spec of a revision still running is not recorded, so the change cannot be checked: restore its ControllerRevision or roll to a recorded one.',
    },
  },
  Draining: {
    means: 'Consumers of a revision are being drained before it is replaced.',
    reasons: {
      RollbackDrain: 'True. The rolled-back revision’s consumers stop within the drain deadline.',
      Drained: 'False. The drain ended (the message says whether within the deadline).',
      NotDraining: 'False.',
    },
  },
  ScalingActive: {
    means: 'The scaler reads queue age and sets replicas from it.',
    reasons: {
      QueueAgeRead: 'True. The queue was read this poll.',
      SignalMissing:
        'False. The queue cannot be read (the message says why); replicas stay where they are.',
      Paused: 'False. The fleet is paused.',
    },
  },
  AgeObjectiveMet: {
    means: 'The oldest waiting message is within spec.scaling.targetOldestAgeSeconds.',
    reasons: {
      WithinObjective: 'True.',
      OverObjective: 'False. The message names the age and what limits the fleet.',
      SignalMissing: 'Unknown. No age to compare.',
    },
  },
  AgeMeasured: {
    means: 'The age scaled and alerted on is measured, not estimated.',
    reasons: {
      HeadTimestamp:
        'True. The head message’s timestamp, from the management API (classic queues).',
      DeliveryTimestamps:
        'True. The timestamps of the messages the workers receive (quorum queues, docs/scaling.md).',
      NoMessageTimestamps:
        'False. Deliveries carry no timestamp: publish with the timestamp property, or let the broker set it.',
      Estimated:
        'False. No worker reported a delivery, so the age is estimated from depth and rates.',
    },
  },
  DeadLettersOverdue: {
    means: 'The oldest quarantined dead letter is older than deadLetter.maxAgeSeconds.',
    reasons: {
      OldestDeadLetterOverdue: 'True. Its owner replays or discards them (docs/dead-letters.md).',
      WithinMaxAge: 'False. Dead letters are quarantined, the oldest within maxAgeSeconds.',
      Empty: 'False. Nothing is quarantined.',
      Unreadable: 'Unknown. The claims database could not be read.',
    },
  },
  OutboxDelivering: {
    means:
      'The relay of the outbox spec.outbox names keeps up: jobs committed there reach the queue (docs/outbox.md).',
    reasons: {
      Delivered: 'True. Nothing waits in the outbox for this queue.',
      Delivering: 'True. Jobs wait in the outbox and the relay is publishing them.',
      RelayFailing:
        'False. Jobs wait, and the relay’s last error is newer than its last publish (the broker unreachable or refusing, a queue missing): the message quotes it.',
      NoRelay:
        'False. Jobs wait and no relay holds the outbox’s lock: start one (spec.outbox.relay Workers, or startRelay in the producer).',
      OutboxStalled:
        'False. The oldest unsent row is older than spec.outbox.stalledAfterSeconds, though the relay reports no error.',
      NoOutboxTable:
        'Unknown. The database has no jobfleet_outbox yet: the producer has not run migrateOutbox.',
      Unreadable: 'Unknown. The outbox’s database could not be read.',
    },
  },
  BrokerSettingsSafe: {
    means:
      'No RabbitMQ policy or operator policy loses or stalls the JobWorker’s jobs, and nothing blocks the next RabbitMQ upgrade (checked through spec.broker.managementUrlSecretRef, once a minute).',
    reasons: {
      PolicyDropsJobs: `False. A policy or operator policy that applies to one of the JobWorker’s queues sets a key that drops or expires jobs (max-length, max-length-bytes, message-ttl, expires, delivery-limit, dead-lettering on the work queue); the message names the policy, key, value and fix: ${RUNBOOK}a-policy-drops-jobs-policydropsjobs`,
      ConsumerTimeoutTooShort: `False. The consumer timeout (a consumer-timeout policy, or RabbitMQ’s default 30 minutes, assumed) is shorter than the handler deadline plus the longest hold: long handlers come back as redeliveries: ${RUNBOOK}the-consumer-timeout-is-too-short-consumertimeouttooshort`,
      FeatureFlagsDisabled: `True. Nothing loses jobs, but feature flags are not all enabled: the next RabbitMQ upgrade will not start: ${RUNBOOK}feature-flags-are-disabled-featureflagsdisabled`,
      DeprecatedFeaturesUsed: `True. Nothing loses jobs, but the broker uses deprecated features a later RabbitMQ removes: ${RUNBOOK}deprecated-features-are-used-deprecatedfeaturesused`,
      SettingsSafe: 'True. No policy loses or stalls jobs; every feature flag is enabled.',
      NotChecked: 'Unknown. The management API could not be read; the message says why.',
    },
  },
} as const satisfies Record<ConditionType, ConditionDoc>;

/** The reasons condition `T` may carry: its own, and the workers' where it passes them on. */
export type ReasonOf<T extends ConditionType> =
  | keyof (typeof CONDITIONS)[T]['reasons']
  | (T extends 'Degraded' | 'WorkersReady' ? WorkerReason : never);
export type ConditionReason = ReasonOf<ConditionType>;

interface EventDoc {
  type: 'Normal' | 'Warning' | 'Normal or Warning';
  when: string;
}

/** The Events the operator records on a JobWorker. */
const JOBWORKER_EVENTS = {
  DeploymentCreated: {
    type: 'Normal',
    when: 'The worker Deployment was created.',
  },
  RevisionChanged: {
    type: 'Normal',
    when: 'A new revision (a spec change that reaches the pods) starts rolling out.',
  },
  ScaledUp: { type: 'Normal', when: 'Replicas rose; the message says why.' },
  ScaledDown: { type: 'Normal', when: 'Replicas fell; the message says why.' },
  WorkersNotReady: {
    type: 'Warning',
    when: 'Worker pods report a fault (WorkersReady=False); the message names it and the fix.',
  },
  PodTemplateDeprecated: {
    type: 'Warning',
    when: 'The spec sets podTemplate, deprecated for spec.template (once per spec change); the message says where each field goes.',
  },
  Paused: { type: 'Normal', when: 'A person paused the fleet (who and why).' },
  Resumed: { type: 'Normal', when: 'A person resumed the fleet (who and why).' },
  RolloutBlocked: {
    type: 'Warning',
    when: 'A revision was blocked by the compatibility gate (RolloutBlocked=True).',
  },
  KeyRuleChangeAllowed: {
    type: 'Warning',
    when: 'A key-rule change went ahead under the allow annotation, the queue having drained.',
  },
  RevisionAborted: {
    type: 'Warning',
    when: 'A revision was aborted by its analysis (crash-looping, or age rising); a rollback follows.',
  },
  RollbackStarted: {
    type: 'Normal or Warning',
    when: 'A rollback began (Warning when automatic): drain first.',
  },
  Drained: {
    type: 'Normal or Warning',
    when: 'A drain ended: Normal within the deadline, Warning when the deadline cut it short.',
  },
  RollbackComplete: {
    type: 'Normal',
    when: 'The previous revision runs again and queue age fell.',
  },
  RollbackNotRecovering: {
    type: 'Warning',
    when: 'The rollback ended but queue age did not fall (Degraded=True).',
  },
  CohortStarted: {
    type: 'Normal',
    when: 'A Cohort rollout started its first step.',
  },
  CohortStepPassed: { type: 'Normal', when: 'A cohort step passed its analysis.' },
  CohortStepSkipped: {
    type: 'Warning',
    when: 'A person skipped a step’s analysis (kubectl jobworker promote).',
  },
  CohortStep: { type: 'Normal', when: 'The cohort moved to its next step.' },
  CohortPromoting: {
    type: 'Normal',
    when: 'The cohort passed its last step; the fleet moves to its revision.',
  },
  CohortPromoted: { type: 'Normal', when: 'The cohort’s revision is stable now.' },
  CohortAborting: {
    type: 'Warning',
    when: 'The cohort is being aborted (by its analysis or a person); it drains first.',
  },
  CohortAborted: {
    type: 'Warning',
    when: 'A cohort check failed, or a person aborted it; the message says which.',
  },
  CohortDrained: {
    type: 'Normal or Warning',
    when: 'The aborted cohort drained (Warning when its deadline cut the drain short).',
  },
  BrokerSettingsUnsafe: {
    type: 'Warning',
    when: 'BrokerSettingsSafe says something new that needs a person: a policy that loses or stalls jobs, or what blocks an upgrade.',
  },
  BrokerSettingsSafe: {
    type: 'Normal',
    when: 'The broker setting that lost or stalled jobs is gone (BrokerSettingsSafe=True again).',
  },
  ...mapValues(PROBLEM_REASONS, (when) => ({ type: 'Warning', when }) as const),
} as const satisfies Record<string, EventDoc>;

/** The Events the replay controller records on a JobReplay. */
const JOBREPLAY_EVENTS = {
  ReplayStarted: { type: 'Normal', when: 'The replay began (who, why, rate).' },
  ReplayRateCapped: {
    type: 'Normal',
    when: 'The rate asked for is capped by the JobWorker’s downstream budget.',
  },
  ReplayHeld: {
    type: 'Normal',
    when: 'The replay waits while the incident lasts (the message says what holds it).',
  },
  ReplayResumed: { type: 'Normal', when: 'The hold ended; replaying.' },
  ReplaySucceeded: {
    type: 'Normal',
    when: 'Every replayed job completed (counts in the message).',
  },
  ReplayFailed: {
    type: 'Warning',
    when: 'Some replayed jobs failed again, are pending, or were not found (counts in the message).',
  },
  ReplayStopped: {
    type: 'Warning',
    when: 'The replay stopped early: too many failed again, or the hold outlasted its timeout.',
  },
} as const satisfies Record<string, EventDoc>;

/** Every Event, with the kind of object it is recorded on. */
export const EVENTS: Record<EventReason, EventDoc & { on: 'JobWorker' | 'JobReplay' }> = {
  ...mapValues(JOBWORKER_EVENTS, (e) => ({ ...e, on: 'JobWorker' as const })),
  ...mapValues(JOBREPLAY_EVENTS, (e) => ({ ...e, on: 'JobReplay' as const })),
};

export type EventReason = keyof typeof JOBWORKER_EVENTS | keyof typeof JOBREPLAY_EVENTS;
