// The claim store's invariants, as queries that return the rows breaking
// them. `jobfleet verify` runs them against a production claims database; the
// chaos soak and the tests run them too. Each query is printed with its
// result, so that a runbook can quote it and an on-call engineer can rerun it
// in psql.
import type pg from 'pg';

export interface Invariant {
  name: string;
  /** what holds when the query returns no rows */
  claim: string;
  /** returns the violating rows */
  sql: string;
  /** what to look at when it fails */
  fix: string;
}

export interface InvariantResult {
  name: string;
  claim: string;
  sql: string;
  fix: string;
  violations: number;
  /** the first violating rows, as returned */
  sample: Record<string, unknown>[];
}

export interface VerifyOptions {
  /** the workers' JOBFLEET_MAX_ATTEMPTS */
  maxAttempts: number;
  /** checked after the claim store's own invariants */
  extra?: Invariant[];
}

/** Violating rows shown per invariant. */
const SAMPLE = 20;

/** A claim still `running` this long after its last update, over the ceiling, is stuck, not mid-dead-lettering. */
const STUCK_SECONDS = 60;

export const INVARIANTS: readonly Invariant[] = [
  {
    name: 'one-terminal-result-per-key',
    claim: 'an idempotency key has at most one terminal result (completed or dead-lettered)',
    sql: `select key, count(*) as terminal_results
from jobfleet_claims
where state in ('completed', 'dead_lettered')
group by key
having count(*) > 1`,
    fix: 'the primary key on jobfleet_claims(key) is missing or was bypassed: restore it (see docs/runbook.md) before more work runs',
  },
  {
    name: 'acked-deliveries-recorded',
    claim: 'every acknowledged delivery has a durable terminal record',
    sql: `select a.outcome, a.delivery_id, a.key, a.attempt, a.acked_at
from jobfleet_acks a
where case a.outcome
  when 'completed' then not exists (
    select 1 from jobfleet_claims c where c.key = a.key and c.state = 'completed')
  when 'duplicate' then not exists (
    select 1 from jobfleet_claims c where c.key = a.key and c.state in ('completed', 'dead_lettered'))
    -- a replay gives a dead-lettered key a fresh start; its earlier duplicates stay explained
    and not exists (
    select 1 from jobfleet_dead_letter_audit r where r.key = a.key and r.action = 'replayed' and r.at > a.acked_at)
  when 'retried' then not exists (
    select 1 from jobfleet_claims c where c.key = a.key)
  when 'dead_lettered' then not exists (
    select 1 from jobfleet_dead_letters x where x.delivery_id = a.delivery_id)
  else true
end`,
    fix: 'a message was acked without its record: that job may be lost; find it by delivery_id in the producer and republish it',
  },
  {
    name: 'retries-within-ceiling',
    claim: 'no active retry exceeds the attempt ceiling ($1)',
    sql: `select 'claim' as source, key, state, attempts
from jobfleet_claims
where (state = 'released' and attempts >= $1)
   or (state = 'running' and attempts > $1 and updated_at < now() - interval '${STUCK_SECONDS} seconds')
union all
select 'ack journal', key, 'retried', attempt
from jobfleet_acks
where outcome = 'retried' and attempt >= $1`,
    fix: 'a retry was scheduled past JOBFLEET_MAX_ATTEMPTS: check that every worker of this queue runs with the same ceiling (verify --max-attempts)',
  },
  {
    name: 'dead-letters-replayable',
    claim: 'every quarantined dead letter has the metadata an audited replay needs',
    sql: `select id, delivery_id, key, failure_class,
  concat_ws(', ',
    case when coalesce(delivery_id, '') = '' then 'no delivery id' end,
    case when coalesce(queue, '') = '' then 'no origin queue' end,
    case when coalesce(reason, '') = '' then 'no reason' end,
    case when coalesce(failure_class, '') = '' then 'no failure class' end,
    case when payload_hash is null or payload_hash !~ '^[0-9a-f]{64}$' then 'no payload hash' end,
    case when attempts is null or attempts < 0 then 'no attempt count' end,
    case when dead_lettered_at is null then 'no dead-lettered time' end,
    case when coalesce(key, '') = '' and failure_class in ('permanent', 'attempts_exhausted')
         then 'no idempotency key' end
  ) as missing
from jobfleet_dead_letters
where status = 'quarantined'
  and (coalesce(delivery_id, '') = '' or coalesce(queue, '') = '' or coalesce(reason, '') = ''
    or coalesce(failure_class, '') = '' or payload_hash is null or payload_hash !~ '^[0-9a-f]{64}$'
    or attempts is null or attempts < 0 or dead_lettered_at is null
    or (coalesce(key, '') = '' and failure_class in ('permanent', 'attempts_exhausted')))`,
    fix: 'the entry cannot be replayed as it is: inspect it with `jobfleet dlq show`, then replay with an edit and a reason, or discard with a reason',
  },
  {
    name: 'one-result-per-step',
    claim: 'no key has two recorded results for one ctx.step (a step runs once per key)',
    sql: `select c.key, s.step, jsonb_array_length(s.results) as results
from jobfleet_claims c, jsonb_each(c.steps) as s(step, results)
where c.steps is not null and jsonb_typeof(s.results) = 'array' and jsonb_array_length(s.results) > 1`,
    fix: 'a step ran twice for one key: two workers held its claim at once (a clock or lease fault) — look up both effects at the downstream; keep JOBFLEET_LEASE_SECONDS well above the downstream timeout',
  },
];

