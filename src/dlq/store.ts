// The quarantine's PostgreSQL side: the dead-letter rows the workers write,
// their lifecycle (quarantined → replayed | discarded | superseded) and the
// audit trail of every replay, skip and discard. The tables are the workers'
// (worker/claims-sql.ts migrations); this module only reads and resolves.
import type pg from 'pg';

export type DeadLetterStatus =
  | 'quarantined'
  | 'replayed'
  | 'discarded'
  | 'superseded'
  /** an in_doubt dead letter a person decided had happened: its claim completed without a run */
  | 'marked_done';

export interface DeadLetterRow {
  id: number;
  delivery_id: string;
  job_id: string | null;
  key: string | null;
  type: string | null;
  schema_version: number | null;
  attempts: number;
  reason: string;
  failure_class: string;
  queue: string;
  owner: string | null;
  revision: string | null;
  payload_hash: string;
  first_seen_at: Date | null;
  dead_lettered_at: Date;
  status: DeadLetterStatus;
  payload: Buffer | null;
  resolved_at: Date | null;
  resolved_by: string | null;
  resolution_reason: string | null;
  replay_id: string | null;
}

export interface AuditRow {
  id: number;
  dead_letter_id: number;
  action: 'replayed' | 'skipped_completed' | 'discarded' | 'marked_done';
  replay_id: string | null;
  initiator: string;
  reason: string;
  key: string | null;
  old_payload_hash: string;
  new_payload_hash: string | null;
  delivery_id: string | null;
  at: Date;
}

/** Which dead letters an operation applies to; every field narrows. */
export interface Selector {
  /** the origin work queue */
  queue: string;
  ids?: number[];
  keys?: string[];
  /** a substring of the reason, case-insensitive */
  reason?: string;
  failureClass?: string;
  since?: Date;
  until?: Date;
  status?: DeadLetterStatus;
}

/** The selector as a WHERE clause with its parameters (pure). */
export function whereClause(s: Selector): { sql: string; params: unknown[] } {
  const params: unknown[] = [];
  const p = (v: unknown) => {
    params.push(v);
    return `$${params.length}`;
  };
  const parts = [`queue = ${p(s.queue)}`, `status = ${p(s.status ?? 'quarantined')}`];
  if (s.ids?.length) parts.push(`id = any(${p(s.ids)}::bigint[])`);
  if (s.keys?.length) parts.push(`key = any(${p(s.keys)}::text[])`);
  if (s.reason) parts.push(`reason ilike '%' || ${p(escapeLike(s.reason))} || '%'`);
  if (s.failureClass) parts.push(`failure_class = ${p(s.failureClass)}`);
  if (s.since) parts.push(`dead_lettered_at >= ${p(s.since)}`);
  if (s.until) parts.push(`dead_lettered_at < ${p(s.until)}`);
  return { sql: parts.join(' and '), params };
}

function escapeLike(s: string): string {
  return s.replace(/[\\%_]/g, (c) => `\\${c}`);
}

export interface ReplayCounts {
  replayed: number;
  skipped: number;
  completed: number;
  failedAgain: number;
  pending: number;
}

export class DeadLetterStore {
  constructor(private readonly db: Pick<pg.Pool, 'query'> & Partial<Pick<pg.Pool, 'connect'>>) {}

  async list(s: Selector, limit: number): Promise<DeadLetterRow[]> {
    const w = whereClause(s);
    const { rows } = await this.db.query<DeadLetterRow>(
      `select * from jobfleet_dead_letters where ${w.sql} order by id limit ${Number(limit)}`,
      w.params,
    );
    return rows.map(normalize);
  }

  async count(s: Selector): Promise<number> {
    const w = whereClause(s);
    const { rows } = await this.db.query<{ n: number }>(
      `select count(*)::int as n from jobfleet_dead_letters where ${w.sql}`,
      w.params,
    );
    return rows[0]?.n ?? 0;
  }

  /**
   * Dead letters the incident still produces: quarantined ones in the
   * selection whose key was never replayed. A replayed job that fails again
   * is the replay's own result (its failure threshold judges those), not a
   * sign that first attempts still fail.
   */
  async arriving(s: Selector): Promise<number> {
    const w = whereClause(s);
    const { rows } = await this.db.query<{ n: number }>(
      `select count(*)::int as n from jobfleet_dead_letters d where ${w.sql}
         and not exists (select 1 from jobfleet_dead_letters r where r.key = d.key and r.status = 'replayed')`,
      w.params,
    );
    return rows[0]?.n ?? 0;
  }

  async get(id: number): Promise<DeadLetterRow | undefined> {
    const { rows } = await this.db.query<DeadLetterRow>(
      'select * from jobfleet_dead_letters where id = $1',
      [id],
    );
    return rows[0] && normalize(rows[0]);
  }

  async auditOf(id: number): Promise<AuditRow[]> {
    const { rows } = await this.db.query<AuditRow>(
      'select * from jobfleet_dead_letter_audit where dead_letter_id = $1 order by id',
      [id],
    );
    return rows.map((r) => ({ ...r, id: Number(r.id), dead_letter_id: Number(r.dead_letter_id) }));
  }

