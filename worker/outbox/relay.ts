// The relay: publishes the outbox's unsent rows to RabbitMQ, in id order, in
// batches, with publisher confirms, and marks a row sent only after its
// confirm. One relay is active per outbox table (a session-level advisory
// lock on the table's oid); the others stand by, trying the lock every few
// seconds, and one takes over when the active one's session ends (a crash,
// a kill, a lost node: PostgreSQL releases the lock with the connection).
//
// It wakes on NOTIFY within milliseconds of a commit and polls as well: a
// notification can be missed (a reconnect, PgBouncer in transaction pooling,
// which does not pass LISTEN), a poll cannot.
//
// A crash between a confirm and the mark publishes the row again: the copy
// carries the same message id and key, and the consumer's claim absorbs it
// (counted here as republished, there as a duplicate).
import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import amqp, { type ChannelModel, type ConfirmChannel, type Message } from 'amqplib';
import type pg from 'pg';
import client from 'prom-client';
import pino, { type Logger } from 'pino';
import { retryDelayMs } from '../backoff.js';
import { connectAny, withHeartbeat } from '../broker-urls.js';
import { compactReason } from '../envelope.js';
import { applyMigrations } from '../migrate.js';
import { outboxMetrics, type OutboxMetrics, type PublishError } from './metrics.js';
import { rowMessage, type OutboxRow } from './rows.js';
import { NOTIFY_CHANNEL, OUTBOX_MIGRATIONS, OUTBOX_SQL } from './sql.js';

export interface RelayOptions {
  /** the database whose jobfleet_outbox this relay publishes */
  pool: pg.Pool;
  /** amqp(s) URL, or a cluster's URLs comma-separated (as JOBFLEET_BROKER_URL) */
  brokerUrl: string;
  /** passed to amqplib's connect (e.g. { ca } for a private CA) */
  socketOptions?: Record<string, unknown>;
  /** the `outbox` label of the relay's metrics (default "outbox") */
  outbox?: string;
  /** rows per batch (default 500) */
  batchSize?: number;
  /** how often an idle relay looks without a notification (default 1000 ms) */
  pollMs?: number;
  /** how often a standby tries the lock (default 2000 ms) */
  standbyMs?: number;
  /** how often the relay's row and gauges are refreshed (default 5000 ms) */
  heartbeatMs?: number;
  /**
   * a standby ends the active relay's session when it has run no statement
   * for this long (a frozen process keeps its lock otherwise; default 60 s)
   */
  silentAfterSeconds?: number;
  /** sent rows are deleted this long after their confirm (default 24 h) */
  retentionSeconds?: number;
  /** the longest wait between tries while the broker or the database fails (default 30 s) */
  maxBackoffMs?: number;
  /** apply the outbox's migrations first (default true) */
  migrate?: boolean;
  /** where the relay's metrics go (default: a registry of its own) */
  registry?: client.Registry;
  logger?: Logger;
  random?: () => number;
}

export interface Relay {
  /** true while this relay holds the lock and publishes */
  readonly active: boolean;
  /** the relay's metrics registry */
  readonly registry: client.Registry;
  /** finishes the batch in flight, lets the lock go and closes its broker connection */
  stop(): Promise<void>;
}

/** Starts a relay (standing by until it holds the outbox's lock). */
export function startRelay(opts: RelayOptions): Relay {
  const relay = new OutboxRelay(opts);
  relay.start();
  return relay;
}

type Published = { row: OutboxRow; failed?: { reason: PublishError; message: string } };

/** A batch published and not yet marked: its rows, its channel, its confirms. */
interface InFlight {
  ids: string[];
  ch: ConfirmChannel;
  confirmed: boolean;
  done: Promise<Published[]>;
}

const SWEEP_MS = 60_000;
/** Batches published ahead of their marks. */
const PIPELINE = 4;
const SWEEP_BATCH = 1000;

class OutboxRelay implements Relay {
  readonly registry: client.Registry;
  private readonly metrics: OutboxMetrics;
  private readonly log: Logger;
  private readonly holder = `${hostname()}/${process.pid}/${randomUUID().slice(0, 8)}`;
  private readonly o: Required<
    Pick<
      RelayOptions,
      | 'batchSize'
      | 'pollMs'
      | 'standbyMs'
      | 'heartbeatMs'
      | 'silentAfterSeconds'
      | 'retentionSeconds'
      | 'maxBackoffMs'
      | 'random'
    >
  >;
  private stopped = false;
  private isActive = false;
  private running: Promise<void> = Promise.resolve();
  /** set by a notification (or stop) since the last look: the next sleep returns at once */
  private poked = false;
  private readonly sleepers = new Set<() => void>();
  private conn: ChannelModel | undefined;
  private ch: ConfirmChannel | undefined;
  private brokerFailures = 0;
  /** rows the previous holder had in flight when this relay took the lock (their ids) */
  private suspects = new Set<string>();
  /** the last failure not yet written to the relay's row */
  private unreported: string | null = null;

