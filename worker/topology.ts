// The queues a worker uses, pure: the work queue, one delay queue per retry
// tier (its TTL dead-letters back to the work queue), the dead-letter
// quarantine, and on quorum queues the queue the broker's delivery limit
// dead-letters into. Declared idempotently at every (re)connect.
import { delayTiersMs } from './backoff.js';

export interface QueueDecl {
  name: string;
  options: { durable: true; arguments: Record<string, unknown> };
}

export interface Topology {
  work: QueueDecl;
  deadLetter: QueueDecl;
  /** delay tier (ms) → its queue */
  tiers: Map<number, QueueDecl>;
  /**
   * Quorum only: where the broker puts a message it has delivered
   * DELIVERY_LIMIT times without an ack. Workers consume it and quarantine
   * each message as a `delivery_limit` dead letter, so the broker never drops one.
   */
  overLimit?: QueueDecl;
}

export interface TopologyInput {
  queue: string;
  deadLetterQueue: string;
  queueType: 'classic' | 'quorum';
  initialDelaySeconds: number;
  maxDelaySeconds: number;
  /** the broker's major version (from the connection), where it changes a declaration */
  brokerMajor?: number;
}

/**
 * Deliveries of one message a quorum work queue allows before it gives the
 * message up (RabbitMQ 4.0's default, set explicitly so that 3.x behaves the
 * same). The worker's own paths spend none of it: a claim-store outage holds
 * deliveries instead of returning them, so only crashes, lost connections and
 * drain aborts count.
 */
export const DELIVERY_LIMIT = 20;

export function tierQueueName(queue: string, tierMs: number): string {
  return `${queue}.retry.${Math.round(tierMs / 1000)}s`;
}

export function overLimitQueueName(queue: string): string {
  return `${queue}.delivery-limit`;
}

// Quorum queues can dead-letter at-least-once (RabbitMQ 3.10+), so a broker
// crash mid-transfer cannot lose the message; it needs reject-publish
// overflow. Classic queues only offer at-most-once here; docs/worker.md says so.
const atLeastOnce = { 'x-dead-letter-strategy': 'at-least-once', 'x-overflow': 'reject-publish' };

export function topology(c: TopologyInput): Topology {
  const quorum = c.queueType === 'quorum';
  const type = { 'x-queue-type': c.queueType };
  const tiers = new Map<number, QueueDecl>();
  for (const ms of delayTiersMs({
    initialDelayMs: c.initialDelaySeconds * 1000,
    maxDelayMs: c.maxDelaySeconds * 1000,
  })) {
    tiers.set(ms, {
      name: tierQueueName(c.queue, ms),
      options: {
        durable: true,
        arguments: {
          ...type,
          'x-message-ttl': ms,
          'x-dead-letter-exchange': '',
          'x-dead-letter-routing-key': c.queue,
          ...(quorum ? atLeastOnce : {}),
        },
      },
    });
  }
  const overLimit = overLimitQueueName(c.queue);
  const work = quorum
    ? {
        ...type,
        'x-delivery-limit': DELIVERY_LIMIT,
        'x-dead-letter-exchange': '',
        'x-dead-letter-routing-key': overLimit,
        ...atLeastOnce,
      }
    : type;
  // RabbitMQ 4 gives every quorum queue a delivery limit of 20 and drops what
  // passes it when there is no dead-letter target; -1 turns it off. On 3.x
  // there is no default limit, and -1 would drop a message at its first return.
  const unlimited = quorum && (c.brokerMajor ?? 4) >= 4 ? { 'x-delivery-limit': -1 } : {};
  return {
    work: { name: c.queue, options: { durable: true, arguments: work } },
    deadLetter: {
      name: c.deadLetterQueue,
      options: { durable: true, arguments: { ...type, ...unlimited } },
    },
    tiers,
    ...(quorum
      ? {
          overLimit: {
            name: overLimit,
            options: { durable: true, arguments: { ...type, ...unlimited } },
          },
        }
      : {}),
  };
}
