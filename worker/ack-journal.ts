// The ack journal's writer: acks are noted in memory and written in batches
// (one statement per flush), so the journal costs no round trip per job. A
// crash loses the unflushed tail — acceptable for evidence, which is all the
// journal is: the durable record was written before the ack.
import type { AckEntry, ClaimStore } from './claim-store.js';

/** Entries kept while the store is down; past this the oldest are dropped. */
const MAX_PENDING = 10_000;

export class AckJournal {
  private pending: AckEntry[] = [];
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  dropped = 0;

  constructor(
    private readonly store: ClaimStore,
    private readonly onError: (err: unknown) => void,
    private readonly flushMs = 200,
    private readonly maxBatch = 500,
  ) {}

  note(entry: AckEntry): void {
    this.pending.push(entry);
    if (this.pending.length > MAX_PENDING) {
      this.dropped += this.pending.length - MAX_PENDING;
      this.pending.splice(0, this.pending.length - MAX_PENDING);
    }
    if (this.pending.length >= this.maxBatch) void this.flush();
    else this.timer ??= setTimeout(() => void this.flush(), this.flushMs).unref();
  }

  /** Writes what is pending; a failed batch is kept for the next flush. */
  flush(): Promise<void> {
    this.flushing ??= this.write().finally(() => {
      this.flushing = undefined;
    });
    return this.flushing;
  }

  private async write(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    while (this.pending.length) {
      const batch = this.pending.splice(0, this.maxBatch);
      try {
        await this.store.journalAcks(batch);
      } catch (err) {
        this.pending.unshift(...batch);
        this.onError(err);
        this.timer ??= setTimeout(() => void this.flush(), 5 * this.flushMs).unref();
        return;
      }
    }
  }
}
