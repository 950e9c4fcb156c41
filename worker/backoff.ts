// Retry timing, pure: exponential backoff with full jitter (AWS architecture
// blog, "Exponential Backoff And Jitter"), capped, with a valid Retry-After
// taking precedence. The broker then rounds the delay *up* to a delay tier,
// so a job never runs before the instant computed here.

export interface BackoffPolicy {
  initialDelayMs: number;
  maxDelayMs: number;
}

/**
 * Delay before retry number `attempt` (1 = the first retry).
 * `random` is injectable so tests are deterministic.
 */
export function retryDelayMs(
  policy: BackoffPolicy,
  attempt: number,
  retryAfterMs: number | undefined,
  random: () => number = Math.random,
): number {
  if (retryAfterMs !== undefined) return retryAfterMs;
  const exp = policy.initialDelayMs * 2 ** Math.max(0, attempt - 1);
  const cap = Math.min(policy.maxDelayMs, exp);
  // Full jitter, but never below the initial delay: a retry at 0 ms would hammer
  // a dependency that just failed.
  return Math.max(policy.initialDelayMs, Math.min(cap, Math.floor(random() * cap)));
}

/** The standard ladder of delay-queue tiers, in seconds. */
const LADDER_S = [
  1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400,
];

/**
 * The delay tiers (ms) a worker declares as queues: the ladder between the
 * initial and maximum delay, plus both ends. Each tier is a queue whose TTL
 * dead-letters back to the work queue; one queue per fixed delay, because a
 * single queue with per-message TTLs only expires from its head and would hold
 * short delays behind long ones.
 */
export function delayTiersMs(policy: BackoffPolicy): number[] {
  const lo = Math.max(1000, policy.initialDelayMs);
  const hi = Math.max(lo, policy.maxDelayMs);
  const tiers = new Set<number>([lo, hi]);
  for (const s of LADDER_S) if (s * 1000 > lo && s * 1000 < hi) tiers.add(s * 1000);
  return [...tiers].sort((a, b) => a - b);
}

/**
 * The tier a delay waits in: the smallest tier at least as long (never early).
 * A delay longer than every tier waits in the longest; the worker then sees
 * the not-before header in the future and waits again, without spending an
 * attempt.
 */
export function tierFor(tiers: readonly number[], delayMs: number): number {
  for (const t of tiers) if (t >= delayMs) return t;
  return tiers[tiers.length - 1] ?? delayMs;
}
