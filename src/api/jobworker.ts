// The JobWorker API (jobfleet.dev/v1alpha1): one zod schema is
// the source of truth. The controller parses specs with it, and the CRD's
// OpenAPI schema is generated from it (src/tools/crd.ts), so the two cannot
// drift. Field names are public API: add, never rename.
import { z } from 'zod';
import { parseWith, type Parsed } from './parse.js';
import { CONDITION_TYPES } from './reasons.js';

export const GROUP = 'jobfleet.dev';
export const VERSION = 'v1alpha1';
export const KIND = 'JobWorker';
export const PLURAL = 'jobworkers';
export const API_VERSION = `${GROUP}/${VERSION}`;

/** CEL rules carried into the CRD (x-kubernetes-validations); the apiserver enforces them. */
const cel = (
  rules: Array<{ rule: string; message: string; fieldPath?: string; reason?: string }>,
) => ({
  'x-kubernetes-validations': rules,
});

const secretKeyRef = z
  .object({
    name: z.string().min(1).max(253).describe('Name of a Secret in the JobWorker’s namespace'),
    key: z.string().min(1).max(253).describe('Key within the Secret'),
  })
  .describe('A key in a Secret: credentials never appear inline in the spec');

/**
 * AMQP queue names are up to 255 bytes; the work queue's stays within 200,
 * as the worker requires, so that the names derived from it
 * (`<queue>.retry.<n>s`, `<queue>.delivery-limit`) fit. "amq." is reserved
 * by the broker.
 */
const queueName = z
  .string()
  .min(1)
  .max(200)
  .regex(/^[A-Za-z0-9_.:-]+$/)
  .meta(
    cel([
      {
        rule: "!self.startsWith('amq.')",
        message: 'queue names starting with "amq." are reserved by RabbitMQ',
      },
    ]),
  );

const podTemplate = z
  .object({
    labels: z
      .record(z.string(), z.string())
      .optional()
      .describe('Labels added to each worker pod (the operator’s own labels win)'),
    annotations: z
      .record(z.string(), z.string())
      .optional()
      .describe('Annotations added to each worker pod'),
    serviceAccountName: z
      .string()
      .max(253)
      .optional()
      .describe('ServiceAccount the worker pods run as (no API token is mounted)'),
    nodeSelector: z
      .record(z.string(), z.string())
      .optional()
      .describe('core/v1 nodeSelector of the worker pods'),
    env: z
      .array(z.record(z.string(), z.unknown()))
      .optional()
      .describe('core/v1 EnvVar list, appended to the JOBFLEET_* contract'),
    resources: z
      .record(z.string(), z.unknown())
      .optional()
      .describe('core/v1 ResourceRequirements of the worker container'),
    tolerations: z
      .array(z.record(z.string(), z.unknown()))
      .optional()
      .describe('core/v1 Tolerations of the worker pods'),
    securityContext: z
      .record(z.string(), z.unknown())
      .optional()
      .describe('core/v1 SecurityContext overrides of the restricted default'),
  })
  .describe(
    'Deprecated: use spec.template, a whole pod template. Still honoured for v1alpha1 (its fields map onto spec.template and make the same pods); a JobWorker setting it gets a PodTemplateDeprecated Warning event',
  );

/**
 * spec.template: a core/v1 PodTemplateSpec. The CRD carries the Kubernetes
 * release's own schema for it (../tools/pod-template-schema.ts) and CEL rules that
 * refuse what the operator owns (src/tools/crd.ts); zod only types the parts
 * the operator reads and keeps the rest as written.
 */
const container = z.looseObject({ name: z.string() });
export const podTemplateSpec = z
  .object({
    metadata: z
      .object({
        labels: z.record(z.string(), z.string()).optional(),
        annotations: z.record(z.string(), z.string()).optional(),
      })
      .optional(),
    spec: z
      .looseObject({
        containers: z.array(container).optional(),
        initContainers: z.array(container).optional(),
        volumes: z.array(z.looseObject({ name: z.string() })).optional(),
        securityContext: z.record(z.string(), z.unknown()).optional(),
      })
      .optional(),
  })
  .describe(
    'The worker pods’ template (core/v1 PodTemplateSpec), as in a Deployment: imagePullSecrets, volumes, affinity, topologySpreadConstraints, priorityClassName, init and sidecar containers… The worker is the container named "worker" (added first when absent); the operator sets its image (spec.image), the JOBFLEET_* contract env, the metrics port 9464, its probes, a /tmp emptyDir and restricted security defaults, the pod’s terminationGracePeriodSeconds (spec.shutdown.drainDeadlineSeconds + 15) and its own labels. A template that contradicts one of them is refused with the field and what to set instead',
  );
