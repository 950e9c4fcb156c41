// The ack journal's writer: acks are noted in memory and handed to the claim
// store at the end of the turn, where they ride with the next group-commit
// statement (no commit of their own) or go by themselves after `rideMs`. One
// write at a time, so that no statement carries more than `maxBatch` journal
// rows, however many piled up while the store was down. A crash loses the
// unwritten tail — acceptable for evidence, which is all the journal is: the
// durable record was written before the ack.
import type { AckEntry, ClaimStore } from './claim-store.js';
import { isMessageDataError } from './store-errors.js';

/** Entries kept while the store is down; past this the oldest are dropped. */
const MAX_PENDING = 10_000;

export class AckJournal {
  private pending: AckEntry[] = [];
  private scheduled = false;
  /** the write in flight, if any */
  private writing: Promise<void> | undefined;
  /** set while waiting to try again after a failed write */
  private retry: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly store: Pick<ClaimStore, 'journalAcks' | 'sendRiders'>,
    private readonly onError: (err: unknown) => void,
    /** told of entries given up: past MAX_PENDING, or refused by PostgreSQL as they are */
    private readonly onDropped: (n: number) => void,
    private readonly rideMs = 200,
    private readonly maxBatch = 500,
  ) {}

  note(entry: AckEntry): void {
    this.pending.push(entry);
    if (this.pending.length > MAX_PENDING) {
      this.onDropped(this.pending.length - MAX_PENDING);
      this.pending.splice(0, this.pending.length - MAX_PENDING);
    }
    this.schedule();
  }

  /**
   * Writes what is pending now, without riding, and stops retrying: the
   * worker is stopping. A write that fails here ends it (the store is down:
   * what is left goes with the process, counted as dropped). Answers how
   * many entries were left unwritten.
   */
  async close(): Promise<number> {
    this.closed = true;
    clearTimeout(this.retry);
    this.retry = undefined;
    for (;;) {
      if (this.writing) {
        this.store.sendRiders(); // what already rides goes now, not after its wait
        await this.writing;
      }
      const before = this.pending.length;
      if (before === 0) return 0;
      this.write(0);
      await this.writing;
      if (this.pending.length >= before) {
        this.onDropped(before); // they go with the process
        return before;
      }
    }
  }

  /** no write in flight, none waiting to be tried again, not stopping */
  private idle(): boolean {
    return !this.writing && !this.retry && !this.closed;
  }

  private schedule(): void {
    if (this.scheduled || !this.idle()) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      if (this.idle()) this.write(this.rideMs);
    });
  }

  private write(waitMs: number): void {
    if (this.pending.length === 0) return;
    const batch = this.pending.splice(0, this.maxBatch);
    this.writing = this.store.journalAcks(batch, waitMs).then(
      () => {
        this.writing = undefined;
        if (this.pending.length) this.schedule();
      },
      (err: unknown) => {
        this.writing = undefined;
        this.onError(err);
        // A batch PostgreSQL refuses as it is would fail every statement it rode with.
        if (isMessageDataError(err)) {
          this.onDropped(batch.length);
          this.schedule();
          return;
        }
        this.pending.unshift(...batch); // the store is likely down: try again later, oldest first
        if (this.closed) return;
        this.retry = setTimeout(() => {
          this.retry = undefined;
          this.schedule();
        }, 5 * this.rideMs).unref();
      },
    );
  }
}
