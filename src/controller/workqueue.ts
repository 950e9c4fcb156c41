// A keyed work queue, in the manner of client-go's: keys, not events, so a
// burst of watch events for one object becomes one reconcile; duplicate keys
// merge; a key is never processed twice at once (an add while it runs marks
// it dirty and it runs again after); at most `concurrency` keys run; failures
// back off per key, exponentially, up to a cap. Unlike client-go's, a run's
// result replaces a requeue an earlier run asked for: the latest plan says
// when to look again (a requeue that outlived its reason planned once more).

export interface Timers {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const realTimers: Timers = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => {
    const t = setTimeout(fn, ms);
    t.unref();
    return t;
  },
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

export interface ProcessResult {
  /** run the key again after this long (e.g. to re-read queue age) */
  requeueAfterMs?: number;
  /** not run: the key waits its turn elsewhere (a creation window), and its backoff stands */
  deferred?: boolean;
}

export interface WorkQueueOptions {
  concurrency: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  timers?: Timers;
  onError?: (key: string, err: unknown, retryInMs: number) => void;
  /** a key queued (not merged into a pending one): workqueue_adds_total */
  onAdd?: () => void;
  /** a key taken off the queue after waiting `ms` since it was queued: workqueue_queue_duration_seconds */
  onStart?: (ms: number) => void;
}

export class WorkQueue {
  private readonly queue: string[] = [];
  /** served first: wake-ups of objects whose children exist (status transitions) */
  private readonly urgent: string[] = [];
  /** keys added urgent while they ran: they go back urgent */
  private readonly urgentAgain = new Set<string>();
  /** key → when it was queued, until it starts */
  private readonly dirty = new Map<string, number>();
  private readonly processing = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly delayed = new Map<string, { at: number; handle: unknown }>();
  private readonly idleWaiters: Array<() => void> = [];
  private process: ((key: string) => Promise<ProcessResult | void>) | undefined;
  private stopped = false;
  private readonly timers: Timers;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;

  constructor(private readonly opts: WorkQueueOptions) {
    this.timers = opts.timers ?? realTimers;
    this.baseDelayMs = opts.baseDelayMs ?? 500;
    this.maxDelayMs = opts.maxDelayMs ?? 5 * 60_000;
  }

  get length(): number {
    return this.queue.length + this.urgent.length;
  }

  /**
   * Queues the key (merged with a pending add). `urgent` ones are served
   * before the rest: during a mass create, the wake-up that turns a JobWorker
   * Healthy does not wait behind every first-time creation.
   */
  add(key: string, urgent = false): void {
    if (this.stopped) return;
    if (this.dirty.has(key)) {
      if (!urgent) return;
      if (this.processing.has(key)) this.urgentAgain.add(key);
      else {
        const i = this.queue.indexOf(key);
        if (i >= 0) {
          this.queue.splice(i, 1);
          this.urgent.push(key);
        }
      }
      return;
    }
    this.dirty.set(key, this.timers.now());
    this.opts.onAdd?.();
    if (this.processing.has(key)) {
      if (urgent) this.urgentAgain.add(key);
    } else {
      (urgent ? this.urgent : this.queue).push(key);
      this.pump();
    }
  }

  /** Adds the key after `ms`; an earlier pending add for the key wins. */
  addAfter(key: string, ms: number): void {
    if (this.stopped) return;
    if (ms <= 0) return this.add(key);
    const at = this.timers.now() + ms;
    const pending = this.delayed.get(key);
    if (pending && pending.at <= at) return;
    if (pending) this.timers.clearTimeout(pending.handle);
    const handle = this.timers.setTimeout(() => {
      this.delayed.delete(key);
      this.add(key);
    }, ms);
    this.delayed.set(key, { at, handle });
  }

  /** Backoff for a failed key: base × 2^failures, capped. */
  addRateLimited(key: string): number {
    const n = this.failures.get(key) ?? 0;
    this.failures.set(key, n + 1);
    const ms = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** n);
    this.addAfter(key, ms);
    return ms;
  }

  forget(key: string): void {
    this.failures.delete(key);
  }

  private cancelDelayed(key: string): void {
    const pending = this.delayed.get(key);
    if (!pending) return;
    this.timers.clearTimeout(pending.handle);
    this.delayed.delete(key);
  }

  start(process: (key: string) => Promise<ProcessResult | void>): void {
    this.process = process;
    this.pump();
  }

  /** Stops taking keys; resolves when the keys in progress are done. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const d of this.delayed.values()) this.timers.clearTimeout(d.handle);
    this.delayed.clear();
    this.queue.length = 0;
    this.urgent.length = 0;
    this.urgentAgain.clear();
    this.dirty.clear();
    await this.idle();
  }

  /** Resolves when nothing is queued or running (tests, shutdown). */
  idle(): Promise<void> {
    if (this.processing.size === 0 && (this.length === 0 || !this.process))
      return Promise.resolve();
    return new Promise((r) => this.idleWaiters.push(r));
  }

  private pump(): void {
    const process = this.process;
    if (!process) return;
    while (this.processing.size < this.opts.concurrency && this.length) {
      const key = (this.urgent.shift() ?? this.queue.shift()) as string;
      this.opts.onStart?.(this.timers.now() - (this.dirty.get(key) ?? this.timers.now()));
      this.dirty.delete(key);
      this.processing.add(key);
      void this.run(process, key);
    }
  }

  private async run(
    process: (key: string) => Promise<ProcessResult | void>,
    key: string,
  ): Promise<void> {
    try {
      const result = await process(key);
      if (!result?.deferred) {
        this.forget(key);
        this.cancelDelayed(key);
      }
      if (result?.requeueAfterMs !== undefined) this.addAfter(key, result.requeueAfterMs);
    } catch (err) {
      const ms = this.stopped ? 0 : this.addRateLimited(key);
      this.opts.onError?.(key, err, ms);
    } finally {
      this.processing.delete(key);
      // Added again while it ran: run it again, after the others already waiting.
      if (this.dirty.has(key) && !this.stopped)
        (this.urgentAgain.has(key) ? this.urgent : this.queue).push(key);
      this.urgentAgain.delete(key);
      this.pump();
      if (this.processing.size === 0 && this.length === 0) {
        for (const w of this.idleWaiters.splice(0)) w();
      }
    }
  }
}
