// Why a worker is not ready, in words a machine and a person can both use.
// /readyz answers with it (JSON), and a worker that refuses to start logs it
// as its last line, which the pod's termination message keeps: the operator
// reads either and puts the reason and the fix on the JobWorker.
import { ConfigError } from './config.js';

export const NOT_READY_REASONS = [
  // passing states: nothing to fix
  'Starting',
  'Draining',
  // something is down or refuses: a person (or time) fixes it
  'BrokerUnreachable',
  'BrokerAuthRefused',
  'BrokerVhostMissing',
  'BrokerPermissionRefused',
  'QueueArgumentsDiffer',
  'BrokerResourceAlarm',
  'ClaimsStoreUnreachable',
  'ClaimsStoreAuthRefused',
  'ClaimsDatabaseMissing',
  'ClaimsSchemaMissing',
  'ClaimsStoreForbidden',
  'NotConsuming',
] as const;
export type NotReadyReason = (typeof NOT_READY_REASONS)[number];

/** States a worker passes through on its own: not a fault. */
export const PASSING: ReadonlySet<string> = new Set(['Starting', 'Draining']);

export interface NotReady {
  reason: NotReadyReason;
  /** what is wrong, without credentials */
  message: string;
  /** what a person does about it */
  fix: string;
}

export type Readiness = { ready: true } | ({ ready: false } & NotReady);

/** A failure no retry fixes, met at start-up: the worker exits with it. */
export class Misconfigured extends ConfigError {
  constructor(readonly problem: NotReady) {
    super(`${problem.fix} (${problem.message})`);
  }
}

const sqlstate = (err: unknown): string | undefined => {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
};
const messageOf = (err: unknown) =>
  String((err as { message?: unknown } | undefined)?.message ?? err);

/**
 * Failures no retry fixes: the configuration is wrong. At start-up the
 * worker exits with one (the pod's restarts and termination message say it)
 * instead of retrying forever as if the broker were down.
 */
export function brokerMisconfiguration(err: unknown): Omit<NotReady, 'message'> | undefined {
  const message = messageOf(err);
  if (err instanceof QueueRefused) return err.problem;
  // Only the connection handshake: a 403 on a later declare is a permission
  // on one queue, and a vhost that is down answers NOT_ALLOWED too.
  if (/Handshake terminated by server: 403/.test(message))
    return {
      reason: 'BrokerAuthRefused',
      fix: 'RabbitMQ refused the user or password in JOBFLEET_BROKER_URL (ACCESS_REFUSED): fix them in the Secret it comes from',
    };
  if (/NOT[-_]ALLOWED.*vhost .* not found/.test(message))
    return {
      reason: 'BrokerVhostMissing',
      fix: 'the vhost in JOBFLEET_BROKER_URL does not exist (NOT_ALLOWED): create it, or fix the URL',
    };
  return undefined;
}

export function claimStoreMisconfiguration(err: unknown): Omit<NotReady, 'message'> | undefined {
  switch (sqlstate(err)) {
    case '28P01':
    case '28000':
      return {
        reason: 'ClaimsStoreAuthRefused',
        fix: 'PostgreSQL refused the user or password in JOBFLEET_CLAIMS_URL: fix them in the Secret it comes from',
      };
    case '3D000':
      return {
        reason: 'ClaimsDatabaseMissing',
        fix: 'the database JOBFLEET_CLAIMS_URL names does not exist: create it, or fix the URL',
      };
    case '3F000':
      return {
        reason: 'ClaimsSchemaMissing',
        fix: "the schema in JOBFLEET_CLAIMS_URL's search_path does not exist: create it, or fix the URL's options",
      };
    case '42501':
      return {
        reason: 'ClaimsStoreForbidden',
        fix: "the user in JOBFLEET_CLAIMS_URL may not create the claim store's tables: grant it CREATE on the schema",
      };
    default:
      return undefined;
  }
}

/**
 * The permissions each queue operation needs (RabbitMQ's access control): a
 * declare needs configure on the queue and, when the queue has a dead-letter
 * target (the work queue, the retry tiers), read on it and write on the
 * default exchange as well.
 */
const PERMISSION = {
  declare: 'configure (and, for a queue with a dead-letter target, read; write on amq.default)',
  consume: 'read',
  publish: 'write',
} as const;

/** RabbitMQ's own words, without amqplib's framing: "access to queue 'x' in vhost 'v' refused for user 'u'". */
const compactRefusal = (message: string) =>
  /ACCESS[-_]REFUSED - (.*?)"?$/.exec(message)?.[1] ?? 'ACCESS_REFUSED';

/** The broker refused an operation on one of the worker's queues: no retry fixes it. */
export class QueueRefused extends Error {
  constructor(
    readonly problem: Omit<NotReady, 'message'>,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Names what the broker refused on `queue`, or undefined when the error is
 * not a refusal (the connection dropped: retried as unreachable).
 * ACCESS_REFUSED names the permission the operation needs; PRECONDITION_FAILED
 * ("inequivalent arg") names the argument that differs and both values.
 */
export function queueRefusal(
  err: unknown,
  queue: string,
  operation: keyof typeof PERMISSION,
): QueueRefused | undefined {
  const message = messageOf(err);
  if (/ACCESS[-_]REFUSED/.test(message)) {
    const permission = PERMISSION[operation];
    return new QueueRefused(
      {
        reason: 'BrokerPermissionRefused',
        fix: `grant the broker user ${permission} permission on queue "${queue}" in its vhost (rabbitmqctl set_permissions; docs/compatibility.md has a least-privilege grant)`,
      },
      `RabbitMQ refused to ${operation} queue "${queue}" (${compactRefusal(message)})`,
    );
  }
  const arg = /inequivalent arg '([^']+)' for queue '[^']*' in vhost '[^']*': (.*)$/.exec(message);
  if (/PRECONDITION[-_]FAILED/.test(message) && arg) {
    const current = /current is '([^']+)'/.exec(arg[2] ?? '')?.[1];
    const keep =
      arg[1] === 'x-queue-type' && current
        ? `set spec.broker.queueType (JOBFLEET_QUEUE_TYPE) to ${current} to keep using it, or `
        : '';
    return new QueueRefused(
      {
        reason: 'QueueArgumentsDiffer',
        fix: `queue "${queue}" exists with other arguments than this worker declares (${arg[1]}): a queue's arguments cannot change, so ${keep}move its messages to a new queue (spec.broker.queue) or delete it once empty; docs/compatibility.md lists the arguments`,
      },
      `queue "${queue}" exists with a different ${arg[1]} (${(arg[2] ?? '').replace(/"$/, '')})`,
    );
  }
  return undefined;
}

/** Why the broker cannot be used: a misconfiguration, or unreachable (retried). */
export function brokerProblem(err: unknown, compact: (m: string) => string): NotReady {
  return {
    ...(brokerMisconfiguration(err) ?? {
      reason: 'BrokerUnreachable',
      fix: 'check that RabbitMQ at the host in JOBFLEET_BROKER_URL is up and reachable from the pod (DNS, NetworkPolicy, TLS); the worker keeps retrying',
    }),
    message: compact(messageOf(err)),
  };
}

export function claimStoreProblem(err: unknown, compact: (m: string) => string): NotReady {
  return {
    ...(claimStoreMisconfiguration(err) ?? {
      reason: 'ClaimsStoreUnreachable',
      fix: 'check that PostgreSQL at the host in JOBFLEET_CLAIMS_URL is up and reachable from the pod (DNS, NetworkPolicy, max_connections); the worker keeps retrying',
    }),
    message: compact(messageOf(err)),
  };
}
