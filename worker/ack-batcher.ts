// Acks of one channel, sent at the end of the event-loop turn in as few
// frames as possible. RabbitMQ's basic.ack with `multiple` acknowledges every
// outstanding delivery up to its tag, so a run of consecutive settled
// deliveries (a group-commit batch, typically) costs one frame for the
// worker to write and one for the broker to process. A delivery still
// running is never inside such a run: the run stops at the first one.

/** sends one ack frame: `upTo` acks every outstanding delivery tag ≤ `tag` */
export type SendAck = (tag: number, upTo: boolean) => void;

export class AckBatcher {
  /** delivery tags not yet known to be settled, in order (the broker's order) */
  private open: number[] = [];
  private head = 0;
  /** settled tags still in `open`: true = ack not sent yet; false = settled already (alone, or requeued) */
  private readonly settled = new Map<number, boolean>();
  private pending: number[] = [];
  private scheduled = false;

  constructor(private readonly send: SendAck) {}

  delivered(tag: number): void {
    this.open.push(tag);
  }

  /** The delivery's record is durable: ack it, at the end of this turn. */
  ack(tag: number): void {
    this.settled.set(tag, true);
    this.pending.push(tag);
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => this.flush());
  }

  /** The delivery was settled by another frame (a requeue): a later multiple ack may span it. */
  settledElsewhere(tag: number): void {
    this.settled.set(tag, false);
  }

  /** Sends what is pending now (also before the channel closes). */
  flush(): void {
    this.scheduled = false;
    if (this.pending.length === 0) return;
    const pending = this.pending;
    this.pending = [];
    // The longest run of settled deliveries from the oldest: one frame.
    let upTo = -1;
    let acks = 0;
    while (this.head < this.open.length) {
      const tag = this.open[this.head] as number;
      const state = this.settled.get(tag);
      if (state === undefined) break;
      if (state) {
        upTo = tag;
        acks++;
      }
      this.settled.delete(tag);
      this.head++;
    }
    if (upTo >= 0) this.send(upTo, acks > 1);
    // The rest, behind a delivery still running: one by one.
    for (const tag of pending) {
      if (tag <= upTo) continue;
      this.send(tag, false);
      this.settled.set(tag, false);
    }
    if (this.head > 1024 && this.head * 2 > this.open.length) {
      this.open = this.open.slice(this.head);
      this.head = 0;
    }
  }
}