export type PodTemplateSpec = z.output<typeof podTemplateSpec>;

/** One step of the Cohort strategy: the cohort's size, and how long it is watched. */
const cohortStep = z
  .object({
    cohort: z
      .object({
        replicas: z
          .number()
          .int()
          .min(1)
          .max(10_000)
          .optional()
          .describe('Replicas of the new revision (at most the fleet’s total)'),
        percent: z
          .number()
          .int()
          .min(1)
          .max(100)
          .optional()
          .describe(
            'Share of the fleet’s replicas running the new revision, rounded up (at least 1)',
          ),
        prefetch: z
          .number()
          .int()
          .min(1)
          .max(1000)
          .optional()
          .describe(
            'Deliveries in flight per cohort replica, at most spec.broker.prefetch (default: spec.broker.prefetch)',
          ),
      })
      .meta(
        cel([
          {
            rule: 'has(self.replicas) != has(self.percent)',
            message: 'set exactly one of replicas or percent',
          },
        ]),
      )
      .describe('The cohort at this step: replicas or percent, and optionally a lower prefetch'),
    analysisSeconds: z
      .number()
      .int()
      .min(0)
      .max(86_400)
      .optional()
      .describe(
        'How long this step is watched before the next (default spec.rollout.analysisSeconds); 0 moves on once the cohort is ready',
      ),
  })
  .describe('A cohort size, then a watch');

/**
 * Thresholds of a cohort step's analysis: each compares the cohort with the
 * stable revision over the same window, from the workers' own figures.
 */
const cohortChecks = z
  .object({
    minJobs: z
      .number()
      .int()
      .min(1)
      .max(1_000_000)
      .default(20)
      .describe(
        'Deliveries the cohort must handle in a step before its ratios are judged; fewer at the end of the window and the step waits (promote to skip)',
      ),
    maxDeadLetterRatioIncrease: z
      .number()
      .min(0)
      .max(1)
      .default(0.02)
      .describe(
        'Dead-lettered per handled delivery: the cohort’s may exceed the stable revision’s by at most this',
      ),
    maxRetryRatioIncrease: z
      .number()
      .min(0)
      .max(100)
      .default(0.1)
      .describe(
        'Retries (transient failures and throttling) per handled delivery: the cohort’s may exceed the stable’s by at most this',
      ),
    maxDuplicateRatioIncrease: z
      .number()
      .min(0)
      .max(1)
      .default(0.05)
      .describe(
        'Duplicate suppressions and claim conflicts per handled delivery: the cohort’s may exceed the stable’s by at most this',
      ),
    maxLatencyP95Ratio: z
      .number()
      .min(1)
      .max(1000)
      .default(2)
      .describe(
        'Handler latency p95: the cohort’s may be at most this many times the stable’s (or its bucket above, whichever is higher); it fails when the share of cohort runs beyond that exceeds 5% by a margin of standard errors',
      ),
    maxRestarts: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .default(3)
      .describe('Container restarts of any cohort pod that abort the rollout (a crash loop)'),
  })
  .describe(
    'The Cohort strategy’s checks: queue age is also watched, as for autoRollback (past the objective and rising)',
  );

