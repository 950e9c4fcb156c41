// The claim store: PostgreSQL adapter for idempotency claims and dead-letter
// records. Every method is one round trip (migrate aside); claims and
// completions outside a transaction share theirs with concurrent callers:
// one statement per event-loop turn carries both (group commit), and the
// ack journal's rows ride along.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type pg from 'pg';
import { CLAIMS_MIGRATIONS, SQL } from './claims-sql.js';
import { applyMigrations } from './migrate.js';
import { insertEntries, OUTBOX_MIGRATIONS, type OutboxEntry } from './outbox/index.js';
import { GroupCommit, type GroupCommitOptions } from './group-commit.js';
import { numberArray, textArray } from './pg-arrays.js';
import { storableJson } from './storable.js';
import { isMessageDataError } from './store-errors.js';
import { readHistory, type AttemptHistory, type RunRecordStore } from './in-doubt/index.js';

export type ClaimOutcome =
  | {
      outcome: 'new' | 'retry' | 'takeover';
      owner: string;
      attempts: number;
      /** throttled retries before this run (they spend no attempt) */
      throttled: number;
      lastError: string | null;
      firstSeenAt: Date;
      /** what earlier attempts of this key left: ctx.previous, an undecided doubt, recorded steps */
      history: AttemptHistory;
    }
  | { outcome: 'completed'; result: unknown; attempts: number }
  | { outcome: 'dead_lettered'; attempts: number }
  | { outcome: 'held'; until: Date | null; attempts: number }
  | { outcome: 'not_due'; until: Date | null; attempts: number };

export interface DeadLetterRecord {
  deliveryId: string;
  jobId: string | null;
  key: string | null;
  type: string | null;
  schemaVersion: number | null;
  attempts: number;
  reason: string;
  failureClass: string;
  queue: string;
  owner: string | null;
  revision: string | null;
  payloadHash: string;
  firstSeenAt: Date | null;
  /** the claim we hold on `key`, if any: it is marked dead-lettered in the same statement */
  claimOwner: string | null;
  /** the message body, kept only when the worker stores dead-letter payloads */
  payload: Buffer | null;
}

/** An acknowledged delivery whose ack needed a durable record (see jobfleet_acks). */
export interface AckEntry {
  deliveryId: string;
  jobId: string | null;
  key: string | null;
  outcome: 'completed' | 'duplicate' | 'retried' | 'dead_lettered';
  attempt: number;
  /** ms since the epoch */
  ackedAt: number;
}

interface ClaimRow {
  outcome: string;
  attempts: number;
  throttled: number | null;
  last_error: string | null;
  result: unknown;
  wait_until: Date | null;
  first_seen_at: Date;
  /** a retried or taken-over claim's history (migration 9) */
  attempt: unknown;
}

/** A row of the group-commit statement's answer; `key` is null on the 'now' row only. */
type CommitRow = ClaimRow & { key: string | null };

/** The journal's parallel arrays: delivery id, job id, key, outcome, attempt, acked-at (ms). */
const journalColumns = (entries: readonly AckEntry[]) => [
  textArray(entries.map((e) => e.deliveryId)),
  textArray(entries.map((e) => e.jobId)),
  textArray(entries.map((e) => e.key)),
  textArray(entries.map((e) => e.outcome)),
  numberArray(entries.map((e) => e.attempt)),
  numberArray(entries.map((e) => e.ackedAt)),
];

/**
 * jobfleet_commit_attempts' parameters $1..$15: claims, the lease,
 * completions, the journal's columns, then the queue a doubt names.
 */
const commitColumns = (
  claims: readonly ClaimRequest[],
  completions: readonly Completion[],
  acks: readonly AckEntry[],
  queue: string | null,
) => [
  textArray(claims.map((r) => r.key)),
  textArray(claims.map((r) => r.owner)),
  textArray(claims.map((r) => r.jobId)),
  textArray(claims.map((r) => r.type)),
  claims[0]?.leaseSeconds ?? 60,
  textArray(completions.map((c) => c.key)),
  textArray(completions.map((c) => c.owner)),
  textArray(completions.map((c) => c.result)),
  ...journalColumns(acks),
  queue,
];

