// Applies a set of migrations to a database, each once, in order: the claims
// tables' set (claims-sql.ts) and the outbox's (outbox/sql.ts) each keep the
// versions they applied in a table of their own, so that a database holding
// only an outbox (a producer's) never gets the claims tables.
import type pg from 'pg';

export interface MigrationSet {
  /** the table that records which versions are applied */
  table: string;
  migrations: ReadonlyArray<{ version: number; sql: string }>;
}

/** Serialises migrations across processes: many workers (and relays) may start at once. */
export const MIGRATION_LOCK_ID = 0x6a6f62666c; // "jobfl"

/** Applies the set's pending migrations in one transaction; returns the versions applied. */
export async function applyMigrations(pool: pg.Pool, set: MigrationSet): Promise<number[]> {
  const client = await pool.connect();
  let broken: Error | undefined;
  // a backend killed between queries emits 'error': heard here, failed by the next query
  const onError = (err: Error) => {
    broken = err;
  };
  client.on('error', onError);
  try {
    await client.query('begin');
    await client.query('select pg_advisory_xact_lock($1)', [MIGRATION_LOCK_ID]);
    await client.query(
      `create table if not exists ${set.table} (
         version integer primary key, applied_at timestamptz not null default now())`,
    );
    const done = new Set(
      (await client.query<{ version: number }>(`select version from ${set.table}`)).rows.map(
        (r) => r.version,
      ),
    );
    const applied: number[] = [];
    for (const m of set.migrations) {
      if (done.has(m.version)) continue;
      await client.query(m.sql);
      await client.query(`insert into ${set.table} (version) values ($1)`, [m.version]);
      applied.push(m.version);
    }
    await client.query('commit');
    return applied;
  } catch (err) {
    await client.query('rollback').catch(() => undefined);
    broken ??= err as Error;
    throw err;
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}