  /** The key's claim state, if it has a claim row. */
  async claimState(key: string): Promise<string | undefined> {
    const { rows } = await this.db.query<{ state: string }>(
      'select state from jobfleet_claims where key = $1',
      [key],
    );
    return rows[0]?.state;
  }

  /**
   * Gives a dead-lettered key a fresh start (attempts 0) so that the replayed
   * delivery runs; a key that completed meanwhile is left alone. A replay is
   * a person's decision to run it again: an undecided doubt (a held in_doubt
   * job) is cleared with it, where the claims schema has one (migration 9;
   * workers of earlier versions may not have applied it yet).
   */
  async resetClaim(key: string): Promise<void> {
    const reset = await this.db.query(
      `update jobfleet_claims
       set state = 'released', attempts = 0, owner = null, lease_until = null, retry_at = null,
           last_error = null, updated_at = now()
       where key = $1 and state = 'dead_lettered'`,
      [key],
    );
    if (!reset.rowCount) return;
    await this.db
      .query(`update jobfleet_claims set doubt = null where key = $1 and state = 'released'`, [key])
      .catch((err: { code?: string }) => {
        if (err.code !== '42703') throw err; // undefined_column: no doubts kept there
      });
  }

  /** Resolves a quarantined row and writes its audit row, atomically. False when it was no longer quarantined. */
  async resolve(
    row: DeadLetterRow,
    r: {
      status: Exclude<DeadLetterStatus, 'quarantined'>;
      action: AuditRow['action'];
      initiator: string;
      reason: string;
      replayId?: string | null;
      newPayloadHash?: string | null;
      deliveryId?: string | null;
    },
  ): Promise<boolean> {
    const { rows } = await this.db.query<{ ok: boolean }>(
      `with resolved as (
         update jobfleet_dead_letters
         set status = $2, resolved_at = now(), resolved_by = $3, resolution_reason = $4, replay_id = $5
         where id = $1 and status = 'quarantined'
         returning id, key, payload_hash
       ), audit as (
         insert into jobfleet_dead_letter_audit
           (dead_letter_id, action, replay_id, initiator, reason, key, old_payload_hash, new_payload_hash, delivery_id)
         select id, $6, $5, $3, $4, key, payload_hash, $7, $8 from resolved
       )
       select exists (select 1 from resolved) as ok`,
      [
        row.id,
        r.status,
        r.initiator,
        r.reason,
        r.replayId ?? null,
        r.action,
        r.newPayloadHash ?? null,
        r.deliveryId ?? null,
      ],
    );
    return rows[0]?.ok === true;
  }

  /**
   * A held in-doubt job decided as done by a person: the row resolved as
   * marked_done with its audit row, and the key's claim completed with who
   * decided and why as its result (a later copy of the job is a duplicate),
   * atomically. False when the row was no longer quarantined.
   */
  async markDone(row: DeadLetterRow, r: { initiator: string; reason: string }): Promise<boolean> {
    const { rows } = await this.db.query<{ ok: boolean }>(
      `with resolved as (
         update jobfleet_dead_letters
         set status = 'marked_done', resolved_at = now(), resolved_by = $2, resolution_reason = $3
         where id = $1 and status = 'quarantined'
         returning id, key, payload_hash
       ), audit as (
         insert into jobfleet_dead_letter_audit
           (dead_letter_id, action, initiator, reason, key, old_payload_hash)
         select id, 'marked_done', $2, $3, key, payload_hash from resolved
       ), claim as (
         update jobfleet_claims c
         set state = 'completed', doubt = null, lease_until = null, completed_at = now(), updated_at = now(),
             result = jsonb_build_object('markedDoneBy', $2::text, 'reason', $3::text)
         from resolved where c.key = resolved.key and c.state = 'dead_lettered'
       )
       select exists (select 1 from resolved) as ok`,
      [row.id, r.initiator, r.reason],
    );
    return rows[0]?.ok === true;
  }

  /**
   * How a replay's deliveries fared: completed (the key completed after the
   * replay), failed again (dead-lettered again, or retrying after an error),
   * or still pending.
   */
  async replayCounts(replayId: string): Promise<ReplayCounts> {
    const { rows } = await this.db.query<Record<keyof ReplayCounts, number>>(
      `select
         count(*) filter (where a.action = 'replayed')::int as replayed,
         count(*) filter (where a.action = 'skipped_completed')::int as skipped,
         count(*) filter (where a.action = 'replayed' and c.state = 'completed')::int as completed,
         count(*) filter (where a.action = 'replayed' and (
           c.state = 'dead_lettered'
           or (c.state = 'released' and c.last_error is not null)
           or exists (select 1 from jobfleet_dead_letters d where d.delivery_id = a.delivery_id)
         ))::int as "failedAgain"
       from jobfleet_dead_letter_audit a
       left join jobfleet_claims c on c.key = a.key
       where a.replay_id = $1`,
      [replayId],
    );
    const r = rows[0] ?? { replayed: 0, skipped: 0, completed: 0, failedAgain: 0 };
    return {
      replayed: r.replayed,
      skipped: r.skipped,
      completed: r.completed,
      failedAgain: r.failedAgain,
      pending: Math.max(0, r.replayed - r.completed - r.failedAgain),
    };
  }
}

function normalize(r: DeadLetterRow): DeadLetterRow {
  return { ...r, id: Number(r.id) };
}
