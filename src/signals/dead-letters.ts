// The quarantine's size and oldest entry, read from the claims database the
// workers write (jobfleet_dead_letters). Many JobWorkers often share one
// claims database: it is read once per refresh for all of its queues (one
// grouped query, one small pool per database), and every JobWorker of it is
// answered from that snapshot.
import pg from 'pg';

export interface DeadLetterStats {
  quarantined: number;
  /** when the oldest quarantined entry was dead-lettered; null when there is none */
  oldestAt: Date | null;
}

export class DeadLetterReadError extends Error {
  override readonly name = 'DeadLetterReadError';
}

/** Pools idle longer than this are closed: a deleted JobWorker's database is let go. */
const IDLE_MS = 10 * 60_000;

type Snapshot = { byQueue: Map<string, DeadLetterStats> } | { error: DeadLetterReadError };

interface Database {
  pool: pg.Pool;
  used: number;
  snapshot?: { at: number; value: Snapshot };
  refreshing?: Promise<Snapshot>;
}

export class DeadLetterReader {
  private readonly dbs = new Map<string, Database>();

  constructor(private readonly now: () => number = Date.now) {}

  /** The queue's quarantine, from a snapshot of its database no older than `maxAgeMs`. */
  async read(claimsUrl: string, queue: string, maxAgeMs: number): Promise<DeadLetterStats> {
    const db = this.db(claimsUrl);
    const fresh = db.snapshot && this.now() - db.snapshot.at < maxAgeMs;
    const snap = fresh ? db.snapshot!.value : await this.refresh(db);
    if ('error' in snap) throw snap.error;
    return snap.byQueue.get(queue) ?? { quarantined: 0, oldestAt: null };
  }

  /** One query per database at a time, however many JobWorkers ask. */
  private refresh(db: Database): Promise<Snapshot> {
    db.refreshing ??= db.pool
      .query<{ queue: string; n: number; oldest: Date | null }>(
        `select queue, count(*)::int as n, min(dead_lettered_at) as oldest
         from jobfleet_dead_letters where status = 'quarantined' group by queue`,
      )
      .then(
        ({ rows }): Snapshot => ({
          byQueue: new Map(rows.map((r) => [r.queue, { quarantined: r.n, oldestAt: r.oldest }])),
        }),
        (err: unknown): Snapshot =>
          // No table yet: no worker has started against this database, so nothing is quarantined.
          (err as { code?: string }).code === '42P01'
            ? { byQueue: new Map() }
            : {
                error: new DeadLetterReadError(
                  `cannot read dead letters from the claims database: ${(err as Error).message}`,
                  { cause: err },
                ),
              },
      )
      .then((value) => {
        db.snapshot = { at: this.now(), value };
        db.refreshing = undefined;
        return value;
      });
    return db.refreshing;
  }

  private db(url: string): Database {
    const now = this.now();
    for (const [k, v] of this.dbs)
      if (now - v.used > IDLE_MS) {
        this.dbs.delete(k);
        void v.pool.end().catch(() => undefined);
      }
    let db = this.dbs.get(url);
    if (!db) {
      const pool = new pg.Pool({
        connectionString: url,
        max: 1,
        idleTimeoutMillis: 30_000,
        connectionTimeoutMillis: 3000,
        statement_timeout: 3000,
        application_name: 'jobfleet-operator',
      });
      pool.on('error', () => undefined); // an idle connection dropped: the next read reconnects
      db = { pool, used: now };
      this.dbs.set(url, db);
    }
    db.used = now;
    return db;
  }

  async close(): Promise<void> {
    const dbs = [...this.dbs.values()];
    this.dbs.clear();
    await Promise.all(dbs.map((d) => d.pool.end().catch(() => undefined)));
  }
}
