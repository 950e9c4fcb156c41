// One lease keeper per worker: every claim this process holds is renewed in
// one statement per tick (not a timer and a round trip per delivery). A
// claim whose row was not renewed was taken over: its handler's signal
// aborts. Each claim also knows, on this process's clock, until when its
// lease is confirmed: ctx.intend and ctx.step refuse to let a run make its
// call after that, and a run whose renewals keep failing past it is aborted
// (another worker may take the key over by then).
import type { ClaimStore } from './claim-store.js';
import { ClaimLost } from './in-doubt/index.js';

/** what a lost lease aborts (the handler's RunSignal) */
interface Abortable {
  abort(reason: unknown): void;
}

interface Held {
  owner: string;
  lost: Abortable;
  /** local ms: the lease holds at least until then (measured from before the statement that set it) */
  confirmedUntil: number;
  /** its run was told that the lease ran out */
  told?: boolean;
}

export class LeaseKeeper {
  private readonly held = new Map<string, Held>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly store: Pick<ClaimStore, 'renewAll'>,
    private readonly leaseSeconds: number,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Keeps `key`'s lease alive until `release`; aborts `lost` if the claim is
   * taken over or cannot be renewed in time. `claimedAt`: local time just
   * before the claim's statement was sent.
   */
  hold(key: string, owner: string, lost: Abortable, claimedAt: number): void {
    this.held.set(key, { owner, lost, confirmedUntil: claimedAt + this.leaseSeconds * 1000 });
    // A third of the lease: two missed ticks (a store blip) still leave it held.
    this.timer ??= setInterval(
      () => void this.renew(),
      Math.max(1000, (this.leaseSeconds * 1000) / 3),
    ).unref();
  }

  /** Until when (local ms) `key`'s lease is confirmed for `owner`; undefined when not held. */
  confirmedUntil(key: string, owner: string): number | undefined {
    const h = this.held.get(key);
    return h?.owner === owner ? h.confirmedUntil : undefined;
  }

  release(key: string, owner: string): void {
    if (this.held.get(key)?.owner === owner) this.held.delete(key);
    if (this.held.size === 0) this.stop();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private async renew(): Promise<void> {
    const sent = this.now();
    this.abortExpired(sent);
    const entries = [...this.held];
    let kept: Set<string>;
    try {
      kept = await this.store.renewAll(
        entries.map(([key, h]) => ({ key, owner: h.owner })),
        this.leaseSeconds,
      );
    } catch {
      // a store blip: the next tick retries; the lease has slack for two misses
      this.abortExpired(this.now());
      return;
    }
    for (const [key, h] of entries) {
      if (this.held.get(key) !== h) continue;
      if (kept.has(key)) h.confirmedUntil = sent + this.leaseSeconds * 1000;
      else h.lost.abort(new ClaimLost('claim lease lost: another worker took the key over'));
    }
  }

  /** Runs whose lease is no longer confirmed are told: another worker may take them over now. */
  private abortExpired(now: number): void {
    for (const h of this.held.values()) {
      if (now < h.confirmedUntil || h.told) continue;
      h.told = true;
      h.lost.abort(new ClaimLost('claim lease could not be renewed before it ran out'));
    }
  }
}
