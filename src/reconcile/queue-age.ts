// The age of the oldest waiting message, pure: from the queue's statistics
// (src/signals/rabbitmq.ts reads them) and what earlier readings taught.
import type { Signals } from './scaling.js';

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
