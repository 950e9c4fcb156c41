// The JobWorker API (jobfleet.dev/v1alpha1), DESIGN.md §1: one zod schema is
// the source of truth. The controller parses specs with it, and the CRD's
// OpenAPI schema is generated from it (src/api/crd.ts), so the two cannot
// drift. Field names are public API: add, never rename.
import { z } from 'zod';

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

/** AMQP queue names: up to 255 bytes; "amq." is reserved by the broker. */
const queueName = z
  .string()
  .min(1)
  .max(255)
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
    labels: z.record(z.string(), z.string()).optional(),
    annotations: z.record(z.string(), z.string()).optional(),
    serviceAccountName: z.string().max(253).optional(),
    nodeSelector: z.record(z.string(), z.string()).optional(),
    env: z
      .array(z.record(z.string(), z.unknown()))
      .optional()
      .describe('core/v1 EnvVar list, appended to the JOBFLEET_* contract'),
    resources: z
      .record(z.string(), z.unknown())
      .optional()
      .describe('core/v1 ResourceRequirements of the worker container'),
    tolerations: z.array(z.record(z.string(), z.unknown())).optional(),
    securityContext: z
      .record(z.string(), z.unknown())
      .optional()
      .describe('core/v1 SecurityContext overrides of the restricted default'),
  })
  .describe('Merged into the generated pod');

export const jobWorkerSpec = z.object({
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
  podTemplate: podTemplate.optional(),
  broker: z.object({
    urlSecretRef: secretKeyRef.describe('amqp(s) URL of RabbitMQ'),
    managementUrlSecretRef: secretKeyRef
      .optional()
      .describe('RabbitMQ management API URL: the default source of queue age'),
    queue: queueName.describe('The work queue'),
    queueType: z
      .enum(['classic', 'quorum'])
      .default('classic')
      .describe('Type of the queues the worker declares when they do not exist'),
    prefetch: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .default(8)
      .describe('Deliveries in flight per replica'),
  }),
  claims: z.object({
    urlSecretRef: secretKeyRef.describe('PostgreSQL URL of the idempotency claims database'),
    leaseSeconds: z.number().int().min(5).max(86_400).default(60),
  }),
  contract: z.object({
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
  }),
  retry: z
    .object({
      maxAttempts: z.number().int().min(1).max(100).default(5),
      maxThrottledRetries: z
        .number()
        .int()
        .min(0)
        .max(10_000)
        .default(100)
        .describe(
          'A retry because the dependency throttled (429, Throttled; Retry-After honoured) spends no attempt; past this many such retries of one job, it is dead-lettered',
        ),
      initialDelaySeconds: z.number().int().min(1).max(86_400).default(1),
      maxDelaySeconds: z.number().int().min(1).max(86_400).default(600),
      deadLetterQueue: queueName.optional().describe('Defaults to "<queue>.dlq"'),
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
    }),
  scaling: z
    .object({
      minReplicas: z.number().int().min(0).max(10_000).default(1),
      maxReplicas: z.number().int().min(1).max(10_000).default(10),
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
        .optional(),
      scaleDownStabilizationSeconds: z.number().int().min(0).max(86_400).default(300),
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
    }),
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
    .default({ drainDeadlineSeconds: 45 }),
  rollout: z
    .object({
      autoRollback: z
        .boolean()
        .default(true)
        .describe(
          'Roll back by itself when a new revision makes queue age rise past the objective (or crash-loops) within analysisSeconds',
        ),
      analysisSeconds: z.number().int().min(10).max(86_400).default(300),
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
    })
    .default({ autoRollback: true, analysisSeconds: 300, verifySeconds: 120, historyLimit: 10 }),
  deadLetter: z.object({
    owner: z.string().min(1).max(253).describe('Who answers for the quarantine, e.g. team-billing'),
    maxAgeSeconds: z
      .number()
      .int()
      .min(60)
      .max(31_536_000)
      .default(86_400)
      .describe('Alert when the oldest dead letter is older'),
  }),
});

export type JobWorkerSpec = z.output<typeof jobWorkerSpec>;
export type JobWorkerSpecInput = z.input<typeof jobWorkerSpec>;

