// Enqueue in the caller's transaction: the job becomes a row of the outbox,
// committed (or rolled back) with the caller's own writes; the relay
// publishes it after the commit. A job exists if and only if the caller's
// transaction committed.
import type pg from 'pg';
import { applyMigrations } from '../migrate.js';
import { OUTBOX_MIGRATIONS, OUTBOX_SQL } from './sql.js';
import { insertValues, outboxEntry, type OutboxEntry, type OutboxJob } from './rows.js';

/** Anything that runs a query: a client inside BEGIN … COMMIT, mostly. */
export type Queryable = Pick<pg.ClientBase, 'query'>;

/** Creates or updates the outbox's tables (idempotent; safe from many processes at once). */
export function migrateOutbox(pool: pg.Pool): Promise<number[]> {
  return applyMigrations(pool, OUTBOX_MIGRATIONS);
}

/**
 * Inserts `job` for `queue` into the outbox with the caller's client: call
 * it inside your own transaction, beside the writes the job is about.
 * Resolves to the job's id and key (rendered as publish() renders them).
 */
export async function enqueue<P>(
  client: Queryable,
  queue: string,
  job: OutboxJob<P>,
  now: () => number = Date.now,
): Promise<{ id: string; key: string }> {
  const entry = outboxEntry(queue, job, now());
  await insertEntries(client, [entry]);
  return { id: entry.job.id, key: entry.job.key };
}

/** Inserts rendered entries in one statement. */
export async function insertEntries(
  client: Queryable,
  entries: readonly OutboxEntry[],
): Promise<void> {
  if (entries.length === 0) return;
  try {
    await client.query({ text: OUTBOX_SQL.insert, values: insertValues(entries) });
  } catch (err) {
    if ((err as { code?: string }).code === '42P01')
      throw new Error(
        'enqueue: the outbox table does not exist in this database: call migrateOutbox(pool) once at start (startRelay does it too)',
        { cause: err },
      );
    throw err;
  }
}
