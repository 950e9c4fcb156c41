// The quarantine's size and oldest entry, read from the claims database the
// workers write (jobfleet_dead_letters): one grouped query per database and
// refresh, shared by its JobWorkers (./database-snapshots.ts).
import type pg from 'pg';
import { DatabaseSnapshots } from './database-snapshots.js';

export interface DeadLetterStats {
  quarantined: number;
  /** when the oldest quarantined entry was dead-lettered; null when there is none */
  oldestAt: Date | null;
  /** absent from a read that does not count them */
  inDoubt?: InDoubtStats;
}

/** Jobs whose outcome is unknown (docs/in-doubt.md). */
export interface InDoubtStats {
  /** claims whose in-doubt attempt the workers are deciding now (asking the downstream, or about to) */
  deciding: number;
  /** held for a person: quarantined dead letters of failure class in_doubt */
  held: number;
  /** the oldest held ones, at most HELD_SHOWN: what `kubectl jobworker why` names */
  heldJobs: HeldJob[];
}

export interface HeldJob {
  id: number;
  key: string | null;
  /** the dead letter's reason: the attempt in doubt, its intent and the last answer */
  reason: string;
}

/** Held in-doubt jobs named per JobWorker (the count has them all). */
export const HELD_SHOWN = 5;

const NO_DOUBT: InDoubtStats = { deciding: 0, held: 0, heldJobs: [] };

export class DeadLetterReadError extends Error {
  override readonly name = 'DeadLetterReadError';
}

export class DeadLetterReader {
  private readonly snapshots: DatabaseSnapshots<Map<string, DeadLetterStats>>;

  constructor(now: () => number = Date.now) {
    this.snapshots = new DatabaseSnapshots<Map<string, DeadLetterStats>>(
      readDatabase,
      (err) =>
        // No table yet: no worker has started against this database, so nothing is quarantined.
        (err as { code?: string }).code === '42P01'
          ? new Map()
          : new DeadLetterReadError(
              `cannot read dead letters from the claims database: ${(err as Error).message}`,
              { cause: err },
            ),
      now,
    );
  }

  /** The queue's quarantine, from a snapshot of its database no older than `maxAgeMs`. */
  async read(claimsUrl: string, queue: string, maxAgeMs: number): Promise<DeadLetterStats> {
    const byQueue = await this.snapshots.read(claimsUrl, maxAgeMs);
    return byQueue.get(queue) ?? { quarantined: 0, oldestAt: null, inDoubt: NO_DOUBT };
  }

  close(): Promise<void> {
    return this.snapshots.close();
  }
}

interface QueueRow {
  queue: string;
  n: number;
  oldest: Date | null;
  held: number;
}

/**
 * Every queue's quarantine, with its in-doubt jobs: the counts in one
 * grouped query over the quarantined entries, the held ones named, and the
 * doubts being decided (their claims name the queue: migration 9's partial
 * index has only those rows). A schema from before migration 9 has no doubts.
 */
async function readDatabase(pool: pg.Pool): Promise<Map<string, DeadLetterStats>> {
  const { rows } = await pool.query<QueueRow>(
    `select queue, count(*)::int as n, min(dead_lettered_at) as oldest,
            (count(*) filter (where failure_class = 'in_doubt'))::int as held
     from jobfleet_dead_letters where status = 'quarantined' group by queue`,
  );
  const held = rows.some((r) => r.held > 0)
    ? (
        await pool.query<HeldJob & { queue: string }>(
          `select queue, id::int as id, key, reason from (
             select queue, id, key, reason,
                    row_number() over (partition by queue order by dead_lettered_at, id) as nth
             from jobfleet_dead_letters where status = 'quarantined' and failure_class = 'in_doubt'
           ) x where nth <= $1 order by queue, nth`,
          [HELD_SHOWN],
        )
      ).rows
    : [];
  const deciding = await pool
    .query<{ queue: string; n: number }>(
      `select doubt->>'queue' as queue, count(*)::int as n from jobfleet_claims
       where doubt is not null and state in ('running', 'released') group by 1`,
    )
    .then(
      (r) => r.rows,
      (err: { code?: string }) => {
        if (err.code === '42703') return []; // no doubt column: workers from before migration 9
        throw err;
      },
    );
  const byQueue = new Map<
    string,
    { quarantined: number; oldestAt: Date | null; inDoubt: InDoubtStats }
  >();
  const of = (queue: string) => {
    let s = byQueue.get(queue);
    if (!s)
      byQueue.set(
        queue,
        (s = { quarantined: 0, oldestAt: null, inDoubt: { ...NO_DOUBT, heldJobs: [] } }),
      );
    return s;
  };
  for (const r of rows) {
    const s = of(r.queue);
    s.quarantined = r.n;
    s.oldestAt = r.oldest;
    s.inDoubt.held = r.held;
  }
  for (const j of held)
    of(j.queue).inDoubt.heldJobs.push({ id: j.id, key: j.key, reason: j.reason });
  for (const d of deciding) if (d.queue) of(d.queue).inDoubt.deciding = d.n;
  return byQueue;
}
