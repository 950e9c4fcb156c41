// The broker's settings that lose or stall a JobWorker's jobs, found from what
// the management API lists: the policies and operator policies that apply to
// each of its queues (RabbitMQ's matching: pattern, apply-to, the highest
// priority wins), the consumer timeout against the handler deadline, and what
// blocks the next RabbitMQ upgrade (feature flags off, deprecated features used).
import type { JobWorkerSpec } from '../../api/jobworker.js';
import { HOLD_LIMIT_MS, topology } from '../../api/worker-contract.js';
import type { BrokerPolicy, BrokerSettings } from '../model/index.js';

export type BrokerFailure = 'PolicyDropsJobs' | 'ConsumerTimeoutTooShort';
export type BrokerWarning = 'FeatureFlagsDisabled' | 'DeprecatedFeaturesUsed';

/** What a queue is to the JobWorker: each tolerates different keys. */
export type QueueRole = 'work' | 'retry' | 'quarantine' | 'delivery-limit';

export interface BrokerQueue {
  name: string;
  role: QueueRole;
  type: 'classic' | 'quorum';
  /** the arguments the workers declare it with (they win over a policy's DLX and overflow) */
  args: Record<string, unknown>;
}

export interface BrokerFinding {
  reason: BrokerFailure | BrokerWarning;
  severity: 'failure' | 'warning';
  /** the policy that says it, and whether it is an operator policy */
  policy?: { name: string; kind: 'policy' | 'operator-policy' };
  key?: string;
  value?: unknown;
  queue?: string;
  /** what goes wrong, one sentence */
  says: string;
  fix: string;
}

/** The queues a JobWorker's workers declare, as worker/topology.ts names them. */
export function brokerQueues(spec: JobWorkerSpec): BrokerQueue[] {
  const t = topology({
    queue: spec.broker.queue,
    deadLetterQueue: spec.retry.deadLetterQueue ?? `${spec.broker.queue}.dlq`,
    queueType: spec.broker.queueType,
    initialDelaySeconds: spec.retry.initialDelaySeconds,
    maxDelaySeconds: spec.retry.maxDelaySeconds,
  });
  const type = spec.broker.queueType;
  return [
    { name: t.work.name, role: 'work' as const, type, args: t.work.options.arguments },
    ...[...t.tiers.values()].map((q) => ({
      name: q.name,
      role: 'retry' as const,
      type,
      args: q.options.arguments,
    })),
    {
      name: t.deadLetter.name,
      role: 'quarantine' as const,
      type,
      args: t.deadLetter.options.arguments,
    },
    ...(t.overLimit
      ? [
          {
            name: t.overLimit.name,
            role: 'delivery-limit' as const,
            type,
            args: t.overLimit.options.arguments,
          },
        ]
      : []),
  ];
}

/** Whether `apply-to` covers a queue of `type` (RabbitMQ 3.12 added the per-type values). */
export function appliesTo(applyTo: string, type: string): boolean {
  if (applyTo === 'all' || applyTo === 'queues') return true;
  if (applyTo === 'classic_queues') return type === 'classic';
  if (applyTo === 'quorum_queues') return type === 'quorum';
  if (applyTo === 'streams') return type === 'stream';
  return false; // exchanges
}

/** Whether `pattern` (a regular expression, unanchored as RabbitMQ reads it) matches `name`. */
export function patternMatches(pattern: string, name: string): boolean {
  try {
    return new RegExp(pattern).test(name);
  } catch {
    return false; // RabbitMQ refuses such a policy
  }
}

/**
 * The one policy of `policies` that applies to the queue: of those whose
 * pattern and apply-to match, the highest priority (a tie goes to the name
 * sorted first, so the finding does not flap).
 */
export function effectivePolicy(
  policies: readonly BrokerPolicy[],
  queue: { name: string; type: string },
): BrokerPolicy | undefined {
  return policies
    .filter((p) => appliesTo(p['apply-to'] ?? 'all', queue.type))
    .filter((p) => patternMatches(p.pattern, queue.name))
    .sort((a, b) => (b.priority ?? 0) - (a.priority ?? 0) || a.name.localeCompare(b.name))[0];
}