/**
 * The pool for the claims URL. A mounted CA bundle (JOBFLEET_TLS_CA_FILE)
 * must survive the URL: pg lets a URL's sslmode replace the whole `ssl`
 * option, the CA with it, so the mode is read here and the URL passed on
 * without it. As libpq with a root certificate: verify-full (or no mode)
 * checks the CA and the host name, disable goes without TLS, any other mode
 * (require, verify-ca) checks the CA only. The URL's own sslrootcert also
 * works.
 */
export function poolConfig(url: string, caFile?: string): pg.PoolConfig {
  const config: pg.PoolConfig = { connectionString: url, max: 10, connectionTimeoutMillis: 5000 };
  const u = new URL(url);
  const mode = u.searchParams.get('sslmode');
  if (!caFile || mode === 'disable') return config;
  u.searchParams.delete('sslmode');
  const hostUnchecked = mode !== null && mode !== 'verify-full';
  return {
    ...config,
    connectionString: u.toString(),
    ssl: {
      ca: readFileSync(caFile, 'utf8'),
      ...(hostUnchecked && { checkServerIdentity: () => undefined }),
    },
  };
}

/**
 * Named (prepared) statements: PostgreSQL plans each once per connection.
 * This doubled claim+complete throughput in bench/ (the claim's CTE is not
 * cheap to plan). Behind PgBouncer in transaction mode this needs PgBouncer
 * 1.21+ with max_prepared_statements set.
 */
function named(name: keyof typeof SQL, values: unknown[]): pg.QueryConfig {
  return { name: `jobfleet_${name}`, text: SQL[name], values };
}

interface ClaimRequest {
  key: string;
  owner: string;
  jobId: string;
  type: string;
  leaseSeconds: number;
}

interface Completion {
  key: string;
  owner: string;
  result: string;
}

/** What one delivery asks of a group-commit statement; the ack journal's rows ride along. */
type Op = { claim: ClaimRequest } | { complete: Completion } | { journal: readonly AckEntry[] };
type OpResult = ClaimOutcome | boolean;

/** A new key has no history: one shared value, not one per claim. */
const NO_HISTORY: AttemptHistory = Object.freeze({ steps: Object.freeze({}) });

/**
 * Defaults for group commit: room for two prefetch-64 bursts; one statement
 * in flight, so that under load each carries all that piled up meanwhile
 * (docs/worker.md: a second in flight split batches and was not faster).
 */
export const GROUP_COMMIT: GroupCommitOptions = { maxBatch: 256, maxInFlight: 1 };

/** deadlock_detected, serialization_failure: the statement was rolled back as a whole; run it again */
const isRetryable = (err: unknown) =>
  ['40P01', '40001'].includes((err as { code?: unknown } | null)?.code as string);

export class ClaimStore implements RunRecordStore {
  private readonly ops: GroupCommit<Op, OpResult>;

  constructor(
    readonly pool: pg.Pool,
    groupCommit: GroupCommitOptions = GROUP_COMMIT,
    /** the worker's work queue, named by the doubts it records (null: a store that claims nothing) */
    private readonly queue: string | null = null,
  ) {
    this.ops = new GroupCommit((ops) => this.flush(ops), {
      ...groupCommit,
      // a claim and a completion of one key never share a statement (one row, one change)
      keyOf: (op) =>
        'claim' in op ? op.claim.key : 'complete' in op ? op.complete.key : undefined,
      // One message's unstorable value must not fail the others of its batch.
      alone: isMessageDataError,
    });
  }

  /** statements sent and items carried by group commit (bench figures) */
  get batchStats() {
    return this.ops.stats;
  }

