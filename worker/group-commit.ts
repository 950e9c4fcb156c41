// Group commit: what concurrent deliveries ask of the store at about the same
// time goes as one multi-row statement. A batch is sent at the end of the
// event-loop turn in which its first item arrived (an idle worker waits for
// nothing), and while a batch is in flight the next one gathers — so under
// load batches grow to what the store's round trip lets pile up, and one
// PostgreSQL commit carries many jobs. An item that may wait (a rider: the
// ack journal) sends nothing by itself: it goes with the next statement, or
// alone once its wait is over.

export interface GroupCommitOptions {
  /** most items per statement */
  maxBatch: number;
  /** statements in flight at once (each holds a pool connection) */
  maxInFlight: number;
}

interface Waiting<I, O> {
  item: I;
  /** a rider: it may wait for a statement that goes anyway */
  rides: boolean;
  resolve: (o: O) => void;
  reject: (err: unknown) => void;
}

export class GroupCommit<I, O> {
  private queue: Array<Waiting<I, O>> = [];
  /** keys of the items in statements in flight */
  private readonly busy = new Set<string>();
  private scheduled = false;
  private inFlight = 0;
  /** items in `queue` that want a statement this turn (not riders) */
  private urgent = 0;
  /** the riders' wait is over: they want a statement too */
  private ridersDue = false;
  private riderTimer: NodeJS.Timeout | undefined;
  private riderDeadline = 0;
  /** statements sent, and items they carried (bench figures) */
  readonly stats = { batches: 0, items: 0 };

  /**
   * `run` answers every item of a batch, in order; when it throws, every
   * item of that batch fails with the error (none is half-done: one
   * statement) — unless `alone(err)` says the error may be one item's own
   * (a value the store refuses): then each item is tried by itself, so
   * only that item fails. `keyOf` keeps two items with the same key out of
   * one statement, and out of two in flight at once: the second waits until
   * the first's statement returned, and sees what it did.
   */
  constructor(
    private readonly run: (items: I[]) => Promise<O[]>,
    private readonly opts: GroupCommitOptions & {
      /** undefined: the item has no key (it may share a statement with anything) */
      keyOf?: (item: I) => string | undefined;
      alone?: (err: unknown) => boolean;
    },
  ) {}

  /**
   * `waitMs` > 0 makes the item a rider: it joins the next statement that
   * goes for other items, or goes by itself after `waitMs`.
   */
  submit(item: I, waitMs = 0): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      const rides = waitMs > 0;
      this.queue.push({ item, rides, resolve, reject });
      if (!rides) this.urgent++;
      else this.rideFor(waitMs);
      this.schedule();
    });
  }

  /** The riders waiting now go with the next statement, which goes at once (a stop's last write). */
  sendRiders(): void {
    this.ridersDue = true;
    this.schedule();
  }

  /** Arms the riders' timer for the earliest wait of those queued. */
  private rideFor(waitMs: number): void {
    const deadline = performance.now() + waitMs;
    if (this.ridersDue || (this.riderTimer && deadline >= this.riderDeadline)) return;
    clearTimeout(this.riderTimer);
    this.riderDeadline = deadline;
    this.riderTimer = setTimeout(() => {
      this.riderTimer = undefined;
      this.ridersDue = true;
      this.schedule();
    }, waitMs).unref();
  }

  private wanted(): boolean {
    return this.urgent > 0 || (this.ridersDue && this.queue.length > 0);
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight >= this.opts.maxInFlight || !this.wanted()) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    if (this.inFlight >= this.opts.maxInFlight || !this.wanted()) return;
    const batch: Array<Waiting<I, O>> = [];
    const later: Array<Waiting<I, O>> = [];
    const keys: string[] = [];
    for (const w of this.queue) {
      const key = this.opts.keyOf?.(w.item);
      if (batch.length < this.opts.maxBatch && (key === undefined || !this.busy.has(key))) {
        batch.push(w);
        if (key !== undefined) {
          this.busy.add(key);
          keys.push(key);
        }
      } else later.push(w);
    }
    this.queue = later;
    if (batch.length === 0) return; // every waiting key is in flight: its statement's end reschedules
    this.urgent = later.reduce((n, w) => n + (w.rides ? 0 : 1), 0);
    if (!later.some((w) => w.rides)) {
      // every rider goes with this statement
      clearTimeout(this.riderTimer);
      this.riderTimer = undefined;
      this.ridersDue = false;
    }
    this.inFlight++;
    this.stats.batches++;
    this.stats.items += batch.length;
    this.schedule(); // a second statement may go while this one is in flight
    try {
      const out = await this.run(batch.map((w) => w.item));
      batch.forEach((w, i) => w.resolve(out[i] as O));
    } catch (err) {
      if (batch.length > 1 && this.opts.alone?.(err)) await this.oneByOne(batch);
      else for (const w of batch) w.reject(err);
    } finally {
      for (const k of keys) this.busy.delete(k);
      this.inFlight--;
      this.schedule();
    }
  }

  private async oneByOne(batch: Array<Waiting<I, O>>): Promise<void> {
    for (const w of batch) {
      try {
        const [out] = await this.run([w.item]);
        w.resolve(out as O);
      } catch (err) {
        w.reject(err);
      }
    }
  }
}