const inMs = (v: unknown) => `${String(v)} ms`;

/** Each key that loses jobs, the roles it loses them on, and what it does. */
const DROPS: Record<string, { on: QueueRole[]; does: (v: unknown) => string }> = {
  'max-length': {
    on: ['work', 'retry', 'quarantine', 'delivery-limit'],
    does: (v) => `drops the oldest jobs once it holds ${String(v)}`,
  },
  'max-length-bytes': {
    on: ['work', 'retry', 'quarantine', 'delivery-limit'],
    does: (v) => `drops the oldest jobs once it holds ${String(v)} bytes`,
  },
  'message-ttl': {
    // a retry tier's own TTL is how it works; a shorter one only retries sooner
    on: ['work', 'quarantine', 'delivery-limit'],
    does: (v) => `drops jobs that wait longer than ${inMs(v)}`,
  },
  expires: {
    on: ['work', 'retry', 'quarantine', 'delivery-limit'],
    does: (v) => `deletes the queue, with its jobs, once unused for ${inMs(v)}`,
  },
  'delivery-limit': {
    on: ['work', 'quarantine', 'delivery-limit'],
    does: (v) => `gives a job up after ${String(v)} deliveries`,
  },
  // dead-lettering routes jobs away from the quarantine's keeper: the work queue's only
  'dead-letter-exchange': {
    on: ['work'],
    does: (v) => `sends expired and rejected jobs to exchange "${String(v)}"`,
  },
  'dead-letter-routing-key': {
    on: ['work'],
    does: (v) => `sends expired and rejected jobs on with routing key "${String(v)}"`,
  },
};

/** Why `key` of a policy does no harm on this queue, if it does none. */
function harmless(key: string, q: BrokerQueue, definitions: Array<Record<string, unknown>>) {
  if (key === 'max-length' || key === 'max-length-bytes')
    // reject-publish refuses new jobs instead of dropping old ones (the publisher is told)
    return (
      q.args['x-overflow'] === 'reject-publish' ||
      definitions.some((d) => d.overflow === 'reject-publish')
    );
  if (key === 'delivery-limit') return q.type !== 'quorum';
  if (key === 'dead-letter-exchange' || key === 'dead-letter-routing-key')
    return q.args[`x-${key}`] !== undefined; // the declared argument wins
  return false;
}

/** RabbitMQ's consumer_timeout when nothing says otherwise (it cannot be read from the node reliably). */
export const DEFAULT_CONSUMER_TIMEOUT_MS = 1_800_000;

export interface FindingsInput {
  queues: readonly BrokerQueue[];
  settings: BrokerSettings;
  handlerTimeoutSeconds: number;
}

