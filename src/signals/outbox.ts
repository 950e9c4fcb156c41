// The outbox a JobWorker names (spec.outbox): its unsent rows per queue and
// what its relay last did, read from the producer's database (the table the
// worker library creates: worker/outbox/sql.ts). Ages are computed by
// PostgreSQL, on its own clock, at read time. One read per database and
// refresh, shared by its JobWorkers (./database-snapshots.ts).
import type pg from 'pg';
import { DatabaseSnapshots } from './database-snapshots.js';

/** What the active relay last did, as its row in jobfleet_outbox_relay says. */
export interface RelayState {
  holder: string;
  /** seconds since its last heartbeat (every 5 s while it holds the lock) */
  heartbeatSeconds: number;
  lastError: string | null;
  lastErrorSeconds: number | null;
  lastSentSeconds: number | null;
}

export interface OutboxStats {
  unsent: number;
  /** the oldest unsent row's age; null when none waits */
  oldestSeconds: number | null;
  /** null: no relay has ever held the lock */
  relay: RelayState | null;
  /** false: the database has no jobfleet_outbox (the producer has not migrated it) */
  exists: boolean;
}

interface Snapshot {
  byQueue: Map<string, { unsent: number; oldestSeconds: number }>;
  relay: RelayState | null;
  exists: boolean;
}

export class OutboxReadError extends Error {
  override readonly name = 'OutboxReadError';
}

export class OutboxReader {
  private readonly snapshots: DatabaseSnapshots<Snapshot>;

  constructor(now: () => number = Date.now) {
    this.snapshots = new DatabaseSnapshots<Snapshot>(
      readOutbox,
      (err) =>
        (err as { code?: string }).code === '42P01'
          ? { byQueue: new Map(), relay: null, exists: false }
          : new OutboxReadError(`cannot read the outbox: ${redact((err as Error).message)}`, {
              cause: err,
            }),
      now,
    );
  }

  /** The queue's rows in the outbox at `url`, from a snapshot no older than `maxAgeMs`. */
  async read(url: string, queue: string, maxAgeMs: number): Promise<OutboxStats> {
    const s = await this.snapshots.read(url, maxAgeMs);
    const q = s.byQueue.get(queue);
    return {
      unsent: q?.unsent ?? 0,
      oldestSeconds: q?.oldestSeconds ?? null,
      relay: s.relay,
      exists: s.exists,
    };
  }

  close(): Promise<void> {
    return this.snapshots.close();
  }
}

async function readOutbox(pool: pg.Pool): Promise<Snapshot> {
  const unsent = await pool.query<{ queue: string; n: number; oldest: number }>(
    `select queue, count(*)::int as n,
            extract(epoch from now() - min(created_at))::float8 as oldest
     from jobfleet_outbox where sent_at is null group by queue`,
  );
  const relay = await pool.query<{
    holder: string;
    heartbeat: number;
    last_error: string | null;
    error_ago: number | null;
    sent_ago: number | null;
  }>(
    `select holder, extract(epoch from now() - heartbeat_at)::float8 as heartbeat, last_error,
            extract(epoch from now() - last_error_at)::float8 as error_ago,
            extract(epoch from now() - last_sent_at)::float8 as sent_ago
     from jobfleet_outbox_relay`,
  );
  const r = relay.rows[0];
  return {
    byQueue: new Map(
      unsent.rows.map((u) => [u.queue, { unsent: u.n, oldestSeconds: Math.max(0, u.oldest) }]),
    ),
    relay: r
      ? {
          holder: r.holder,
          heartbeatSeconds: Math.max(0, r.heartbeat),
          lastError: r.last_error === null ? null : redact(r.last_error),
          lastErrorSeconds: r.error_ago,
          lastSentSeconds: r.sent_ago,
        }
      : null,
    exists: true,
  };
}

/** Credentials a URL in an error may carry, never shown (status, events, logs). */
function redact(message: string): string {
  return message.replace(/\/\/[^/\s:@]*:[^@\s]*@/g, '//***@');
}
