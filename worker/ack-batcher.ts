// Acks of one channel, sent at the end of the event-loop turn in as few
// frames as possible. RabbitMQ's basic.ack with `multiple` acknowledges every
// outstanding delivery up to its tag, so a run of consecutive settled
// deliveries (a group-commit batch, typically) costs one frame for the
// worker to write and one for the broker to process. A delivery still
// running is never inside such a run: the run stops at the first one.
//
// Only the running deliveries are remembered (at most the prefetch), never
// the settled ones: a handler that hangs for hours while the rest of the
// channel goes on must not make this grow with every job acked behind it.

/** sends one ack frame: `upTo` acks every outstanding delivery tag ≤ `tag` */
export type SendAck = (tag: number, upTo: boolean) => void;

export class AckBatcher {
  /** deliveries not settled yet; tags arrive in increasing order, so the first is the oldest */
  private readonly running = new Set<number>();
  private pending: number[] = [];
  private scheduled = false;

  constructor(private readonly send: SendAck) {}

  /** deliveries remembered (running ones), for tests */
  get tracked(): number {
    return this.running.size;
  }

  delivered(tag: number): void {
    this.running.add(tag);
  }

  /** The delivery's record is durable: ack it, at the end of this turn. */
  ack(tag: number): void {
    this.running.delete(tag);
    this.pending.push(tag);
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => this.flush());
  }

  /** The delivery was settled by another frame (a requeue): a later multiple ack may span it. */
  settledElsewhere(tag: number): void {
    this.running.delete(tag);
  }

  /** Sends what is pending now (also before the channel closes). */
  flush(): void {
    this.scheduled = false;
    if (this.pending.length === 0) return;
    const pending = this.pending;
    this.pending = [];
    // Every delivery older than the oldest running one is settled: the
    // pending acks below it go as one frame, up to the highest of them (a
    // tag still outstanding, as the broker requires).
    const oldestRunning = this.running.values().next().value ?? Infinity;
    let upTo = -1;
    let below = 0;
    for (const tag of pending) {
      if (tag < oldestRunning) {
        below++;
        if (tag > upTo) upTo = tag;
      }
    }
    if (upTo >= 0) this.send(upTo, below > 1);
    // The rest, behind a delivery still running: one by one.
    for (const tag of pending) if (tag > oldestRunning) this.send(tag, false);
  }
}
