// Snapshots of what the operator reads from the workers' and producers'
// PostgreSQL databases (the quarantine, the outbox). Many JobWorkers often
// share one database: each is read once per refresh for all of its queues
// (one small pool per database), and every JobWorker of it is answered from
// that snapshot.
import pg from 'pg';

/** Pools idle longer than this are closed: a deleted JobWorker's database is let go. */
const IDLE_MS = 10 * 60_000;

type Snapshot<T> = { value: T } | { error: Error };

interface Database<T> {
  pool: pg.Pool;
  used: number;
  snapshot?: { at: number; value: Snapshot<T> };
  refreshing?: Promise<Snapshot<T>>;
}

export class DatabaseSnapshots<T> {
  private readonly dbs = new Map<string, Database<T>>();

  /**
   * @param readDatabase reads one database's snapshot
   * @param failed turns a read's error into the snapshot to keep (a value) or the error to answer
   */
  constructor(
    private readonly readDatabase: (pool: pg.Pool) => Promise<T>,
    private readonly failed: (err: unknown) => T | Error,
    private readonly now: () => number = Date.now,
  ) {}

  /** The database's snapshot, no older than `maxAgeMs`; throws its read's error. */
  async read(url: string, maxAgeMs: number): Promise<T> {
    const db = this.db(url);
    const fresh = db.snapshot && this.now() - db.snapshot.at < maxAgeMs;
    const snap = fresh ? db.snapshot!.value : await this.refresh(db);
    if ('error' in snap) throw snap.error;
    return snap.value;
  }

  /** One read per database at a time, however many JobWorkers ask. */
  private refresh(db: Database<T>): Promise<Snapshot<T>> {
    db.refreshing ??= this.readDatabase(db.pool)
      .then(
        (value): Snapshot<T> => ({ value }),
        (err: unknown): Snapshot<T> => {
          const f = this.failed(err);
          return f instanceof Error ? { error: f } : { value: f };
        },
      )
      .then((value) => {
        db.snapshot = { at: this.now(), value };
        db.refreshing = undefined;
        return value;
      });
    return db.refreshing;
  }

  private db(url: string): Database<T> {
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