  constructor(private readonly opts: RelayOptions) {
    this.registry = opts.registry ?? new client.Registry();
    this.metrics = outboxMetrics(this.registry, opts.outbox ?? 'outbox');
    this.metrics.active(false);
    this.log = (opts.logger ?? pino({ level: process.env.LOG_LEVEL ?? 'info' })).child({
      component: 'outbox-relay',
      outbox: opts.outbox ?? 'outbox',
    });
    this.o = {
      batchSize: opts.batchSize ?? 500,
      pollMs: opts.pollMs ?? 1000,
      standbyMs: opts.standbyMs ?? 2000,
      heartbeatMs: opts.heartbeatMs ?? 5000,
      silentAfterSeconds: opts.silentAfterSeconds ?? 60,
      retentionSeconds: opts.retentionSeconds ?? 86_400,
      maxBackoffMs: opts.maxBackoffMs ?? 30_000,
      random: opts.random ?? Math.random,
    };
  }

  get active(): boolean {
    return this.isActive;
  }

  start(): void {
    this.running = this.run();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wake();
    await this.running;
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (!this.stopped) {
      try {
        if (this.opts.migrate !== false) await this.migrated();
        await this.standOrRelay();
        failures = 0;
      } catch (err) {
        failures++;
        this.log.warn(
          { err: describe(err) },
          'outbox relay: the outbox database failed; trying again',
        );
        await this.sleep(this.backoff(failures));
      }
    }
    await this.closeBroker();
  }

  private migratedOnce = false;

  private async migrated(): Promise<void> {
    if (this.migratedOnce) return;
    await applyMigrations(this.opts.pool, OUTBOX_MIGRATIONS);
    this.migratedOnce = true;
  }

  /** Tries the lock once: relays while it holds it, or waits standbyMs. */
  private async standOrRelay(): Promise<void> {
    const session = await this.opts.pool.connect();
    let held = false;
    let returned = false;
    let broken: Error | undefined;
    const onError = (err: Error) => {
      broken = err;
      this.wake();
    };
    session.on('error', onError);
    try {
      const { locked, schema } = (
        await session.query<{ locked: boolean; schema: string }>(OUTBOX_SQL.tryLock)
      ).rows[0] as { locked: boolean; schema: string };
      held = locked;
      if (!locked) {
        // a holder silent past silentAfterSeconds is frozen: end its session, take the lock next
        const { rows } = await session.query<{ ended: boolean }>(OUTBOX_SQL.endSilent, [
          this.o.silentAfterSeconds,
        ]);
        if (rows[0]?.ended)
          this.log.warn(
            { silentAfterSeconds: this.o.silentAfterSeconds },
            'outbox relay: the active relay went silent; its session ended, taking over',
          );
        session.off('error', onError);
        session.release();
        returned = true;
        if (!rows[0]?.ended) await this.sleep(this.o.standbyMs);
        return;
      }
      await session.query(OUTBOX_SQL.keepalive);
      await this.relay(session, schema, () => broken);
    } catch (err) {
      broken ??= err as Error;
      throw err;
    } finally {
      if (!returned) {
        session.off('error', onError);
        // never back into the pool: the session holds the lock until it ends
        session.release(broken ?? new Error('outbox relay session ended'));
        if (held) this.setActive(false);
      }
    }
  }

  private setActive(on: boolean): void {
    this.isActive = on;
    this.metrics.active(on);
    this.log.info(on ? 'outbox relay active' : 'outbox relay standing by');
  }

  /** Publishes while this session holds the lock, until stopped or the session fails. */
  private async relay(
    session: pg.PoolClient,
    schema: string,
    broken: () => Error | undefined,
  ): Promise<void> {
    const onNotify = (n: pg.Notification) => {
      if (n.channel === NOTIFY_CHANNEL && n.payload === schema) this.wake();
    };
    session.on('notification', onNotify);
    try {
      await session.query(`listen ${NOTIFY_CHANNEL}`);
      const { rows: before } = await session.query<{ in_flight: string[] }>(OUTBOX_SQL.activate, [
        this.holder,
      ]);
      // rows the previous holder published, perhaps, and did not mark: their next publish is a second
      this.suspects = new Set(before[0]?.in_flight ?? []);
      this.setActive(true);
      let beat = 0;
      let swept = Date.now();
      const inFlight: InFlight[] = [];
      while (!this.stopped) {
        const lost = broken();
        if (lost) throw lost;
        if (Date.now() - beat >= this.o.heartbeatMs) {
          await this.heartbeat(session);
          beat = Date.now();
        }
        if (Date.now() - swept >= SWEEP_MS) {
          await this.sweep(session);
          swept = Date.now();
        }
        await this.pump(session, inFlight);
      }
      // stopped: the batches in flight are confirmed (or not) and marked before the lock goes
      await this.settleAll(session, inFlight);
    } finally {
      session.off('notification', onNotify);
    }
  }

