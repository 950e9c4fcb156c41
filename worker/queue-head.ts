// What a worker sees of its queue's head, for the operator's measured age
// (docs/scaling.md): each delivery's age when the broker handed it over, and
// how long the consumer has had room for more while the broker sent nothing.
// A FIFO queue hands over its head, so the newest delivery's age is the head's
// age at that instant; a consumer with free prefetch slots that gets nothing
// means nothing is waiting.
import type { MessageProperties } from 'amqplib';

/**
 * The header RabbitMQ's timestamp interceptor adds (3.12+,
 * `message_interceptors.incoming.set_header_timestamp.overwrite = false`),
 * in milliseconds; our publish() and the worker's retry copies set it too.
 */
export const TIMESTAMP_MS_HEADER = 'timestamp_in_ms';

/**
 * When the message entered the queue, in ms: the `timestamp_in_ms` header,
 * or else the AMQP `timestamp` property (whole seconds); undefined without
 * either. A retry copy carries its due time in both, so it counts as waiting
 * only from then on.
 */
export function enteredQueueAt(
  props: Partial<Pick<MessageProperties, 'headers' | 'timestamp'>>,
): number | undefined {
  const ms = Number(props.headers?.[TIMESTAMP_MS_HEADER]);
  if (Number.isFinite(ms) && ms > 0) return ms;
  const s = Number(props.timestamp);
  return Number.isFinite(s) && s > 0 ? s * 1000 : undefined;
}

export interface HeadSnapshot {
  /** the newest delivery that carried a timestamp: its age when it arrived (s), and when (ms) */
  lastAgeSeconds: number;
  lastAtMs: number;
  /** the newest delivery without any timestamp: when (ms; 0 = none) */
  lastUntimestampedAtMs: number;
  /** how long the consumer has had a free prefetch slot and received nothing (s; 0 while full or not consuming) */
  idleSeconds: number;
}

/** Tracks one work-queue consumer: its deliveries in hand against its prefetch. */
export class HeadWatch {
  private on = false;
  private inHand = 0;
  private idleSince: number | undefined;
  private lastAgeMs = 0;
  private lastAtMs = 0;
  private lastUntimestampedAtMs = 0;

  constructor(
    private readonly prefetch: number,
    private readonly now: () => number,
  ) {}

  /** A new consumer (a new channel: deliveries of the old one no longer count against its prefetch), or none. */
  consuming(on: boolean): void {
    this.on = on;
    this.inHand = 0;
    this.idleSince = on ? this.now() : undefined;
  }

  /** A work-queue delivery arrived; false when it carried no timestamp. */
  delivered(props: Partial<Pick<MessageProperties, 'headers' | 'timestamp'>>): boolean {
    const now = this.now();
    this.inHand++;
    this.idleSince = this.inHand < this.prefetch ? now : undefined;
    const entered = enteredQueueAt(props);
    if (entered === undefined) {
      this.lastUntimestampedAtMs = now;
      return false;
    }
    this.lastAtMs = now;
    this.lastAgeMs = Math.max(0, now - entered);
    return true;
  }

  /** A delivery of the current consumer left our hands (acked or returned). */
  settled(): void {
    if (this.inHand > 0) this.inHand--;
    if (this.on && this.idleSince === undefined && this.inHand < this.prefetch)
      this.idleSince = this.now();
  }

  snapshot(): HeadSnapshot {
    return {
      lastAgeSeconds: this.lastAgeMs / 1000,
      lastAtMs: this.lastAtMs,
      lastUntimestampedAtMs: this.lastUntimestampedAtMs,
      idleSeconds: this.idleSince === undefined ? 0 : (this.now() - this.idleSince) / 1000,
    };
  }
}