  /**
   * Applies pending migrations; safe when several workers start at once. The
   * claims database holds an outbox too: where handlers' follow-up jobs wait.
   */
  async migrate(): Promise<number[]> {
    const applied = await applyMigrations(this.pool, CLAIMS_MIGRATIONS);
    await applyMigrations(this.pool, OUTBOX_MIGRATIONS);
    return applied;
  }

  /**
   * Claims `key` for a new owner token. Concurrent claims and completions go
   * together as one statement (group commit); each caller gets its own key's
   * outcome.
   */
  claim(key: string, leaseSeconds: number, jobId: string, type: string): Promise<ClaimOutcome> {
    const claim = { key, owner: randomUUID(), jobId, type, leaseSeconds };
    return this.ops.submit({ claim }) as Promise<ClaimOutcome>;
  }

  private async flush(ops: Op[]): Promise<OpResult[]> {
    const claims: ClaimRequest[] = [];
    const completions: Completion[] = [];
    const acks: AckEntry[] = [];
    for (const op of ops) {
      if ('claim' in op) claims.push(op.claim);
      else if ('complete' in op) completions.push(op.complete);
      else acks.push(...op.journal);
    }
    const byKey = (a: { key: string }, b: { key: string }) =>
      a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
    claims.sort(byKey);
    completions.sort(byKey);
    // Journal rows alone (riders whose wait is over) need no claims function.
    const query =
      claims.length + completions.length === 0
        ? named('journalAcks', journalColumns(acks))
        : named('commit', commitColumns(claims, completions, acks, this.queue));
    let rows: CommitRow[];
    for (let tries = 1; ; tries++) {
      try {
        ({ rows } = await this.pool.query<CommitRow>(query));
        break;
      } catch (err) {
        if (!isRetryable(err) || tries >= 3) throw err;
      }
    }
    // The answer names only the exceptions (migration 8): a key it does not
    // name was claimed new, or its completion recorded.
    let now: Date | undefined;
    const fenced = new Set<string>();
    const claimRows = new Map<string, ClaimRow>();
    for (const r of rows) {
      if (r.outcome === 'now') now = r.first_seen_at;
      else if (r.outcome === 'fenced') fenced.add(r.key as string);
      else claimRows.set(r.key as string, r);
    }
    // answered at once but for the rare key whose row needs a second read
    let reads = false;
    const out = ops.map((op): OpResult | Promise<OpResult> => {
      if (!('claim' in op)) return 'complete' in op ? !fenced.has(op.complete.key) : true;
      const { owner, key } = op.claim;
      const row = claimRows.get(key);
      if (!row)
        return {
          outcome: 'new',
          owner,
          attempts: 1,
          throttled: 0,
          lastError: null,
          firstSeenAt: now as Date,
          history: NO_HISTORY,
        };
      if (row.outcome !== 'unseen') return outcomeOf(owner, row);
      reads = true;
      return this.peekHeld(key);
    });
    return reads ? Promise.all(out.map((o) => Promise.resolve(o))) : (out as OpResult[]);
  }

  /**
   * The row was inserted by a concurrent claim after this statement's
   * snapshot: someone else holds it right now. A second read (rare: only on
   * this race) learns until when, so the retry waits out the lease. The
   * batch has committed: a failed read must not fail it; unknown reads as held.
   */
  private async peekHeld(key: string): Promise<ClaimOutcome> {
    const peeked = await this.pool
      .query<{ state: string; attempts: number; lease_until: Date | null }>(named('peek', [key]))
      .then(
        (r) => r.rows,
        () => [],
      );
    const p = peeked[0];
    if (p?.state === 'completed')
      return { outcome: 'completed', result: undefined, attempts: p.attempts };
    return { outcome: 'held', until: p?.lease_until ?? null, attempts: p?.attempts ?? 0 };
  }

  async renew(
    key: string,
    owner: string,
    leaseSeconds: number,
    client: pg.ClientBase | pg.Pool = this.pool,
  ): Promise<boolean> {
    return ((await client.query(named('renew', [key, owner, leaseSeconds]))).rowCount ?? 0) === 1;
  }

