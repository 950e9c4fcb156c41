// One lease keeper per worker: every claim this process holds is renewed in
// one statement per tick (not a timer and a round trip per delivery). A
// claim whose row was not renewed was taken over: its handler's signal aborts.
import type { ClaimStore } from './claim-store.js';

/** what a lost lease aborts (the handler's RunSignal) */
interface Abortable {
  abort(reason: unknown): void;
}

interface Held {
  owner: string;
  lost: Abortable;
}

export class LeaseKeeper {
  private readonly held = new Map<string, Held>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly store: ClaimStore,
    private readonly leaseSeconds: number,
  ) {}

  /** Keeps `key`'s lease alive until `release`; aborts `lost` if the claim is taken over. */
  hold(key: string, owner: string, lost: Abortable): void {
    this.held.set(key, { owner, lost });
    // A third of the lease: two missed ticks (a store blip) still leave it held.
    this.timer ??= setInterval(
      () => void this.renew(),
      Math.max(1000, (this.leaseSeconds * 1000) / 3),
    ).unref();
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
    const entries = [...this.held];
    let kept: Set<string>;
    try {
      kept = await this.store.renewAll(
        entries.map(([key, h]) => ({ key, owner: h.owner })),
        this.leaseSeconds,
      );
    } catch {
      return; // a store blip: the next tick retries; the lease has slack for two misses
    }
    for (const [key, h] of entries) {
      if (!kept.has(key) && this.held.get(key) === h) h.lost.abort(new Error('claim lease lost'));
    }
  }
}
