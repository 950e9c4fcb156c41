// The queues a worker uses, pure: the work queue, one delay queue per retry
// tier (its TTL dead-letters back to the work queue), and the dead-letter
// quarantine. Declared idempotently at every (re)connect.
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
}

export interface TopologyInput {
  queue: string;
  deadLetterQueue: string;
  queueType: 'classic' | 'quorum';
  initialDelaySeconds: number;
  maxDelaySeconds: number;
}

export function tierQueueName(queue: string, tierMs: number): string {
  return `${queue}.retry.${Math.round(tierMs / 1000)}s`;
}

export function topology(c: TopologyInput): Topology {
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
          // Quorum queues can dead-letter at-least-once (RabbitMQ 3.10+), so a
          // broker crash mid-transfer cannot lose a scheduled retry. Classic
          // queues only offer at-most-once here; docs/worker.md says so.
          ...(c.queueType === 'quorum'
            ? { 'x-dead-letter-strategy': 'at-least-once', 'x-overflow': 'reject-publish' }
            : {}),
        },
      },
    });
  }
  return {
    work: { name: c.queue, options: { durable: true, arguments: type } },
    deadLetter: { name: c.deadLetterQueue, options: { durable: true, arguments: type } },
    tiers,
  };
}