  /**
   * Records the terminal result; false when the claim was lost (fenced out).
   * Inside a transaction (`client`) it is one statement of its own; otherwise
   * concurrent completions go as one statement (group commit), and each
   * caller learns whether its own row was updated. Follow-up jobs are
   * inserted into the outbox in the same transaction, only when recorded: a
   * follow-up exists if and only if its job completed.
   */
  async complete(
    key: string,
    owner: string,
    result: unknown,
    client?: pg.ClientBase,
    followUps: readonly OutboxEntry[] = [],
  ): Promise<boolean> {
    if (!client && followUps.length > 0)
      return this.inTransaction((c) => this.complete(key, owner, result, c, followUps));
    if (!client)
      return (await this.ops.submit({
        complete: { key, owner, result: storableJson(result) },
      })) as boolean;
    const r = await client.query(named('complete', [key, owner, storableJson(result)]));
    const recorded = (r.rowCount ?? 0) === 1;
    if (recorded) await insertEntries(client, followUps);
    return recorded;
  }

  /** Runs `fn` in a transaction of its own, committed when it returns true. */
  private async inTransaction(fn: (c: pg.PoolClient) => Promise<boolean>): Promise<boolean> {
    const c = await this.pool.connect();
    let broken: Error | undefined;
    const onError = (err: Error) => {
      broken = err;
    };
    c.on('error', onError);
    try {
      await c.query('begin');
      const ok = await fn(c);
      await c.query(ok ? 'commit' : 'rollback');
      return ok;
    } catch (err) {
      await c.query('rollback').catch(() => undefined);
      broken ??= err as Error;
      throw err;
    } finally {
      c.off('error', onError);
      c.release(broken);
    }
  }

  /** Extends the leases of many claims in one statement; returns the keys still held. */
  async renewAll(
    claims: ReadonlyArray<{ key: string; owner: string }>,
    leaseSeconds: number,
  ): Promise<Set<string>> {
    if (claims.length === 0) return new Set();
    const { rows } = await this.pool.query<{ key: string }>(
      named('renewBatch', [
        textArray(claims.map((c) => c.key)),
        textArray(claims.map((c) => c.owner)),
        leaseSeconds,
      ]),
    );
    return new Set(rows.map((r) => r.key));
  }

  async releaseForRetry(
    key: string,
    owner: string,
    delaySeconds: number,
    error: string,
  ): Promise<boolean> {
    return (
      ((await this.pool.query(named('releaseForRetry', [key, owner, delaySeconds, error])))
        .rowCount ?? 0) === 1
    );
  }

  /**
   * Gives a throttled claim back without spending its attempt: 'released',
   * 'ceiling' (maxThrottled throttled retries already), or 'lost' (fenced out).
   */
  async releaseForThrottle(
    key: string,
    owner: string,
    delaySeconds: number,
    error: string,
    maxThrottled: number,
  ): Promise<'released' | 'ceiling' | 'lost'> {
    const { rows } = await this.pool.query<{ before: number | null; released: number }>(
      named('releaseForThrottle', [key, owner, delaySeconds, error, maxThrottled]),
    );
    const r = rows[0];
    if (!r || r.before === null) return 'lost';
    return r.released === 1 ? 'released' : 'ceiling';
  }

  async releaseForDrain(key: string, owner: string): Promise<boolean> {
    const q = named('releaseForDrain', [key, owner, this.queue]);
    return ((await this.pool.query(q)).rowCount ?? 0) === 1;
  }

  /** Gives the claim back marked in doubt (`how`: why); the next attempt decides it first. */
  async releaseInDoubt(
    key: string,
    owner: string,
    delaySeconds: number,
    error: string,
    how: 'in_doubt_thrown' | 'timed_out' | 'reconcile_unknown',
  ): Promise<boolean> {
    const q = named('releaseInDoubt', [key, owner, delaySeconds, error, how, this.queue]);
    return ((await this.pool.query(q)).rowCount ?? 0) === 1;
  }

