// The age of the oldest waiting message, pure: from the queue's statistics
// (src/signals/rabbitmq.ts reads them), what the worker pods saw of the
// queue's head (src/signals/worker-metrics.ts reads them) and what earlier
// readings taught. docs/scaling.md gives each source's error bound.
import type { Signals } from './replicas.js';
import type { HeadReading, QueueStats } from '../model/index.js';

/**
 * HeadTimestamp: the broker's head message timestamp (classic queues).
 * DeliveryTimestamps: measured from the deliveries the workers receive.
 * Estimated: neither is available (no timestamps, no worker reporting).
 */
export type AgeSource = 'HeadTimestamp' | 'DeliveryTimestamps' | 'Estimated';

/** Why an age is estimated, when the reason is one the user can act on. */
export type EstimatedBecause = 'NoMessageTimestamps' | 'NoWorkerReports';

export interface QueueAge {
  signals: Extract<Signals, { ok: true }>;
  ageSource: AgeSource;
  estimatedBecause?: EstimatedBecause;
}

/** Remembers, per queue, what earlier readings showed. */
export interface AgeMemory {
  nonEmptySince?: number;
  /** we saw the queue empty, so nonEmptySince bounds every message's wait */
  sawEmpty?: boolean;
  /** the last reading whose statistics showed nothing ready (ms) */
  emptyAtMs?: number;
}

/**
 * A consumer with a free slot that has received nothing for this long means
 * nothing is ready: the broker hands a ready message to a consumer with room
 * within milliseconds (a quorum queue after its Raft commit).
 */
export const IDLE_MEANS_EMPTY_SECONDS = 0.5;

/**
 * How stale the management API's queue statistics may be: a quorum queue
 * reports its counts every quorum_tick_interval and the management plugin
 * collects them every collect_statistics_interval (5 s each by default).
 */
export const STATISTICS_LAG_SECONDS = 10;

/**
 * Age of the oldest waiting message, pure. With a head timestamp (classic
 * queues): now − it. Otherwise measured from the workers' deliveries (see
 * measuredAge). Where neither exists it is estimated: by Little's law the
 * head has waited about depth / arrival rate; and once we have seen the
 * queue empty, no message can have waited longer than it has been non-empty.
 */
export function queueAge(
  stats: QueueStats,
  nowMs: number,
  memory: AgeMemory,
  heads: HeadReading[] = [],
): { age: QueueAge; memory: AgeMemory } {
  const depth = stats.messagesReady;
  const base = {
    depth,
    unacked: stats.messagesUnacked,
    arrivalRate: stats.publishRate,
    completionRate: stats.ackRate,
  };
  const age = (oldestAgeSeconds: number, ageSource: AgeSource, why?: EstimatedBecause) => ({
    signals: { ok: true as const, oldestAgeSeconds, ...base },
    ageSource,
    ...(why && { estimatedBecause: why }),
  });
  const classic = stats.type === 'classic';
  const next: AgeMemory =
    depth === 0
      ? { sawEmpty: true, emptyAtMs: nowMs }
      : { ...memory, nonEmptySince: memory.nonEmptySince ?? nowMs };
  if (depth > 0 && stats.headMessageTimestamp)
    return {
      age: age(Math.max(0, nowMs / 1000 - stats.headMessageTimestamp), 'HeadTimestamp'),
      memory: next,
    };
  if (depth === 0 && classic) return { age: age(0, 'HeadTimestamp'), memory: next };
  const measured = measuredAge(depth, heads, nowMs, memory);
  if (typeof measured === 'number')
    return { age: age(measured, 'DeliveryTimestamps'), memory: next };
  if (depth === 0) return { age: age(0, 'Estimated', measured.why), memory: next };
  const waited = (nowMs - (next.nonEmptySince ?? nowMs)) / 1000;
  const little = stats.publishRate > 0 ? depth / stats.publishRate : undefined;
  const bounds = [little, next.sawEmpty ? waited : undefined].filter(
    (v): v is number => v !== undefined,
  );
  const oldest = bounds.length ? Math.min(...bounds) : waited;
  return { age: age(oldest, 'Estimated', measured.why), memory: next };
}

/**
 * The head's age from what the workers saw, or why it cannot be measured.
 * A FIFO queue hands over its head: the newest delivery's age was the head's
 * age when it arrived, and the head now is at most that + the time since
 * (later messages are younger). A consumer idle with room means nothing is
 * ready: 0. Statistics showing nothing ready, with no delivery for longer
 * than they can lag, mean the same (every consumer busy, nothing waiting).
 */
function measuredAge(
  depth: number,
  heads: HeadReading[],
  nowMs: number,
  memory: AgeMemory,
): number | { why: EstimatedBecause } {
  if (heads.some((h) => h.idleSeconds >= IDLE_MEANS_EMPTY_SECONDS)) return 0;
  const newest = heads.reduce<HeadReading | undefined>(
    (a, h) => (h.lastAtMs > (a?.lastAtMs ?? 0) ? h : a),
    undefined,
  );
  const newestUntimestamped = Math.max(0, ...heads.map((h) => h.lastUntimestampedAtMs));
  // The newest message came with no timestamp: a timed one before it says nothing of the head now.
  if (newestUntimestamped > (newest?.lastAtMs ?? 0)) return { why: 'NoMessageTimestamps' };
  if (!newest) return { why: 'NoWorkerReports' };
  const since = Math.max(0, (nowMs - newest.lastAtMs) / 1000);
  if (depth === 0 && since > STATISTICS_LAG_SECONDS) return 0;
  const bound = newest.lastAgeSeconds + since;
  // Messages that came while every consumer was full arrived after the
  // queue was last seen empty (less the statistics' lag).
  if (memory.emptyAtMs !== undefined && memory.emptyAtMs > newest.lastAtMs)
    return Math.min(bound, (nowMs - memory.emptyAtMs) / 1000 + STATISTICS_LAG_SECONDS);
  return bound;
}

/** Sustained this long above the objective (and above where it started), age is rising, not a blip. */
export const RISE_SUSTAIN_MS = 10_000;

/**
 * Queue age past the objective and above where it started by more than one
 * reading's resolution: the broker's message timestamps are whole seconds,
 * so a fleet already over its objective that holds steady (6 s, then 6.4 s)
 * is not rising, and a revision is not rolled back for it.
 */
export function ageRising(
  age: number | undefined,
  objectiveSeconds: number,
  atStart = 0,
): age is number {
  return age !== undefined && age > objectiveSeconds && age > atStart + 1;
}
