// Typed errors steer a failed delivery: Permanent goes to the dead-letter
// queue now, Throttled retries no earlier than its Retry-After, anything else
// retries with jittered exponential backoff.

/** The job can never succeed as sent (bad input, a refused business rule): dead-letter now. */
export class Permanent extends Error {
  override readonly name = 'Permanent';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** The downstream asked us to slow down. `retryAfterMs` (when known) wins over computed backoff. */
export class Throttled extends Error {
  override readonly name = 'Throttled';
  readonly retryAfterMs: number | undefined;
  constructor(message: string, options: { retryAfterMs?: number; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.retryAfterMs = options.retryAfterMs;
  }

  /**
   * Maps an HTTP response to a Throttled error for 429 and 503, reading its
   * Retry-After header (seconds or HTTP date); returns undefined otherwise.
   */
  static fromResponse(
    res: { status: number; headers: { get(name: string): string | null } },
    now: number = Date.now(),
  ): Throttled | undefined {
    if (res.status !== 429 && res.status !== 503) return undefined;
    const retryAfterMs = parseRetryAfter(res.headers.get('retry-after'), now);
    return new Throttled(`downstream answered ${res.status}`, { retryAfterMs });
  }
}

/** Retry-After values we refuse to honour (a day or more) are treated as absent. */
export const MAX_RETRY_AFTER_MS = 24 * 3600 * 1000;

/**
 * Parses an HTTP Retry-After value: delta-seconds or an HTTP date. Returns
 * milliseconds from `now`, or undefined when absent, malformed, or absurd.
 */
export function parseRetryAfter(value: string | null | undefined, now: number): number | undefined {
  if (value == null) return undefined;
  const v = value.trim();
  if (v === '') return undefined;
  let ms: number;
  if (/^\d+$/.test(v)) {
    ms = Number(v) * 1000;
  } else {
    // An HTTP date names its month ("Sun, 29 Nov 2026 12:00:30 GMT"); without
    // letters, Date.parse would read "-5" or "1.5" as years.
    if (!/[A-Za-z]{3}/.test(v)) return undefined;
    const at = Date.parse(v);
    if (Number.isNaN(at)) return undefined;
    ms = Math.max(0, at - now);
  }
  return ms <= MAX_RETRY_AFTER_MS ? ms : undefined;
}
