// The quarantine's size and oldest entry, read from the claims database the
// workers write (jobfleet_dead_letters). One small pool per database URL; a
// read never holds up a reconcile for long (the caller bounds it).
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

export class DeadLetterReader {
  private readonly pools = new Map<string, { pool: pg.Pool; used: number }>();

  async read(claimsUrl: string, queue: string): Promise<DeadLetterStats> {
    const pool = this.pool(claimsUrl);
    try {
      const { rows } = await pool.query<{ n: number; oldest: Date | null }>(
        `select count(*)::int as n, min(dead_lettered_at) as oldest
         from jobfleet_dead_letters where status = 'quarantined' and queue = $1`,
        [queue],
      );
      return { quarantined: rows[0]?.n ?? 0, oldestAt: rows[0]?.oldest ?? null };
    } catch (err) {
      // No table yet: no worker has started against this database, so nothing is quarantined.
      if ((err as { code?: string }).code === '42P01') return { quarantined: 0, oldestAt: null };
      throw new DeadLetterReadError(
        `cannot read dead letters from the claims database: ${(err as Error).message}`,
        { cause: err },
      );
    }
  }

  private pool(url: string): pg.Pool {
    const now = Date.now();
    for (const [k, v] of this.pools)
      if (now - v.used > IDLE_MS) {
        this.pools.delete(k);
        void v.pool.end().catch(() => undefined);
      }
    let hit = this.pools.get(url);
    if (!hit) {
      const pool = new pg.Pool({
        connectionString: url,
        max: 1,
        idleTimeoutMillis: 30_000,
        connectionTimeoutMillis: 3000,
        statement_timeout: 3000,
        application_name: 'jobfleet-operator',
      });
      pool.on('error', () => undefined); // an idle connection dropped: the next read reconnects
      hit = { pool, used: now };
      this.pools.set(url, hit);
    }
    hit.used = now;
    return hit.pool;
  }

  async close(): Promise<void> {
    const pools = [...this.pools.values()];
    this.pools.clear();
    await Promise.all(pools.map((p) => p.pool.end().catch(() => undefined)));
  }
}
