// The ack journal's writer: acks are noted in memory and handed to the claim
// store at the end of the turn, where they ride with the next group-commit
// statement (no commit of their own) or go by themselves after `rideMs`. A
// crash loses the unwritten tail — acceptable for evidence, which is all the
// journal is: the durable record was written before the ack.
import type { AckEntry, ClaimStore } from './claim-store.js';

/** Entries kept while the store is down; past this the oldest are dropped. */
const MAX_PENDING = 10_000;

export class AckJournal {
  private pending: AckEntry[] = [];
  private scheduled = false;
  /** set while waiting to try again after a failed write */
  private retry: NodeJS.Timeout | undefined;
  private readonly writing = new Set<Promise<void>>();
  dropped = 0;

  constructor(
    private readonly store: Pick<ClaimStore, 'journalAcks'>,
    private readonly onError: (err: unknown) => void,
    private readonly rideMs = 200,
    private readonly maxBatch = 500,
  ) {}

  note(entry: AckEntry): void {
    this.pending.push(entry);
    if (this.pending.length > MAX_PENDING) {
      this.dropped += this.pending.length - MAX_PENDING;
      this.pending.splice(0, this.pending.length - MAX_PENDING);
    }
    if (this.scheduled || this.retry) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      if (!this.retry) this.send(this.rideMs); // after a failure, the retry sends them
    });
  }

  /** Writes what is pending now, without riding, and waits for every write under way. */
  async flush(): Promise<void> {
    clearTimeout(this.retry);
    this.retry = undefined;
    this.send(0);
    while (this.writing.size) await Promise.all(this.writing);
  }

  private send(waitMs: number): void {
    while (this.pending.length) {
      const batch = this.pending.splice(0, this.maxBatch);
      const write: Promise<void> = this.store.journalAcks(batch, waitMs).then(
        () => undefined,
        (err: unknown) => {
          // kept for the next try, oldest first; the store is likely down
          this.pending.unshift(...batch);
          this.onError(err);
          this.retry ??= setTimeout(() => {
            this.retry = undefined;
            this.send(this.rideMs);
          }, 5 * this.rideMs).unref();
        },
      );
      this.writing.add(write);
      void write.finally(() => this.writing.delete(write));
    }
  }
}
