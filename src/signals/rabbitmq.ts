// Queue signals from the RabbitMQ management API: depth, rates and the head
// message's timestamp (classic queues; src/reconcile/scaling/queue-age.ts turns them
// into the age of the oldest waiting message).
import type { QueueStats } from '../reconcile/model/index.js';
import { brokerUrls } from '../../worker/broker-urls.js';
import { overLimitQueueName } from '../../worker/topology.js';

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

/** The vhost an amqp(s) URL names ("/" when its path is empty); of a cluster's list, the first's. */
export function vhostOf(amqpUrl: string): string {
  const path = new URL(brokerUrls(amqpUrl)[0] ?? amqpUrl).pathname.replace(/^\//, '');
  return path === '' ? '/' : decodeURIComponent(path);
}

export class ManagementApiError extends Error {
  override readonly name = 'ManagementApiError';
}

/** The management API has no such path or object (a newer API's path on an older broker). */
export class ManagementNotFound extends ManagementApiError {}

/** The management API refused the credentials (for everything, or for what needs another tag). */
export class ManagementRefused extends ManagementApiError {}

export async function fetchQueueStats(
  mgmtUrl: string,
  vhost: string,
  queue: string,
  timeoutMs = 5000,
): Promise<QueueStats> {
  const q = await managementGet<ManagementQueue>(
    mgmtUrl,
    `/api/queues/${encodeURIComponent(vhost)}/${encodeURIComponent(queue)}`,
    `queue "${queue}" in vhost "${vhost}"`,
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

/**
 * Messages in the work queue, its retry tiers (`<queue>.retry.*`) and its
 * delivery-limit queue, ready or unacked: what must be zero before an
 * idempotency-key rule may change.
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
    `vhost "${vhost}"`,
    timeoutMs,
  );
  return queues
    .filter(
      (q) =>
        q.name === queue ||
        q.name === overLimitQueueName(queue) ||
        q.name.startsWith(`${queue}.retry.`),
    )
    .reduce((n, q) => n + (q.messages ?? 0), 0);
}

/**
 * GET from the management API. The URL's credentials go into a header (fetch
 * refuses them in the URL) and never into an error message. `mgmtUrls` may
 * list a cluster's nodes, separated by commas: each is tried in turn until
 * one answers, so a lost node does not blind the operator.
 */
export async function managementGet<T>(
  mgmtUrls: string,
  path: string,
  what: string,
  timeoutMs: number,
): Promise<T> {
  const urls = mgmtUrls
    .split(',')
    .map((u) => u.trim())
    .filter(Boolean);
  let unreachable: ManagementApiError | undefined;
  for (const url of urls) {
    try {
      return await managementGetOne<T>(url, path, what, timeoutMs);
    } catch (err) {
      if (!(err instanceof Unreachable)) throw err;
      unreachable = err;
    }
  }
  throw unreachable ?? new ManagementApiError('no RabbitMQ management URL given');
}

class Unreachable extends ManagementApiError {}

async function managementGetOne<T>(
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
    throw new Unreachable(`RabbitMQ management API unreachable at ${where} (${cause})`);
  }
  if (res.status === 401)
    throw new ManagementRefused(
      `RabbitMQ management API refused the credentials from the Secret (${where})`,
    );
  if (res.status === 404)
    throw new ManagementNotFound(`not found through the management API (${where})`);
  if (res.status >= 500)
    throw new Unreachable(`RabbitMQ management API answered ${res.status} (${where})`);
  if (!res.ok)
    throw new ManagementApiError(`RabbitMQ management API answered ${res.status} (${where})`);
  return (await res.json()) as T;
}