  /** ctx.intend: the intent (JSON text) recorded and the lease extended; false when fenced out. */
  async intend(key: string, owner: string, intent: string, leaseSeconds: number): Promise<boolean> {
    const q = named('intend', [key, owner, intent, leaseSeconds]);
    return ((await this.pool.query(q)).rowCount ?? 0) === 1;
  }

  /** ctx.step: a step's result (JSON text) recorded; false when fenced out. */
  async recordStep(key: string, owner: string, name: string, result: string): Promise<boolean> {
    const q = named('recordStep', [key, owner, name, result]);
    return ((await this.pool.query(q)).rowCount ?? 0) === 1;
  }

  /** The doubt decided (not done, or re-run): the handler may run. False when fenced out. */
  async clearDoubt(key: string, owner: string): Promise<boolean> {
    return ((await this.pool.query(named('clearDoubt', [key, owner]))).rowCount ?? 0) === 1;
  }

  async recordDeadLetter(d: DeadLetterRecord): Promise<{ recorded: boolean }> {
    const { rows } = await this.pool.query<{ id: string | null }>(
      named('deadLetter', [
        d.deliveryId,
        d.jobId,
        d.key,
        d.type,
        d.schemaVersion,
        d.attempts,
        d.reason,
        d.failureClass,
        d.queue,
        d.owner,
        d.revision,
        d.payloadHash,
        d.firstSeenAt,
        d.claimOwner,
        d.payload,
      ]),
    );
    return { recorded: rows[0]?.id != null };
  }

  /** Deletes completed claims older than the retention, one index-ordered batch. */
  async sweepCompleted(retentionSeconds: number, batch = 1000): Promise<number> {
    const { rows } = await this.pool.query<{ swept: number }>(
      named('sweepCompleted', [retentionSeconds, batch]),
    );
    return rows[0]?.swept ?? 0;
  }

  /**
   * Appends acknowledged deliveries to the ack journal. With `waitMs` the
   * rows ride with the next group-commit statement (no commit of their own),
   * or go by themselves after `waitMs`.
   */
  async journalAcks(entries: readonly AckEntry[], waitMs = 0): Promise<void> {
    if (entries.length === 0) return;
    await this.ops.submit({ journal: entries }, waitMs);
  }

  /** The journal rows riding now go with a statement sent at once (a stop's last write). */
  sendRiders(): void {
    this.ops.sendRiders();
  }

  /** The claim's state for `key` (completed, dead_lettered, running, …), or undefined when none. */
  async state(key: string): Promise<string | undefined> {
    const { rows } = await this.pool.query<{ state: string }>(
      'select state from jobfleet_claims where key = $1',
      [key],
    );
    return rows[0]?.state;
  }

  /**
   * Answers only when the store takes writes: a demoted primary, a standby or
   * a database set read-only accepts connections and SELECT 1 but refuses
   * this (read-only is checked before any row is looked at; none is touched).
   */
  async ping(): Promise<void> {
    await this.pool.query('update jobfleet_claims set key = key where false');
  }
}

/** A claim's outcome from its key's row in the statement's answer; `owner` is the token it claimed with. */
function outcomeOf(owner: string, row: ClaimRow): ClaimOutcome {
  switch (row.outcome) {
    case 'new':
    case 'retry':
    case 'takeover':
      return {
        outcome: row.outcome,
        owner,
        attempts: row.attempts,
        throttled: row.throttled ?? 0,
        lastError: row.last_error,
        firstSeenAt: row.first_seen_at,
        history: row.attempt == null ? NO_HISTORY : readHistory(row.attempt),
      };
    case 'completed':
      return { outcome: 'completed', result: row.result, attempts: row.attempts };
    case 'dead_lettered':
      return { outcome: 'dead_lettered', attempts: row.attempts };
    case 'not_due':
      return { outcome: 'not_due', until: row.wait_until, attempts: row.attempts };
    default:
      return { outcome: 'held', until: row.wait_until, attempts: row.attempts };
  }
}