export const conditionSchema = z.object({
  type: z.string(),
  status: z.enum(['True', 'False', 'Unknown']),
  observedGeneration: z.number().int().optional(),
  lastTransitionTime: z.string(),
  reason: z.string(),
  message: z.string(),
});
export type Condition = z.infer<typeof conditionSchema>;

export const PHASES = [
  'Healthy',
  'Progressing',
  'Draining',
  'RollingBack',
  'Blocked',
  'Degraded',
  'Paused',
] as const;
export type Phase = (typeof PHASES)[number];

export const jobWorkerStatus = z.object({
  observedGeneration: z.number().int().optional(),
  phase: z.enum(PHASES).optional(),
  replicas: z.number().int().optional(),
  readyReplicas: z.number().int().optional(),
  desiredReplicas: z.number().int().optional(),
  oldestMessageAgeSeconds: z.number().int().optional(),
  oldestMessageAge: z
    .string()
    .optional()
    .describe('oldestMessageAgeSeconds as a duration with its unit, e.g. 37s, 4m10s'),
  ageSource: z.enum(['HeadTimestamp', 'Estimated']).optional(),
  queueDepth: z.number().int().optional(),
  scaling: z
    .object({
      limitedBy: z
        .enum(['age', 'downstream', 'maxReplicas', 'minReplicas', 'stabilization', 'signalMissing'])
        .optional(),
      message: z.string().optional(),
    })
    .optional(),
  deadLetters: z
    .object({
      quarantined: z.number().int(),
      oldestDeadLetteredAt: z.string().optional(),
      owner: z.string().optional(),
    })
    .optional()
    .describe('The quarantine, read from the claims database'),
  currentRevision: z.string().optional(),
  updateRevision: z.string().optional(),
  history: z
    .array(
      z.object({
        revision: z.string(),
        image: z.string(),
        contractHash: z.string(),
        templateHash: z
          .string()
          .optional()
          .describe('Identity of the pod template: the same template is the same revision'),
        keyRule: z.string().optional(),
        schemaVersions: z.array(z.number().int()).optional(),
        spec: z
          .record(z.string(), z.unknown())
          .optional()
          .describe('The spec of this revision: what a rollback to it restores'),
        deployedAt: z.string(),
      }),
    )
    .optional(),
  rollout: z
    .object({
      phase: z.enum(['Draining', 'Restoring', 'Verifying']),
      trigger: z.enum(['SpecReverted', 'AutoRollback']),
      from: z.string(),
      to: z.string(),
      reason: z.string().optional(),
      startedAt: z.string(),
      stepStartedAt: z.string(),
      drainDeadline: z.string(),
      drainEndedAt: z.string().optional(),
      drainEndedBy: z.enum(['PodsGone', 'Deadline']).optional(),
      ageAtRestore: z.number().int().optional().describe('Whole seconds, as status integers are'),
      verifyUntil: z.string().optional(),
    })
    .optional()
    .describe('A rollback in progress, step by step: an operator restart resumes it here'),
  lastRollback: z
    .object({
      from: z.string(),
      to: z.string(),
      trigger: z.enum(['SpecReverted', 'AutoRollback']),
      result: z.enum(['Complete', 'NotRecovering']),
      drainEndedBy: z
        .enum(['PodsGone', 'Deadline'])
        .optional()
        .describe('How the drain ended: every pod of the old revision gone, or the deadline'),
      message: z.string(),
      finishedAt: z.string(),
    })
    .optional(),
  analysis: z
    .object({
      revision: z.string(),
      stable: z.string(),
      startedAt: z.string(),
      ageAtStart: z.number().optional(),
      overObjectiveSince: z.string().optional(),
    })
    .optional()
    .describe('The new revision under watch for automatic rollback'),
  abortedRevision: z
    .string()
    .optional()
    .describe('A revision rolled back automatically; it stays off until the spec changes'),
  conditions: z
    .array(conditionSchema)
    .optional()
    .meta({ 'x-kubernetes-list-type': 'map', 'x-kubernetes-list-map-keys': ['type'] }),
});
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
export function parseSpec(
  raw: unknown,
): { ok: true; spec: JobWorkerSpec } | { ok: false; problems: string[] } {
  const r = jobWorkerSpec.safeParse(raw);
  if (r.success) return { ok: true, spec: r.data };
  return {
    ok: false,
    problems: r.error.issues.map((i) => `spec.${i.path.join('.')}: ${i.message}`),
  };
}