  /**
   * One step: take and publish a batch while fewer than PIPELINE are in
   * flight (the same channel keeps their order), else mark the oldest once
   * its confirms are in; wait when there is nothing to do.
   */
  private async pump(session: pg.PoolClient, inFlight: InFlight[]): Promise<void> {
    const ch = await this.channel();
    if (!ch) return this.sleep(this.backoff(this.brokerFailures));
    if (inFlight.length < PIPELINE) {
      this.poked = false;
      const { rows } = await session.query<OutboxRow>(OUTBOX_SQL.take, [
        this.o.batchSize,
        inFlight.flatMap((b) => b.ids),
        this.holder,
      ]);
      if (rows.length > 0) {
        const batch: InFlight = {
          ids: rows.map((r) => r.id),
          ch,
          confirmed: false,
          done: publishBatch(ch, rows).then((r) => {
            batch.confirmed = true;
            return r;
          }),
        };
        inFlight.push(batch);
        return;
      }
    }
    const first = inFlight[0];
    if (!first) return this.sleep(this.o.pollMs);
    if (!first.confirmed) {
      // its confirms, or new rows to take beside it, whichever comes first; and at least
      // every poll round the loop (its heartbeat shows a standby this relay is alive)
      await Promise.race([first.done, this.sleep(this.o.pollMs)]);
      if (!first.confirmed) return;
    }
    inFlight.shift();
    if (await this.settle(session, await first.done, inFlight)) {
      // its channel is gone: the batches sent on it fail too; settled before a new one
      await this.settleAll(session, inFlight);
      this.brokerFailures++;
      if (this.ch === first.ch) await this.closeBroker();
      await this.sleep(this.backoff(this.brokerFailures));
    }
  }

  /** Every batch in flight, oldest first, once its confirms (or failures) are in. */
  private async settleAll(session: pg.PoolClient, inFlight: InFlight[]): Promise<void> {
    while (inFlight.length) {
      const b = inFlight.shift() as InFlight;
      await this.settle(session, await b.done, inFlight);
    }
  }

  /**
   * Marks the confirmed rows sent; the refused ones wait. True when the
   * channel was lost (its rows are tried again once it is back).
   */
  private async settle(
    session: pg.PoolClient,
    results: Published[],
    stillInFlight: readonly InFlight[],
  ): Promise<boolean> {
    const ok = results.filter((r) => !r.failed);
    if (ok.length > 0) {
      const again = ok.filter((r) => this.suspects.has(r.row.id)).map((r) => r.row.id);
      await session.query(OUTBOX_SQL.sent, [
        ok.map((r) => r.row.id),
        this.holder,
        stillInFlight.flatMap((b) => b.ids),
        again,
      ]);
      this.metrics.published(ok.length);
      if (again.length > 0) this.metrics.republished(again.length);
      for (const id of again) this.suspects.delete(id);
    }
    const failed = results.filter((r) => r.failed);
    if (failed.length === 0) return false;
    for (const reason of ['broker_unreachable', 'refused', 'unroutable'] as const) {
      const of = failed.filter((r) => r.failed?.reason === reason);
      if (of.length > 0) this.metrics.error(reason, of.length);
    }
    const first = failed[0]?.failed as NonNullable<Published['failed']>;
    this.unreported = first.message;
    this.log.warn(
      { failed: failed.length, reason: first.reason, err: first.message },
      'outbox relay: rows not published; tried again later',
    );
    if (failed.some((r) => r.failed?.reason === 'broker_unreachable')) return true;
    // refused or unroutable: those rows wait, the others go on
    const byMessage = new Map<string, string[]>();
    for (const r of failed) {
      const m = (r.failed as NonNullable<Published['failed']>).message;
      byMessage.set(m, [...(byMessage.get(m) ?? []), r.row.id]);
    }
    const waitMs = this.backoff(1 + Math.max(...failed.map((r) => r.row.publishes)));
    for (const [message, ids] of byMessage)
      await session.query(OUTBOX_SQL.refused, [ids, waitMs, message]);
    return false;
  }

