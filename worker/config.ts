// Worker configuration: JOBFLEET_* environment variables (set by the
// operator; docs/reference lists them), overridable in code. Validated once, at construction,
// with messages that name the variable and the fix.
import { z } from 'zod';
import { brokerUrls } from './broker-urls.js';
import { parseSchemaVersions } from './contract.js';

const int = (min: number, max: number) => z.coerce.number().int().min(min).max(max);

const schema = z
  .object({
    queue: z
      .string()
      .min(1)
      .max(200)
      .regex(/^[A-Za-z0-9_.:-]+$/, 'use letters, digits, "_", ".", ":" or "-"'),
    brokerUrl: z
      .string()
      .refine(
        (v) =>
          brokerUrls(v).length > 0 && brokerUrls(v).every((u) => /^amqps?:\/\/[^\s]+$/.test(u)),
        'must be an amqp:// or amqps:// URL, or several separated by commas (one per cluster node)',
      ),
    claimsUrl: z.string().regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL'),
    prefetch: int(1, 1000).default(8),
    maxAttempts: int(1, 100).default(5),
    maxThrottledRetries: int(0, 10_000).default(100),
    initialDelaySeconds: z.coerce.number().positive().max(86_400).default(1),
    maxDelaySeconds: z.coerce.number().positive().max(86_400).default(600),
    deadLetterQueue: z.string().min(1).max(255).optional(),
    leaseSeconds: int(5, 86_400).default(60),
    drainDeadlineSeconds: z.coerce.number().min(0).max(3600).default(45),
    // A run past this is aborted and ends in doubt (its retry decides first); below RabbitMQ's consumer_timeout
    // (30 minutes by default), which would close the channel instead.
    handlerTimeoutSeconds: z.coerce.number().positive().max(86_400).default(900),
    keyRule: z.string().optional(),
    schemaVersions: z
      .union([
        z.string().transform((s, ctx) => {
          try {
            return parseSchemaVersions(s);
          } catch (err) {
            ctx.addIssue({ code: 'custom', message: (err as Error).message });
            return z.NEVER;
          }
        }),
        z.array(z.number().int().positive()),
      ])
      .optional(),
    revision: z.string().optional(),
    metricsPort: int(0, 65_535).default(9464),
    // The address /metrics and /readyz listen on; all interfaces by default.
    metricsHost: z.string().min(1).optional(),
    // quorum: replicated (classic queues have one replica on RabbitMQ 4); docs/compatibility.md
    queueType: z.enum(['classic', 'quorum']).default('quorum'),
    maxMessageBytes: int(1024, 128 * 1024 * 1024).default(1024 * 1024),
    claimRetentionSeconds: int(60, 10 * 365 * 86_400).default(7 * 86_400),
    tlsCaFile: z.string().optional(),
    deadLetterOwner: z.string().optional(),
    // 'store' keeps each dead letter's body in PostgreSQL as well (for `jobfleet dlq show`
    // and replay when the DLQ copy is gone); off by default: payloads may hold personal data.
    deadLetterPayloads: z.enum(['queue-only', 'store']).default('queue-only'),
    // What happens to an in-doubt attempt of a handler without reconcile
    // (docs/in-doubt.md): rerun it (the downstream dedupes ctx.key) or hold
    // it for a person. rerun by default: see the page for why.
    inDoubt: z.enum(['rerun', 'hold']).default('rerun'),
    // The outbox relay (docs/outbox.md): the claims database's outbox, where
    // handlers' follow-up jobs wait, is relayed by the workers (one active,
    // the others standing by) unless 'off'; outboxUrl names a producer's
    // outbox database to relay as well (the JobWorker's spec.outbox).
    outboxRelay: z.enum(['on', 'off']).default('on'),
    outboxUrl: z
      .string()
      .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL')
      .optional(),
  })
  .refine((c) => c.maxDelaySeconds >= c.initialDelaySeconds, {
    path: ['maxDelaySeconds'],
    message: 'must be at least initialDelaySeconds',
  });

export type WorkerConfigInput = z.input<typeof schema>;
export type WorkerConfig = Omit<z.output<typeof schema>, 'deadLetterQueue'> & {
  deadLetterQueue: string;
};

/** Config field → the environment variable that sets it. */
export const ENV: Record<keyof WorkerConfigInput, string> = {
  queue: 'JOBFLEET_QUEUE',
  brokerUrl: 'JOBFLEET_BROKER_URL',
  claimsUrl: 'JOBFLEET_CLAIMS_URL',
  prefetch: 'JOBFLEET_PREFETCH',
  maxAttempts: 'JOBFLEET_MAX_ATTEMPTS',
  maxThrottledRetries: 'JOBFLEET_MAX_THROTTLED_RETRIES',
  initialDelaySeconds: 'JOBFLEET_INITIAL_DELAY_SECONDS',
  maxDelaySeconds: 'JOBFLEET_MAX_DELAY_SECONDS',
  deadLetterQueue: 'JOBFLEET_DEAD_LETTER_QUEUE',
  leaseSeconds: 'JOBFLEET_LEASE_SECONDS',
  drainDeadlineSeconds: 'JOBFLEET_DRAIN_DEADLINE_SECONDS',
  handlerTimeoutSeconds: 'JOBFLEET_HANDLER_TIMEOUT_SECONDS',
  keyRule: 'JOBFLEET_KEY_RULE',
  schemaVersions: 'JOBFLEET_SCHEMA_VERSIONS',
  revision: 'JOBFLEET_REVISION',
  metricsPort: 'JOBFLEET_METRICS_PORT',
  metricsHost: 'JOBFLEET_METRICS_HOST',
  queueType: 'JOBFLEET_QUEUE_TYPE',
  maxMessageBytes: 'JOBFLEET_MAX_MESSAGE_BYTES',
  claimRetentionSeconds: 'JOBFLEET_CLAIM_RETENTION_SECONDS',
  tlsCaFile: 'JOBFLEET_TLS_CA_FILE',
  deadLetterOwner: 'JOBFLEET_DEAD_LETTER_OWNER',
  deadLetterPayloads: 'JOBFLEET_DEAD_LETTER_PAYLOADS',
  inDoubt: 'JOBFLEET_IN_DOUBT',
  outboxRelay: 'JOBFLEET_OUTBOX_RELAY',
  outboxUrl: 'JOBFLEET_OUTBOX_URL',
};

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

/** Reads config from `env`, then applies `overrides` (code wins). Throws ConfigError naming each bad field. */
export function loadConfig(
  overrides: Partial<WorkerConfigInput> = {},
  env: NodeJS.ProcessEnv = process.env,
): WorkerConfig {
  const raw: Record<string, unknown> = {};
  for (const [field, name] of Object.entries(ENV)) {
    const v = env[name];
    if (v !== undefined && v !== '') raw[field] = v;
  }
  for (const [field, v] of Object.entries(overrides)) if (v !== undefined) raw[field] = v;

  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => {
      const field = String(i.path[0] ?? '');
      const envName = ENV[field as keyof WorkerConfigInput];
      const what = field in overrides ? `option ${field}` : `${envName} (option ${field})`;
      const msg = i.code === 'invalid_type' && raw[field] === undefined ? 'is required' : i.message;
      return `${what} ${msg}`;
    });
    throw new ConfigError(`invalid worker configuration:\n  - ${lines.join('\n  - ')}`);
  }
  const c = parsed.data;
  return { ...c, deadLetterQueue: c.deadLetterQueue ?? `${c.queue}.dlq` };
}
