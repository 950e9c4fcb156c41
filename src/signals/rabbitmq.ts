// Queue signals from the RabbitMQ management API: depth, rates and the age of
// the oldest waiting message. Classic queues report the head message's
// publisher timestamp (our producer sets it); quorum queues do not
// (rabbitmq-server#6813), so their age is estimated and says so.
import type { Signals } from '../reconcile/scaling.js';

export interface QueueStats {
  /** classic, quorum or stream */
  type: string;
  messagesReady: number;
  messagesUnacked: number;
  consumers: number;
  /** seconds since the epoch; classic queues only */
  headMessageTimestamp?: number;
  publishRate: number;
  ackRate: number;
}

export interface QueueAge {
  signals: Extract<Signals, { ok: true }>;
  ageSource: 'HeadTimestamp' | 'Estimated';
}

interface ManagementQueue {
  type?: string;
  messages_ready?: number;
  messages_unacknowledged?: number;
  consumers?: number;
  head_message_timestamp?: number | null;
  message_stats?: {
    publish_details?: { rate?: number };
    ack_details?: { rate?: number };
    deliver_get_details?: { rate?: number };
  };
}

/** The vhost an amqp(s) URL names ("/" when its path is empty). */
export function vhostOf(amqpUrl: string): string {
  const path = new URL(amqpUrl).pathname.replace(/^\//, '');
  return path === '' ? '/' : decodeURIComponent(path);
}

export class ManagementApiError extends Error {
  override readonly name = 'ManagementApiError';
}

export async function fetchQueueStats(
  mgmtUrl: string,
  vhost: string,
  queue: string,
  timeoutMs = 5000,
): Promise<QueueStats> {
  const q = await managementGet<ManagementQueue>(
    mgmtUrl,
    `/api/queues/${encodeURIComponent(vhost)}/${encodeURIComponent(queue)}`,
    `queue ${vhost}/${queue}`,
    timeoutMs,
  );
  return {
    type: q.type ?? 'classic',
    messagesReady: q.messages_ready ?? 0,
    messagesUnacked: q.messages_unacknowledged ?? 0,
    consumers: q.consumers ?? 0,
    headMessageTimestamp: q.head_message_timestamp ?? undefined,
    publishRate: q.message_stats?.publish_details?.rate ?? 0,
    ackRate: q.message_stats?.ack_details?.rate ?? 0,
  };
}

/** Remembers, per queue, since when it has been non-empty (for the quorum estimate). */
export interface AgeMemory {
  nonEmptySince?: number;
  /** we saw the queue empty, so nonEmptySince bounds every message's wait */
  sawEmpty?: boolean;
}

/**
 * Age of the oldest waiting message, pure. With a head timestamp: now − it.
 * Without (quorum queues) it is estimated: by Little's law the head has
 * waited about depth / arrival rate; and once we have seen the queue empty,
 * no message can have waited longer than it has been non-empty since.
 */
export function queueAge(
  stats: QueueStats,
  nowMs: number,
  memory: AgeMemory,
): { age: QueueAge; memory: AgeMemory } {
  const depth = stats.messagesReady;
  const base = {
    depth,
    unacked: stats.messagesUnacked,
    arrivalRate: stats.publishRate,
    completionRate: stats.ackRate,
  };
  const estimated = stats.type === 'quorum' || stats.type === 'stream';
  if (depth === 0) {
    return {
      age: {
        signals: { ok: true, oldestAgeSeconds: 0, ...base },
        ageSource: estimated ? 'Estimated' : 'HeadTimestamp',
      },
      memory: { sawEmpty: true },
    };
  }
  const next: AgeMemory = { ...memory, nonEmptySince: memory.nonEmptySince ?? nowMs };
  if (stats.headMessageTimestamp) {
    return {
      age: {
        signals: {
          ok: true,
          oldestAgeSeconds: Math.max(0, nowMs / 1000 - stats.headMessageTimestamp),
          ...base,
        },
        ageSource: 'HeadTimestamp',
      },
      memory: next,
    };
  }
  const waited = (nowMs - (next.nonEmptySince ?? nowMs)) / 1000;
  const little = stats.publishRate > 0 ? depth / stats.publishRate : undefined;
  const bounds = [little, next.sawEmpty ? waited : undefined].filter(
    (v): v is number => v !== undefined,
  );
  const oldest = bounds.length ? Math.min(...bounds) : waited;
  return {
    age: { signals: { ok: true, oldestAgeSeconds: oldest, ...base }, ageSource: 'Estimated' },
    memory: next,
  };
}

/**
 * Messages in the work queue and its retry tiers (`<queue>.retry.*`), ready
 * or unacked: what must be zero before an idempotency-key rule may change.
 */
export async function fetchQueuedTotal(
  mgmtUrl: string,
  vhost: string,
  queue: string,
  timeoutMs = 5000,
): Promise<number> {
  const queues = await managementGet<Array<{ name: string; messages?: number }>>(
    mgmtUrl,
    `/api/queues/${encodeURIComponent(vhost)}?columns=name,messages`,
    `vhost ${vhost}`,
    timeoutMs,
  );
  return queues
    .filter((q) => q.name === queue || q.name.startsWith(`${queue}.retry.`))
    .reduce((n, q) => n + (q.messages ?? 0), 0);
}

/**
 * GET from the management API. The URL's credentials go into a header (fetch
 * refuses them in the URL) and never into an error message.
 */
async function managementGet<T>(
  mgmtUrl: string,
  path: string,
  what: string,
  timeoutMs: number,
): Promise<T> {
  const u = new URL(mgmtUrl);
  const auth = `Basic ${Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64')}`;
  u.username = '';
  u.password = '';
  const base = u.toString().replace(/\/$/, '');
  const where = `${u.host}, ${what}`;
  let res: Response;
  try {
    res = await fetch(`${base}${path}`, {
      headers: { authorization: auth },
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).name;
    throw new ManagementApiError(`RabbitMQ management API unreachable at ${where} (${cause})`);
  }
  if (res.status === 401)
    throw new ManagementApiError(
      `RabbitMQ management API refused the credentials from the Secret (${where})`,
    );
  if (res.status === 404)
    throw new ManagementApiError(`not found through the management API (${where})`);
  if (!res.ok)
    throw new ManagementApiError(`RabbitMQ management API answered ${res.status} (${where})`);
  return (await res.json()) as T;
}