export const jobWorkerSpec = z
  .object({
    paused: z
      .boolean()
      .default(false)
      .describe(
        'Stops the fleet: consumers drain within shutdown.drainDeadlineSeconds, then 0 replicas are held whatever the backlog; scaling and rollouts hold until it is false again. `kubectl jobworker pause|resume NAME --reason …` sets it and records who and why',
      ),
    image: z
      .string()
      .min(1)
      .max(1024)
      .describe('Worker image, e.g. registry.example.com/billing/invoice-worker:1.4.2'),
    template: podTemplateSpec.optional(),
    podTemplate: podTemplate.optional(),
    broker: z
      .object({
        urlSecretRef: secretKeyRef.describe('amqp(s) URL of RabbitMQ'),
        managementUrlSecretRef: secretKeyRef
          .optional()
          .describe('RabbitMQ management API URL: the default source of queue age'),
        queue: queueName.describe('The work queue'),
        queueType: z
          .enum(['classic', 'quorum'])
          .default('quorum')
          .describe(
            'Type of the queues the workers declare when they do not exist: quorum (replicated; the default) or classic (one replica on RabbitMQ 4). An existing queue keeps its type: a JobWorker whose type differs from its queue’s is blocked (RolloutBlocked QueueTypeDiffers)',
          ),
        prefetch: z
          .number()
          .int()
          .min(1)
          .max(1000)
          .default(8)
          .describe('Deliveries in flight per replica'),
      })
      .describe(
        'The work queue on RabbitMQ: where the workers consume and what the operator reads queue age from',
      ),
    claims: z
      .object({
        urlSecretRef: secretKeyRef.describe('PostgreSQL URL of the idempotency claims database'),
        leaseSeconds: z
          .number()
          .int()
          .min(5)
          .max(86_400)
          .default(60)
          .describe(
            'How long a claim is held without renewal before another worker may take the key over',
          ),
      })
      .describe(
        'The PostgreSQL database holding idempotency claims, results and the dead-letter quarantine',
      ),
    contract: z
      .object({
        idempotencyKey: z
          .string()
          .min(3)
          .max(512)
          .regex(/\{[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\}/)
          .describe(
            'The key rule, e.g. "invoice:{invoiceId}:send"; at least one {placeholder}. A change blocks rollout.',
          ),
        schemaVersions: z
          .array(z.number().int().min(1).max(1_000_000))
          .min(1)
          .max(64)
          .meta({ 'x-kubernetes-list-type': 'set' })
          .describe('Envelope schema versions this revision consumes'),
        producerVersions: z
          .array(z.number().int().min(1).max(1_000_000))
          .min(1)
          .max(64)
          .optional()
          .meta({ 'x-kubernetes-list-type': 'set' })
          .describe(
            'Schema versions producers may still send. A new revision (or a rollback target) must accept all of them and every version seen in the queue. Default: every version the running revision accepts',
          ),
      })
      .describe(
        'What a message means to this code: the idempotency-key rule and the schema versions it accepts. A change that would break either is blocked',
      ),
    retry: z
      .object({
        maxAttempts: z
          .number()
          .int()
          .min(1)
          .max(100)
          .default(5)
          .describe(
            'Runs of one job before a transient failure dead-letters it (throttled retries are counted apart)',
          ),
        maxThrottledRetries: z
          .number()
          .int()
          .min(0)
          .max(10_000)
          .default(100)
          .describe(
            'A retry because the dependency throttled (429, Throttled; Retry-After honoured) spends no attempt; past this many such retries of one job, it is dead-lettered',
          ),
        initialDelaySeconds: z
          .number()
          .int()
          .min(1)
          .max(86_400)
          .default(1)
          .describe(
            'Backoff of the first retry; doubled each attempt, jittered, capped by maxDelaySeconds',
          ),
        maxDelaySeconds: z
          .number()
          .int()
          .min(1)
          .max(86_400)
          .default(600)
          .describe(
            'Longest backoff between retries; a valid Retry-After is honoured in full even when longer (one of a day or more is ignored)',
          ),
        deadLetterQueue: queueName.optional().describe('Defaults to "<queue>.dlq"'),
        handlerTimeoutSeconds: z
          .number()
          .int()
          .min(1)
          .max(86_400)
          .default(900)
          .describe(
            "A run that has not returned after this long is aborted (its signal fires) and its delivery slot freed; it counts as an attempt in doubt (it may still make its call), which the retry decides first (see inDoubt). Keep it below RabbitMQ's consumer_timeout (30 minutes by default), which would close the channel and return every delivery on it",
          ),
        inDoubt: z
          .enum(['Rerun', 'Hold'])
          .default('Rerun')
          .describe(
            'An attempt whose outcome is unknown (its worker died mid-run, it threw InDoubt, it timed out), of a handler without a reconcile: Rerun runs it again (right when the downstream dedupes the idempotency key), Hold quarantines it as an in_doubt dead letter for a person. Handlers with a reconcile ask the downstream instead (docs/in-doubt.md)',
          ),
      })
      .meta(
        cel([
          {
            rule: 'self.maxDelaySeconds >= self.initialDelaySeconds',
            message: 'maxDelaySeconds must be at least initialDelaySeconds',
            fieldPath: '.maxDelaySeconds',
          },
        ]),
      )
      .default({
        maxAttempts: 5,
        maxThrottledRetries: 100,
        initialDelaySeconds: 1,
        maxDelaySeconds: 600,
        handlerTimeoutSeconds: 900,
        inDoubt: 'Rerun',
      })
      .describe(
        'Retries of transient failures: bounded, jittered, exponential backoff that honours Retry-After',
      ),
    scaling: z
      .object({
        minReplicas: z
          .number()
          .int()
          .min(0)
          .max(10_000)
          .default(1)
          .describe('Fewest replicas; 0 lets an empty queue scale the fleet to zero'),
        maxReplicas: z
          .number()
          .int()
          .min(1)
          .max(10_000)
          .default(10)
          .describe('Most replicas, whatever the age'),
        targetOldestAgeSeconds: z
          .number()
          .int()
          .min(1)
          .max(86_400)
          .default(30)
          .describe('The objective: the oldest waiting message stays younger than this'),
        downstream: z
          .object({
            maxConcurrency: z
              .number()
              .int()
              .min(1)
              .max(1_000_000)
              .optional()
              .describe(
                'Fleet-wide in-flight budget of the dependency; caps replicas at floor(maxConcurrency / prefetch)',
              ),
          })
          .optional()
          .describe('The dependency the workers call'),
        scaleDownStabilizationSeconds: z
          .number()
          .int()
          .min(0)
          .max(86_400)
          .default(300)
          .describe(
            'How long the highest recommendation of the window holds before replicas go down (small steps; an emptied queue goes down at once)',
          ),
        removeIdleFirst: z
          .boolean()
          .default(true)
          .describe(
            'Scaling down, remove the pods that hold the fewest deliveries first (pod-deletion-cost on the chosen pods); false leaves the choice to the ReplicaSet',
          ),
        prometheusUrl: z
          .string()
          .regex(/^https?:\/\/[^\s]+$/)
          .max(2048)
          .optional()
          .describe(
            'Prometheus that scrapes this fleet: throttling and in-flight signals. Defaults to the operator’s JOBFLEET_PROMETHEUS_URL',
          ),
      })
      .meta(
        cel([
          {
            rule: 'self.maxReplicas >= self.minReplicas',
            message: 'maxReplicas must be at least minReplicas',
            fieldPath: '.maxReplicas',
          },
        ]),
      )
      .default({
        minReplicas: 1,
        maxReplicas: 10,
        targetOldestAgeSeconds: 30,
        scaleDownStabilizationSeconds: 300,
        removeIdleFirst: true,
      })
      .describe(
        'Replicas from the age of the oldest waiting message, capped by the downstream budget',
      ),
    shutdown: z
      .object({
        drainDeadlineSeconds: z
          .number()
          .int()
          .min(0)
          .max(3600)
          .default(45)
          .describe('In-flight handlers get this long after a drain starts'),
      })
      .default({ drainDeadlineSeconds: 45 })
      .describe('How workers stop: a drain, then what is in flight goes back to the queue'),
    rollout: z
      .object({
        autoRollback: z
          .boolean()
          .default(true)
          .describe(
            'Roll back by itself when a new revision makes queue age rise past the objective (or crash-loops) within analysisSeconds',
          ),
        analysisSeconds: z
          .number()
          .int()
          .min(10)
          .max(86_400)
          .default(300)
          .describe('How long a new revision is watched for rising age or crash loops'),
        verifySeconds: z
          .number()
          .int()
          .min(5)
          .max(86_400)
          .default(120)
          .describe('After a rollback, queue age must start falling within this window'),
        historyLimit: z
          .number()
          .int()
          .min(1)
          .max(100)
          .default(10)
          .describe('Revisions kept in status.history'),
        strategy: z
          .enum(['Fleet', 'Cohort'])
          .default('Fleet')
          .describe(
            'Fleet: a new revision rolls over the whole Deployment (watched by autoRollback). Cohort: it starts as a small worker cohort beside the stable revision, both consuming the queue, and grows through `steps` while each step’s analysis (cohort against stable) passes',
          ),
        steps: z
          .array(cohortStep)
          .min(1)
          .max(20)
          .optional()
          .describe(
            'The Cohort strategy’s steps, in order. Default: 1 replica, then 50%, then 100%, each watched for analysisSeconds',
          ),
        cohortChecks: cohortChecks.optional(),
      })
      .default({
        autoRollback: true,
        analysisSeconds: 300,
        verifySeconds: 120,
        historyLimit: 10,
        strategy: 'Fleet',
      })
      .describe(
        'Rollouts and rollbacks: the drain-first order, automatic rollback on rising age, and the Cohort strategy',
      ),
    deadLetter: z
      .object({
        owner: z
          .string()
          .min(1)
          .max(253)
          .describe('Who answers for the quarantine, e.g. team-billing'),
        maxAgeSeconds: z
          .number()
          .int()
          .min(60)
          .max(31_536_000)
          .default(86_400)
          .describe('Alert when the oldest dead letter is older'),
      })
      .describe('Who owns the dead-letter quarantine, and when to alert on it'),
    outbox: z
      .object({
        urlSecretRef: secretKeyRef.describe(
          'PostgreSQL URL of the producer’s database whose jobfleet_outbox feeds this queue (docs/outbox.md)',
        ),
        relay: z
          .enum(['Workers', 'Producer'])
          .default('Workers')
          .describe(
            'Who relays it to RabbitMQ: Workers (each worker pod runs a relay, one active; they get the URL as JOBFLEET_OUTBOX_URL) or Producer (your processes run startRelay; the pods never connect to that database)',
          ),
        stalledAfterSeconds: z
          .number()
          .int()
          .min(5)
          .max(86_400)
          .default(60)
          .describe(
            'The oldest unsent row older than this sets OutboxDelivering=False (OutboxStalled) even while the relay reports no error',
          ),
      })
      .optional()
      .describe(
        'The transactional outbox that feeds the queue: its oldest unsent row counts in the queue’s age, and OutboxDelivering says whether its relay keeps up',
      ),
  })
  .meta(
    cel([
      {
        rule: '!has(self.template) || !has(self.podTemplate)',
        message:
          'set spec.template or the deprecated spec.podTemplate, not both: move podTemplate’s fields into template (labels and annotations under metadata, the rest under spec; env, resources and securityContext on the container named "worker")',
        fieldPath: '.podTemplate',
      },
    ]),
  )
  .describe(
    'A fleet of queue workers: what they run, what they consume, and how they scale and roll',
  );

export type JobWorkerSpec = z.output<typeof jobWorkerSpec>;
export type CohortChecks = z.output<typeof cohortChecks>;
export type CohortStep = z.output<typeof cohortStep>;

/** The Cohort strategy's checks, with the defaults for those not set. */
export const checksOf = (spec: JobWorkerSpec): CohortChecks =>
  spec.rollout.cohortChecks ?? cohortChecks.parse({});
export type JobWorkerSpecInput = z.input<typeof jobWorkerSpec>;

export const conditionSchema = z.object({
  type: z.string().describe(`The condition type: ${CONDITION_TYPES.join(', ')}`),
  status: z.enum(['True', 'False', 'Unknown']).describe('True, False or Unknown'),
  observedGeneration: z
    .number()
    .int()
    .optional()
    .describe('The generation the condition was set for'),
  lastTransitionTime: z.string().describe('When status last changed'),
  reason: z.string().describe('One CamelCase word: why'),
  message: z.string().describe('What is going on and, when something is wrong, what to do'),
});
export type Condition = z.infer<typeof conditionSchema>;

/** What can set a JobWorker's replica count (status.scaling.limitedBy, the limited-by gauge). */
export const LIMITED_BY = [
  'age',
  'downstream',
  'maxReplicas',
  'minReplicas',
  'stabilization',
  'signalMissing',
  'paused',
] as const;

export const PHASES = [
  'Healthy',
  'Scaling',
  'Progressing',
  'Draining',
  'RollingBack',
  'Blocked',
  'Degraded',
  'Paused',
] as const;
export type Phase = (typeof PHASES)[number];

const count = z.number().int().min(0);
/** One revision's worker figures over a cohort step's window (deltas of the workers' counters). */
const revisionFigures = z.object({
  handled: count.describe('Deliveries that reached an outcome'),
  completed: count.describe('Completed'),
  deadLettered: count.describe('Dead-lettered'),
  retried: count.describe('Retries scheduled'),
  duplicates: count.describe('Duplicates suppressed and claim conflicts'),
  deadLettersByClass: z
    .record(z.string(), count)
    .optional()
    .describe('Dead-lettered, by failure class'),
  latencyBuckets: z
    .array(count)
    .optional()
    .describe('Handler runs per latency bucket (jobfleet_handler_duration_seconds)'),
  restarts: count.describe('Most restarts of one pod'),
  pods: count.describe('Pods read'),
});
export type RevisionFigures = z.infer<typeof revisionFigures>;

export const jobWorkerStatus = z
  .object({
    observedGeneration: z
      .number()
      .int()
      .optional()
      .describe('The spec generation this status describes'),
    phase: z
      .enum(PHASES)
      .optional()
      .describe(
        'One word for kubectl get, most urgent first: Blocked, Degraded, Paused, Draining, RollingBack, Progressing (a revision rolls out), Scaling (replicas are wanted and none is ready yet: waking from zero or resuming), Healthy. A change of the replica count alone, while a replica serves, leaves it Healthy (docs/scaling.md)',
      ),
    replicas: z.number().int().optional().describe('Replicas the worker Deployment has'),
    readyReplicas: z.number().int().optional().describe('Worker replicas ready (consuming)'),
    desiredReplicas: z
      .number()
      .int()
      .optional()
      .describe(
        'Replicas the fleet is meant to run: the scaler’s count; 0 while paused (resumeReplicas keeps the count); kept while a rollback drains',
      ),
    resumeReplicas: z
      .number()
      .int()
      .optional()
      .describe('While paused: the replicas restored on resume (the scaler’s count when paused)'),
    oldestMessageAgeSeconds: z
      .number()
      .int()
      .optional()
      .describe('Age in seconds of the oldest waiting message, two significant figures'),
    oldestMessageAge: z
      .string()
      .optional()
      .describe('oldestMessageAgeSeconds as a duration with its unit, e.g. 37s, 4m10s'),
    ageSource: z
      .enum(['HeadTimestamp', 'DeliveryTimestamps', 'Estimated'])
      .optional()
      .describe(
        'Where the age comes from: HeadTimestamp, the head message’s timestamp (classic queues); DeliveryTimestamps, measured from the timestamps of the deliveries the workers receive (quorum queues); Estimated, from depth and rates where neither exists (the AgeMeasured condition says why)',
      ),
    queueDepth: z
      .number()
      .int()
      .optional()
      .describe('Messages waiting in the work queue, two significant figures'),
    capacityPerReplica: z
      .number()
      .optional()
      .describe(
        'Jobs per second one worker replica completes with its slots full, two significant figures: prefetch ÷ the mean time a job takes (docs/scaling.md)',
      ),
    capacitySource: z
      .enum(['Prometheus', 'WorkerMetrics', 'Saturation'])
      .optional()
      .describe(
        'Where capacityPerReplica comes from: the workers’ figures through Prometheus or read from the pods, or the completion rate while a backlog waited',
      ),
    scaling: z
      .object({
        limitedBy: z
          .enum(LIMITED_BY)
          .optional()
          .describe(
            'What set the count: age, the downstream cap, a bound, the stabilization window, no signal, or the pause switch',
          ),
        message: z.string().optional().describe('The scaler’s reasoning in words'),
        throttling: z
          .boolean()
          .optional()
          .describe('The dependency is throttling the workers now (JobReplays wait while it does)'),
      })
      .optional()
      .describe('What set the replica count last'),
    lastScaleDown: z
      .object({
        time: z.string().describe('When the replicas were lowered'),
        from: z.number().int().describe('Replicas before'),
        to: z.number().int().describe('Replicas after'),
        heldDeliveries: z
          .number()
          .int()
          .describe(
            'Deliveries the removed pods held (0 is the goal): they finish within the drain deadline or go back to the queue',
          ),
      })
      .optional()
      .describe('The last scale-down, and what it interrupted'),
    deadLetters: z
      .object({
        quarantined: z
          .number()
          .int()
          .describe('Entries in quarantine (neither replayed nor discarded)'),
        oldestDeadLetteredAt: z
          .string()
          .optional()
          .describe('When the oldest quarantined entry was dead-lettered'),
        owner: z
          .string()
          .optional()
          .describe('spec.deadLetter.owner, repeated where on-call looks'),
      })
      .optional()
      .describe('The quarantine, read from the claims database'),
    inDoubt: z
      .object({
        deciding: z
          .number()
          .int()
          .describe(
            'Jobs whose last attempt is in doubt (its worker died mid-run, it threw InDoubt, it timed out), being decided by the workers now: asking the downstream (reconcile) or about to re-run',
          ),
        held: z
          .number()
          .int()
          .describe(
            'In-doubt jobs held in the quarantine for a person: replay (re-run) or `jobfleet dlq discard --mark-done` (docs/in-doubt.md)',
          ),
        heldJobs: z
          .array(
            z.object({
              id: z.number().int().describe('The dead-letter entry id (jobfleet dlq show ID)'),
              key: z.string().optional().describe('The idempotency key'),
              reason: z
                .string()
                .describe('The attempt in doubt, its recorded intent and the last answer'),
            }),
          )
          .optional()
          .describe('The oldest held ones (at most 5)'),
      })
      .optional()
      .describe(
        'Jobs whose outcome is unknown, read from the claims database; absent when there are none',
      ),
    outbox: z
      .object({
        unsent: z.number().int().describe('Rows for this queue not yet confirmed by the broker'),
        oldestUnsentSeconds: z
          .number()
          .optional()
          .describe('Age of the oldest of them: it counts in scaling.oldestMessageAgeSeconds'),
        relay: z
          .string()
          .optional()
          .describe('The active relay (host/pid/id), when one holds the outbox’s lock'),
        lastError: z
          .string()
          .optional()
          .describe('The relay’s last error, when it is newer than its last publish'),
      })
      .optional()
      .describe('The outbox spec.outbox names, as last read'),
    currentRevision: z.string().optional().describe('The revision running on every replica, ready'),
    updateRevision: z.string().optional().describe('The revision being moved to'),
    history: z
      .array(
        z.object({
          revision: z
            .string()
            .describe('The revision number: a new pod template is a new revision'),
          image: z.string().describe('The worker image of the revision'),
          contractHash: z
            .string()
            .describe('Identity of the contract (key rule and schema versions)'),
          templateHash: z
            .string()
            .optional()
            .describe('Identity of the pod template: the same template is the same revision'),
          keyRule: z
            .string()
            .optional()
            .describe('The idempotency-key rule of the revision: what the gate compares'),
          schemaVersions: z
            .array(z.number().int())
            .optional()
            .describe('The schema versions the revision accepts: what the gate compares'),
          spec: z
            .record(z.string(), z.unknown())
            .optional()
            .describe(
              'Only in entries written by earlier versions: each revision’s spec is now kept once, in the ControllerRevision <name>-<revision>',
            ),
          deployedAt: z.string().describe('When the revision was first deployed'),
        }),
      )
      .optional()
      .describe('Revisions deployed, newest last, up to spec.rollout.historyLimit'),
    rollout: z
      .object({
        phase: z
          .enum(['Draining', 'Restoring', 'Verifying'])
          .describe(
            'The step: Draining the revision left, Restoring the previous one, Verifying that age falls',
          ),
        trigger: z
          .enum(['SpecReverted', 'AutoRollback'])
          .describe('SpecReverted (a person put an earlier spec back) or AutoRollback'),
        from: z.string().describe('The revision rolled back'),
        to: z.string().describe('The revision restored'),
        reason: z.string().optional().describe('Why an automatic rollback started'),
        startedAt: z.string().describe('When the rollback started'),
        stepStartedAt: z.string().describe('When the current step started'),
        drainDeadline: z.string().describe('When the drain ends whatever is still running'),
        drainEndedAt: z.string().optional().describe('When the drain ended'),
        drainEndedBy: z
          .enum(['PodsGone', 'Deadline'])
          .optional()
          .describe('PodsGone (every pod of the revision left exited) or Deadline'),
        ageAtRestore: z.number().int().optional().describe('Whole seconds, as status integers are'),
        verifyUntil: z
          .string()
          .optional()
          .describe('When verification gives up waiting for age to fall'),
      })
      .optional()
      .describe('A rollback in progress, step by step: an operator restart resumes it here'),
    lastRollback: z
      .object({
        from: z.string().describe('The revision rolled back'),
        to: z.string().describe('The revision restored'),
        trigger: z.enum(['SpecReverted', 'AutoRollback']).describe('SpecReverted or AutoRollback'),
        result: z
          .enum(['Complete', 'NotRecovering'])
          .describe('Complete (age fell), or NotRecovering (it did not within verifySeconds)'),
        drainEndedBy: z
          .enum(['PodsGone', 'Deadline'])
          .optional()
          .describe('How the drain ended: every pod of the old revision gone, or the deadline'),
        message: z.string().describe('What happened, in words'),
        finishedAt: z.string().describe('When the rollback finished'),
      })
      .optional()
      .describe('The last rollback: from, to, why, and whether age fell after it'),
    analysis: z
      .object({
        revision: z.string().describe('The revision watched'),
        stable: z.string().describe('The revision it rolls back to'),
        startedAt: z
          .string()
          .describe('When the window started (restarted on resume from a pause)'),
        ageAtStart: z
          .number()
          .optional()
          .describe('Age at the start: rising means rising above this and the objective'),
        overObjectiveSince: z
          .string()
          .optional()
          .describe('Since when age has been over the objective'),
      })
      .optional()
      .describe('The new revision under watch for automatic rollback'),
    cohort: z
      .object({
        revision: z.string().describe('The new revision, running as the cohort'),
        stable: z.string().describe('The revision the rest of the fleet runs'),
        phase: z
          .enum(['Analyzing', 'Waiting', 'Aborting', 'Promoting'])
          .describe(
            'Analyzing a step; Waiting for enough jobs to judge; Aborting (draining the cohort first); Promoting (the stable Deployment moves to the revision)',
          ),
        step: z.number().int().describe('The current step, from 1'),
        steps: z.number().int().describe('How many steps there are'),
        replicas: z.number().int().describe('Cohort replicas at this step'),
        stableReplicas: z.number().int().describe('Stable replicas beside them'),
        stepStartedAt: z
          .string()
          .describe('When the step (or the abort, or the promotion) started'),
        analysisUntil: z
          .string()
          .optional()
          .describe('When the step’s window ends, once its cohort is ready'),
        overObjectiveSince: z
          .string()
          .optional()
          .describe('Since when queue age has been past the objective and above its start'),
        ageAtStart: z.number().optional().describe('Queue age when the step started'),
        figures: z
          .object({
            since: z.string().describe('Start of the window the figures cover'),
            at: z.string().describe('When they were last read'),
            cohort: revisionFigures.describe('The cohort’s figures over the window'),
            stable: revisionFigures.describe('The stable revision’s, over the same window'),
          })
          .optional()
          .describe('Cohort and stable figures over the step’s window, from the workers'),
        baseline: revisionFigures
          .optional()
          .describe(
            'The stable revision’s figures from the last step where it handled enough: what a step whose stable share is too small (100%) is compared with',
          ),
        drainDeadline: z
          .string()
          .optional()
          .describe('Aborting: when the cohort’s drain ends whatever still runs'),
        reason: z.string().optional().describe('Aborting: which check failed, with the figures'),
        check: z
          .string()
          .optional()
          .describe('Aborting: the check that failed (Age, DeadLetters, …), or Manual'),
        message: z.string().optional().describe('What the step is waiting for, in words'),
      })
      .optional()
      .describe('A Cohort rollout in progress: an operator restart resumes it here'),
    lastCohort: z
      .object({
        revision: z.string().describe('The revision the cohort ran'),
        stable: z.string().describe('The stable revision beside it'),
        result: z.enum(['Promoted', 'Aborted']).describe('Promoted, or Aborted'),
        check: z.string().optional().describe('Aborted: the check that failed, or Manual'),
        message: z.string().describe('What happened, with the figures'),
        finishedAt: z.string().describe('When it ended'),
      })
      .optional()
      .describe('How the last Cohort rollout ended'),
    abortedRevision: z
      .string()
      .optional()
      .describe('A revision rolled back automatically; it stays off until the spec changes'),
    operatorLease: z
      .object({
        namespace: z.string().describe('The operator’s namespace'),
        name: z.string().describe('The Lease’s name'),
      })
      .optional()
      .describe(
        'The leader-election Lease of the operator that writes this status: kubectl jobworker status and why read its renewTime to tell whether an operator still runs (docs/reference/cli.md)',
      ),
    conditions: z
      .array(conditionSchema)
      .optional()
      .describe('The state of the JobWorker, one condition per type')
      .meta({ 'x-kubernetes-list-type': 'map', 'x-kubernetes-list-map-keys': ['type'] }),
  })
  .describe('What the operator observed and did, written at most once per reconcile');
export type JobWorkerStatus = z.infer<typeof jobWorkerStatus>;

export interface JobWorker {
  apiVersion: typeof API_VERSION;
  kind: typeof KIND;
  metadata: {
    name: string;
    namespace: string;
    uid: string;
    generation: number;
    resourceVersion?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    deletionTimestamp?: string;
  };
  spec: JobWorkerSpec;
  status?: JobWorkerStatus;
}

/** Parses a spec as read from the apiserver; the error names each field and what is wrong. */
export function parseSpec(raw: unknown): Parsed<JobWorkerSpec> {
  return parseWith(jobWorkerSpec, raw);
}