/** Held in-doubt jobs: not a violation, each waits for a person (docs/in-doubt.md#a-held-job). */
export const HELD_IN_DOUBT_SQL = `select id, key, reason, dead_lettered_at
from jobfleet_dead_letters
where status = 'quarantined' and failure_class = 'in_doubt'
order by dead_lettered_at, id`;

/** The held in-doubt jobs (the first `limit`) and how many there are. */
export async function heldInDoubt(
  db: Pick<pg.Pool, 'query'>,
  limit = SAMPLE,
): Promise<{ count: number; sample: Record<string, unknown>[] }> {
  const { rows: count } = await db.query<{ n: string }>(
    `select count(*) as n from (${HELD_IN_DOUBT_SQL}) v`,
  );
  const { rows: sample } = await db.query<Record<string, unknown>>(
    `select * from (${HELD_IN_DOUBT_SQL}) v limit ${limit}`,
  );
  return { count: Number(count[0]?.n ?? 0), sample };
}

/** A SQL identifier, optionally schema-qualified, quoted part by part. */
function quoteIdent(name: string): string {
  if (!/^[^.\s"]+(\.[^.\s"]+)?$/.test(name))
    throw new Error(`"${name}" is not a table or column name (schema.table at most, no quotes)`);
  return name
    .split('.')
    .map((p) => `"${p}"`)
    .join('.');
}

/**
 * The proof that can fail: the user's own record of business effects (a
 * table written in the job's transaction, or an export of the downstream's
 * idempotency records, loaded next to the claims) against the completed
 * claims, by key. One effect per completed key, none without one. The
 * primary key makes "one terminal result per key" hold by construction; this
 * checks what the side effects actually did.
 */
export function effectsInvariant(o: {
  table: string;
  keyColumn: string;
  /** when set, only effects at or after the oldest completed claim still kept (retention sweeps the rest) */
  timeColumn?: string;
}): Invariant {
  const t = quoteIdent(o.table);
  const k = quoteIdent(o.keyColumn);
  // Every effect counts toward "more than one"; only the "effect without a
  // claim" direction skips effects older than the oldest claim kept (their
  // claims may have been swept). With no completed claim at all, nothing is
  // skipped: effects then have no claim, and say so.
  const last = o.timeColumn ? `max(e.${quoteIdent(o.timeColumn)})` : 'null::timestamptz';
  return {
    name: 'one-effect-per-completed-key',
    claim: `each completed key has exactly one row in ${o.table}, and every row there has a completed key`,
    sql: `with completed as (select key, updated_at from jobfleet_claims where state = 'completed'),
effects as (
  select e.${k}::text as key, count(*) as effects, ${last} as last_at
  from ${t} e
  group by 1)
select coalesce(c.key, e.key) as key,
  case when c.key is null then 'effect without a completed claim'
       when e.key is null then 'completed claim without an effect'
       else 'more than one effect' end as problem,
  coalesce(e.effects, 0) as effects
from completed c full join effects e on e.key = c.key
where e.key is null or e.effects > 1
   or (c.key is null and (e.last_at is null
       or e.last_at >= coalesce((select min(updated_at) from completed), '-infinity')))`,
    fix: 'more than one effect: the side effect ran outside the claim (a handler writing through another connection, or a second consumer without jobfleet); an effect without a claim: written by something else, or its claim was swept (pass --effects-time-column); a claim without an effect: the handler completed without writing it',
  };
}

/** Runs every invariant; `db` is a client or pool whose search_path reaches the jobfleet tables. */
export async function checkInvariants(
  db: Pick<pg.Pool, 'query'>,
  opts: VerifyOptions,
): Promise<InvariantResult[]> {
  const results: InvariantResult[] = [];
  for (const inv of [...INVARIANTS, ...(opts.extra ?? [])]) {
    const params = inv.sql.includes('$1') ? [opts.maxAttempts] : [];
    const { rows: count } = await db.query<{ n: string }>(
      `select count(*) as n from (${inv.sql}) v`,
      params,
    );
    const { rows: sample } = await db.query<Record<string, unknown>>(
      `select * from (${inv.sql}) v limit ${SAMPLE}`,
      params,
    );
    results.push({
      name: inv.name,
      claim: inv.claim.replace('$1', String(opts.maxAttempts)),
      sql: inv.sql,
      fix: inv.fix,
      violations: Number(count[0]?.n ?? 0),
      sample,
    });
  }
  return results;
}

/** How many keys hold a terminal result: the denominator the runbook quotes next to the first query. */
export async function terminalKeyCount(db: Pick<pg.Pool, 'query'>): Promise<number> {
  const { rows } = await db.query<{ n: string }>(
    `select count(*) as n from jobfleet_claims where state in ('completed', 'dead_lettered')`,
  );
  return Number(rows[0]?.n ?? 0);
}
