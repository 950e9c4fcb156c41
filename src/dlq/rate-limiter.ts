// A token bucket: `ratePerSecond` on average, at most `burst` at once. Pure:
// the caller passes the time and does the waiting, so tests use a fake clock.
export class RateLimiter {
  private tokens: number;
  private last: number | undefined;

  constructor(
    private ratePerSecond: number,
    readonly burst: number,
  ) {
    checkRate(ratePerSecond);
    if (!(burst >= 1)) throw new Error(`burst must be at least 1, got ${burst}`);
    this.tokens = burst;
  }

  /** A new rate from `nowMs` on (the cap it comes from moved): what has refilled so far stays. */
  setRate(ratePerSecond: number, nowMs: number): void {
    checkRate(ratePerSecond);
    if (this.last !== undefined) {
      this.tokens = this.refilled(nowMs);
      this.last = nowMs;
    }
    this.ratePerSecond = ratePerSecond;
  }

  /** How long from `nowMs` until a token is there to take (0: now). Takes nothing. */
  due(nowMs: number): number {
    const short = 1 - this.refilled(nowMs);
    return short > 0 ? Math.ceil((short / this.ratePerSecond) * 1000) : 0;
  }

  /** Takes one token at `nowMs`; returns how long to wait first (0: go now). */
  take(nowMs: number): number {
    this.tokens = this.refilled(nowMs);
    this.last = nowMs;
    this.tokens -= 1;
    if (this.tokens >= 0) return 0;
    // In debt: the token is ours once the bucket refills to zero.
    return Math.ceil((-this.tokens / this.ratePerSecond) * 1000);
  }

  private refilled(nowMs: number): number {
    return this.last === undefined
      ? this.tokens
      : Math.min(this.burst, this.tokens + ((nowMs - this.last) / 1000) * this.ratePerSecond);
  }
}

function checkRate(ratePerSecond: number): void {
  if (!(ratePerSecond > 0))
    throw new Error(`rate must be above 0 per second, got ${ratePerSecond}`);
}