  private async heartbeat(session: pg.PoolClient): Promise<void> {
    const error = this.unreported;
    this.unreported = null;
    await session.query(OUTBOX_SQL.heartbeat, [this.holder, error]);
    const { rows } = await session.query<{ unsent: number; oldest: Date | null }>(
      OUTBOX_SQL.unsent,
    );
    const oldest = rows.reduce<number>(
      (m, r) => (r.oldest ? Math.min(m, r.oldest.getTime()) : m),
      Infinity,
    );
    this.metrics.stats({
      unsent: rows.reduce((n, r) => n + r.unsent, 0),
      oldestSeconds: Number.isFinite(oldest) ? Math.max(0, (Date.now() - oldest) / 1000) : 0,
    });
  }

  private async sweep(session: pg.PoolClient): Promise<void> {
    for (let i = 0; i < 10; i++) {
      const r = await session.query(OUTBOX_SQL.sweep, [this.o.retentionSeconds, SWEEP_BATCH]);
      if ((r.rowCount ?? 0) < SWEEP_BATCH) return;
    }
  }

  /** The confirm channel, connecting when there is none; undefined while the broker is unreachable. */
  private async channel(): Promise<ConfirmChannel | undefined> {
    if (this.ch) return this.ch;
    try {
      const conn = await connectAny(this.opts.brokerUrl, (url) =>
        amqp.connect(withHeartbeat(url), {
          ...this.opts.socketOptions,
          clientProperties: { connection_name: 'jobfleet outbox relay' },
        }),
      );
      conn.on('error', (err: Error) => this.brokerLost(describe(err)));
      conn.on('close', () => {
        if (this.conn === conn) this.conn = this.ch = undefined;
      });
      const ch = await conn.createConfirmChannel();
      ch.on('error', (err: Error) => this.brokerLost(describe(err)));
      ch.on('close', () => {
        if (this.ch === ch) this.ch = undefined;
      });
      this.conn = conn;
      this.ch = ch;
      this.brokerFailures = 0;
      return ch;
    } catch (err) {
      this.brokerFailures++;
      this.brokerLost(`broker unreachable: ${describe(err)}`);
      return undefined;
    }
  }

  private brokerLost(message: string): void {
    this.unreported = message;
    this.log.warn({ err: message }, 'outbox relay: broker connection failed');
  }

  private async closeBroker(): Promise<void> {
    const conn = this.conn;
    this.conn = this.ch = undefined;
    await conn?.close().catch(() => undefined);
  }

  private backoff(failures: number): number {
    return retryDelayMs(
      { initialDelayMs: 200, maxDelayMs: this.o.maxBackoffMs },
      failures,
      undefined,
      this.o.random,
    );
  }

  private wake(): void {
    this.poked = true;
    for (const s of this.sleepers) s();
  }

  /**
   * Waits `ms`, or less when woken; returns at once when woken since the last
   * look (the take clears it). Several may wait at once (a race beside a batch's confirms).
   */
  private sleep(ms: number): Promise<void> {
    if (this.poked || this.stopped) {
      this.poked = false;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.sleepers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.sleepers.add(done);
    });
  }
}

/**
 * Publishes the rows (mandatory: a queue that does not exist returns the
 * message, which the broker would otherwise confirm and drop) and waits for
 * every confirm.
 */
async function publishBatch(ch: ConfirmChannel, rows: readonly OutboxRow[]): Promise<Published[]> {
  const returned = new Map<string, string>();
  const onReturn = (msg: Message) =>
    returned.set(
      `${msg.fields.routingKey}\n${String(msg.properties.messageId)}`,
      (msg.fields as { replyText?: string }).replyText ?? 'NO_ROUTE',
    );
  ch.on('return', onReturn);
  try {
    return await Promise.all(
      rows.map(
        (row) =>
          new Promise<Published>((resolve) => {
            const { body, props } = rowMessage(row);
            const unreachable = (err: unknown): Published => ({
              row,
              failed: {
                reason: 'broker_unreachable',
                message: `broker unreachable: ${describe(err)}`,
              },
            });
            try {
              ch.publish('', row.queue, body, { ...props, mandatory: true }, (err) => {
                if (err)
                  return resolve(
                    /nacked/.test(String((err as Error).message))
                      ? {
                          row,
                          failed: {
                            reason: 'refused',
                            message: `the broker refused the message for queue "${row.queue}" (nack: a full queue that rejects publishes, or a broker alarm)`,
                          },
                        }
                      : unreachable(err),
                  );
                const why = returned.get(`${row.queue}\n${row.message_id}`);
                resolve(
                  why
                    ? {
                        row,
                        failed: {
                          reason: 'unroutable',
                          message: `queue "${row.queue}" does not exist (${why}): start its workers, which declare it, or fix the row's queue`,
                        },
                      }
                    : { row },
                );
              });
            } catch (err) {
              resolve(unreachable(err));
            }
          }),
      ),
    );
  } finally {
    ch.off('return', onReturn);
  }
}

function describe(err: unknown): string {
  return compactReason(err instanceof Error ? err.message : String(err));
}