export function brokerFindings(i: FindingsInput): BrokerFinding[] {
  const out: BrokerFinding[] = [];
  const work = i.queues.find((q) => q.role === 'work');
  for (const q of i.queues) {
    const applied = [
      { kind: 'policy' as const, p: effectivePolicy(i.settings.policies, q) },
      { kind: 'operator-policy' as const, p: effectivePolicy(i.settings.operatorPolicies, q) },
    ].filter((a): a is { kind: 'policy' | 'operator-policy'; p: BrokerPolicy } => !!a.p);
    const definitions = applied.map((a) => a.p.definition);
    for (const { kind, p } of applied)
      for (const [key, value] of Object.entries(p.definition).sort(([a], [b]) =>
        a.localeCompare(b),
      )) {
        const drop = DROPS[key];
        if (!drop?.on.includes(q.role) || harmless(key, q, definitions)) continue;
        const set = kind === 'policy' ? 'set_policy' : 'set_operator_policy';
        out.push({
          reason: 'PolicyDropsJobs',
          severity: 'failure',
          policy: { name: p.name, kind },
          key,
          value,
          queue: q.name,
          says: `${kind === 'policy' ? 'Policy' : 'Operator policy'} "${p.name}" sets ${key}=${String(value)} on ${q.role === 'work' ? 'the work queue' : `the ${q.role} queue`} "${q.name}": it ${drop.does(value)}.`,
          fix: `Remove ${key} from "${p.name}", or narrow its pattern "${p.pattern}" so it does not match "${q.name}" (rabbitmqctl ${set}).`,
        });
      }
  }
  if (work) out.push(...consumerTimeout(i, work));
  const disabled = i.settings.featureFlags
    .filter((f) => f.state === 'disabled' && f.stability !== 'experimental')
    .map((f) => f.name)
    .sort();
  if (disabled.length)
    out.push({
      reason: 'FeatureFlagsDisabled',
      severity: 'warning',
      key: 'feature_flags',
      value: disabled.join(','),
      says: `Feature flags not enabled: ${disabled.join(', ')}; the next RabbitMQ upgrade refuses to start until they are.`,
      fix: 'Run `rabbitmqctl enable_feature_flag all` once every node runs the same version.',
    });
  const deprecated = [...i.settings.deprecatedFeaturesUsed].sort();
  if (deprecated.length)
    out.push({
      reason: 'DeprecatedFeaturesUsed',
      severity: 'warning',
      key: 'deprecated_features',
      value: deprecated.join(','),
      says: `Deprecated features in use: ${deprecated.join(', ')}; a later RabbitMQ removes them.`,
      fix: 'Stop using them before upgrading (RabbitMQ’s deprecated-features guide says what replaces each).',
    });
  return out;
}

/**
 * A delivery is held up to HOLD_LIMIT_MS through a claim-store outage, then
 * runs up to the handler deadline: a consumer timeout shorter than both
 * closes the channel and returns every delivery on it.
 */
function consumerTimeout(i: FindingsInput, work: BrokerQueue): BrokerFinding[] {
  const needMs = i.handlerTimeoutSeconds * 1000 + HOLD_LIMIT_MS;
  const said = [
    { kind: 'policy' as const, p: effectivePolicy(i.settings.policies, work) },
    { kind: 'operator-policy' as const, p: effectivePolicy(i.settings.operatorPolicies, work) },
  ]
    .flatMap(({ kind, p }) => {
      const v = Number(p?.definition['consumer-timeout']);
      return p && Number.isFinite(v) ? [{ kind, p, ms: v }] : [];
    })
    .sort((a, b) => a.ms - b.ms)[0];
  const ms = said?.ms ?? DEFAULT_CONSUMER_TIMEOUT_MS;
  if (ms >= needMs) return [];
  const lower = Math.max(1, Math.floor((ms - HOLD_LIMIT_MS) / 1000));
  const where = said
    ? `${said.kind === 'policy' ? 'Policy' : 'Operator policy'} "${said.p.name}" sets consumer-timeout=${ms}`
    : `The broker's consumer_timeout is ${ms} ms (RabbitMQ's default, assumed: the node's setting cannot be read)`;
  return [
    {
      reason: 'ConsumerTimeoutTooShort',
      severity: 'failure',
      ...(said && { policy: { name: said.p.name, kind: said.kind } }),
      key: 'consumer-timeout',
      value: ms,
      queue: work.name,
      says: `${where} on "${work.name}", below the handler deadline (spec.retry.handlerTimeoutSeconds ${i.handlerTimeoutSeconds} s) plus the longest hold (${HOLD_LIMIT_MS / 1000} s): long handlers come back as redeliveries.`,
      fix:
        lower >= 1 && ms > HOLD_LIMIT_MS
          ? `Raise consumer-timeout to at least ${needMs} ms, or lower spec.retry.handlerTimeoutSeconds to ${lower} or less.`
          : `Raise consumer-timeout to at least ${needMs} ms.`,
    },
  ];
}
