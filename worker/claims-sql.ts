// The claim store's SQL, as text: one place to read every statement the
// worker sends to PostgreSQL. Each statement is one round trip; on the happy
// path one statement per event-loop turn carries the claims and the
// completions of many deliveries at once (group commit).

import type { MigrationSet } from './migrate.js';

/** Migrations, applied in order under an advisory lock so that many workers may start at once (migrate.ts). */
export const MIGRATIONS: ReadonlyArray<{ version: number; sql: string }> = [
  {
    version: 1,
    sql: `
create table jobfleet_claims (
  key            text primary key,
  state          text not null check (state in ('running', 'released', 'completed', 'dead_lettered')),
  owner          uuid,
  lease_until    timestamptz,
  retry_at       timestamptz,
  attempts       integer not null default 0,
  takeovers      integer not null default 0,
  last_claim     text,
  job_id         text,
  type           text,
  result         jsonb,
  last_error     text,
  first_seen_at  timestamptz not null default now(),
  updated_at     timestamptz not null default now(),
  completed_at   timestamptz
);
-- retention sweeps walk only completed rows, oldest first
create index jobfleet_claims_completed_at on jobfleet_claims (completed_at) where state = 'completed';

create table jobfleet_dead_letters (
  id               bigserial primary key,
  delivery_id      text not null,
  job_id           text,
  key              text,
  type             text,
  schema_version   integer,
  attempts         integer not null,
  reason           text not null,
  failure_class    text not null,
  queue            text not null,
  owner            text,
  revision         text,
  payload_hash     text not null,
  first_seen_at    timestamptz,
  dead_lettered_at timestamptz not null default now(),
  status           text not null default 'quarantined',
  -- a crash between the DLQ publish and the ack redelivers the message; the
  -- second dead-lettering of the same delivery and attempt records nothing new
  unique (delivery_id, attempts)
);
create index jobfleet_dead_letters_quarantined on jobfleet_dead_letters (dead_lettered_at) where status = 'quarantined';
`,
  },
  {
    version: 2,
    sql: `
-- The ack journal: one row per acknowledged delivery that needed a record,
-- written after the ack (in batches). It is evidence for \`jobfleet verify\`
-- ("every acked delivery has a durable terminal record"), never the record.
create table jobfleet_acks (
  id          bigserial primary key,
  delivery_id text not null,
  job_id      text,
  key         text,
  outcome     text not null,
  attempt     integer not null,
  acked_at    timestamptz not null
);
-- the claim sweep deletes a key's journal rows with the key
create index jobfleet_acks_key on jobfleet_acks (key);
`,
  },
  {
    version: 3,
    sql: `
-- The quarantine's lifecycle: quarantined → replayed | discarded | superseded
-- (its key completed meanwhile). The payload is kept here only when the
-- worker runs with JOBFLEET_DEAD_LETTER_PAYLOADS=store; otherwise it lives in
-- the dead-letter queue alone.
alter table jobfleet_dead_letters
  add column payload           bytea,
  add column resolved_at       timestamptz,
  add column resolved_by       text,
  add column resolution_reason text,
  add column replay_id         text;
create index jobfleet_dead_letters_queue_quarantined
  on jobfleet_dead_letters (queue, dead_lettered_at) where status = 'quarantined';
-- Every replay, skip and discard: who, when, why, and the payload hashes.
create table jobfleet_dead_letter_audit (
  id               bigserial primary key,
  dead_letter_id   bigint not null references jobfleet_dead_letters (id),
  action           text not null check (action in ('replayed', 'skipped_completed', 'discarded')),
  replay_id        text,
  initiator        text not null,
  reason           text not null,
  key              text,
  old_payload_hash text not null,
  new_payload_hash text,
  delivery_id      text,
  at               timestamptz not null default now()
);
create index jobfleet_dead_letter_audit_key on jobfleet_dead_letter_audit (key);
create index jobfleet_dead_letter_audit_replay on jobfleet_dead_letter_audit (replay_id);
`,
  },
  {
    version: 4,
    sql: `
-- The group-commit statements, as functions planned with sequential scans
-- off. A prepared statement's generic plan is made once per connection; made
-- while the claims table is still empty (a fresh install starting on a
-- backlog), it joins the batch against a sequential scan of the table, and
-- keeps doing so as the table grows until autovacuum's first analyze (up to
-- a minute; never, when autovacuum is off): measured 33–108 ms per statement
-- at 60,000 rows instead of 1.3 ms. Inside these functions every plan looks
-- rows up by primary key, whatever the statistics say.

-- Throttled retries (a 429 from the dependency) are counted apart from
-- attempts: they spend none, and have their own ceiling.
alter table jobfleet_claims add column throttled integer not null default 0;

-- jobfleet_claim_and_complete: records completions and claims keys for new
-- owners, many deliveries at once (the two lists never share a key).
-- Completions ($6 keys, $7 owners, $8 results) are fenced by owner token: a
-- row taken over meanwhile is not updated, and its key is missing from the
-- 'recorded' rows returned. Claims ($1 keys, $2 owners, $3 job ids, $4 types,
-- $5 lease seconds) take a new key, re-claim a released one whose retry time
-- has come, or take over a running claim whose lease expired (a dead
-- worker's); for a key it cannot claim, the last branch says why. Both lists
-- are sorted by key, so rows are locked in key order within each; across
-- the two, two workers can still meet in opposite orders (a deadlock
-- PostgreSQL breaks by failing one statement, which the caller retries).
-- One row per completion recorded (outcome 'recorded') and per claimed key
-- that exists or was claimed, named by key.
create function jobfleet_claim_and_complete(
  text[], uuid[], text[], text[], float8, text[], uuid[], jsonb[]
) returns table (key text, outcome text, attempts integer, throttled integer, last_error text,
                 result jsonb, wait_until timestamptz, first_seen_at timestamptz)
language plpgsql set enable_seqscan = off as $fn$
#variable_conflict use_column
begin
  return query
    with done as (
      update jobfleet_claims c
      set state = 'completed', result = x.result, lease_until = null, completed_at = now(), updated_at = now()
      from (select * from unnest($6::text[], $7::uuid[], $8::jsonb[]) as u(key, owner, result) order by key) x
      where c.key = x.key and c.owner = x.owner and c.state = 'running'
      returning c.key
    ), input as (
      select * from unnest($1::text[], $2::uuid[], $3::text[], $4::text[]) as i(key, owner, job_id, type)
    ), claimed as (
      insert into jobfleet_claims as c
        (key, state, owner, lease_until, attempts, last_claim, job_id, type)
      select key, 'running', owner, now() + make_interval(secs => $5), 1, 'new', job_id, type
      from input order by key
      on conflict (key) do update set
        state       = 'running',
        owner       = excluded.owner,
        lease_until = excluded.lease_until,
        retry_at    = null,
        attempts    = c.attempts + 1,
        takeovers   = c.takeovers + (c.state = 'running')::int,
        last_claim  = case when c.state = 'running' then 'takeover' else 'retry' end,
        job_id      = excluded.job_id,
        type        = excluded.type,
        updated_at  = now()
      where (c.state = 'released' and (c.retry_at is null or c.retry_at <= now()))
         or (c.state = 'running' and c.lease_until < now())
      returning c.key, c.last_claim as outcome, c.attempts, c.throttled, c.last_error,
                null::jsonb as result, null::timestamptz as wait_until, c.first_seen_at
    )
    select key, 'recorded' as outcome, null::int as attempts, null::int as throttled,
           null::text as last_error, null::jsonb as result, null::timestamptz as wait_until,
           null::timestamptz as first_seen_at
    from done
    union all
    select * from claimed
    union all
    select c.key,
           case c.state when 'completed' then 'completed'
                        when 'dead_lettered' then 'dead_lettered'
                        when 'released' then 'not_due'
                        else 'held' end,
           c.attempts, c.throttled, c.last_error, c.result,
           case c.state when 'released' then c.retry_at when 'running' then c.lease_until end,
           c.first_seen_at
    from jobfleet_claims c join input i on i.key = c.key
    where not exists (select 1 from claimed x where x.key = c.key);
end
$fn$;

-- jobfleet_renew_batch: the lease keeper's one statement per tick ($1 keys,
-- $2 owners, $3 lease seconds); returns the keys still held.
create function jobfleet_renew_batch(text[], uuid[], float8) returns table (key text)
language plpgsql set enable_seqscan = off as $fn$
#variable_conflict use_column
begin
  return query
    update jobfleet_claims c
    set lease_until = now() + make_interval(secs => $3), updated_at = now()
    from (select * from unnest($1::text[], $2::uuid[]) as u(key, owner) order by key) x
    where c.key = x.key and c.owner = x.owner and c.state = 'running'
    returning c.key;
end
$fn$;
`,
  },
  {
    version: 5,
    sql: `
-- Completion records as HOT updates. A claim's row is inserted, then updated
-- once when its job completes. No index may cover a column that update
-- changes (state, completed_at; a partial index's predicate counts), or
-- PostgreSQL writes a new entry into every index of the table for it: the
-- old partial index on completed_at cost the completion a primary-key and a
-- sweep-index insertion. The retention sweep walks first_seen_at instead,
-- which is set once at the insert (a claim completes after it was first
-- seen, so "completed before the cutoff" implies "first seen before it").
-- Free room on each page (fillfactor) lets the new row version stay on its
-- page. Measured: bench/RESULTS.md, worker throughput.
drop index jobfleet_claims_completed_at;
create index jobfleet_claims_first_seen_at on jobfleet_claims (first_seen_at);
alter table jobfleet_claims set (fillfactor = 70);

-- Generic plans for the group-commit statements. PostgreSQL's default
-- (plan_cache_mode auto) kept re-planning them on every call, because a
-- custom plan for given arrays looks cheaper than the generic one: planning
-- the claim's three CTEs took half of each statement's time (measured 0.98 →
-- 0.45 ms for one claim). With sequential scans off the generic plan looks
-- every row up by primary key, which is what a custom plan picks anyway.
alter function jobfleet_claim_and_complete(text[], uuid[], text[], text[], float8, text[], uuid[], jsonb[])
  set plan_cache_mode = force_generic_plan;
alter function jobfleet_renew_batch(text[], uuid[], float8)
  set plan_cache_mode = force_generic_plan;
`,
  },
  {
    version: 6,
    sql: `
-- jobfleet_group_commit: jobfleet_claim_and_complete ($1..$8, unchanged)
-- plus the ack journal's pending rows ($9 delivery ids, $10 job ids, $11
-- keys, $12 outcomes, $13 attempts, $14 acked-at in ms since the epoch), in
-- the same transaction. Journal rows written by a statement of their own ran
-- beside the claims' statement and stretched it (measured: a 500-row insert
-- held the claims' statement in flight for 7–8 ms instead of 2); riding along
-- they cost no commit of their own. jobfleet_claim_and_complete stays for
-- workers of the previous version during a rollout.
create function jobfleet_group_commit(
  text[], uuid[], text[], text[], float8, text[], uuid[], jsonb[],
  text[], text[], text[], text[], integer[], float8[]
) returns table (key text, outcome text, attempts integer, throttled integer, last_error text,
                 result jsonb, wait_until timestamptz, first_seen_at timestamptz)
language plpgsql as $fn$
begin
  insert into jobfleet_acks (delivery_id, job_id, key, outcome, attempt, acked_at)
  select d, j, k, o, a, to_timestamp(t / 1000.0)
  from unnest($9, $10, $11, $12, $13, $14) as x(d, j, k, o, a, t);
  return query select * from jobfleet_claim_and_complete($1, $2, $3, $4, $5, $6, $7, $8);
end
$fn$;
`,
  },
  {
    version: 7,
    sql: `
-- The ack journal without its surrogate key: nothing reads jobfleet_acks.id,
-- and its sequence and primary-key index cost every journal row a nextval and
-- an index insertion (rows are found by key, through jobfleet_acks_key).
-- Workers of earlier versions never write the column: their inserts go on.
-- Dropping it drops the primary key and the sequence it owns with it.
alter table jobfleet_acks drop column id;
`,
  },
  {
    version: 8,
    sql: `
-- jobfleet_commit: the one group-commit statement from this version on.
-- It does what jobfleet_group_commit does (same parameters, same locking
-- order, the journal's rows in the same transaction) and answers only what
-- the worker cannot know already. A claimed key's row said nothing on the
-- happy path: a new claim has attempt 1, no throttled retries, no last error
-- and was first seen now. So it answers one 'now' row (the transaction's
-- clock, the new claims' first_seen_at), one row per completion that
-- updated nothing ('fenced': the owner lost its claim meanwhile), one per
-- claim that is not new (retry, takeover) and one per key it did not claim
-- (completed, dead_lettered, not_due, held; 'unseen' when a concurrent
-- insert hid the row from this statement's snapshot). A batch of 20 claims
-- and 20 completions answered 40 rows, each parsed by the worker into an
-- object with a timestamp; now it answers 1. The earlier functions stay for
-- workers of earlier versions during a rollout.
create function jobfleet_commit(
  text[], uuid[], text[], text[], float8, text[], uuid[], jsonb[],
  text[], text[], text[], text[], integer[], float8[]
) returns table (key text, outcome text, attempts integer, throttled integer, last_error text,
                 result jsonb, wait_until timestamptz, first_seen_at timestamptz)
-- sequential scans off and a generic plan, as migrations 4 and 5 say why
language plpgsql set enable_seqscan = off set plan_cache_mode = force_generic_plan as $fn$
#variable_conflict use_column
begin
  insert into jobfleet_acks (delivery_id, job_id, key, outcome, attempt, acked_at)
  select d, j, k, o, a, to_timestamp(t / 1000.0)
  from unnest($9, $10, $11, $12, $13, $14) as x(d, j, k, o, a, t);
  return query
    with done as (
      update jobfleet_claims c
      set state = 'completed', result = x.result, lease_until = null, completed_at = now(), updated_at = now()
      from (select * from unnest($6::text[], $7::uuid[], $8::jsonb[]) as u(key, owner, result) order by key) x
      where c.key = x.key and c.owner = x.owner and c.state = 'running'
      returning c.key
    ), input as (
      select * from unnest($1::text[], $2::uuid[], $3::text[], $4::text[]) as i(key, owner, job_id, type)
    ), claimed as (
      insert into jobfleet_claims as c
        (key, state, owner, lease_until, attempts, last_claim, job_id, type)
      select key, 'running', owner, now() + make_interval(secs => $5), 1, 'new', job_id, type
      from input order by key
      on conflict (key) do update set
        state       = 'running',
        owner       = excluded.owner,
        lease_until = excluded.lease_until,
        retry_at    = null,
        attempts    = c.attempts + 1,
        takeovers   = c.takeovers + (c.state = 'running')::int,
        last_claim  = case when c.state = 'running' then 'takeover' else 'retry' end,
        job_id      = excluded.job_id,
        type        = excluded.type,
        updated_at  = now()
      where (c.state = 'released' and (c.retry_at is null or c.retry_at <= now()))
         or (c.state = 'running' and c.lease_until < now())
      returning c.key, c.last_claim as outcome, c.attempts, c.throttled, c.last_error,
                null::jsonb as result, null::timestamptz as wait_until, c.first_seen_at
    )
    select null::text, 'now', null::int, null::int, null::text, null::jsonb, null::timestamptz, now()
    union all
    select k, 'fenced', null, null, null, null, null, null
    from unnest($6::text[]) as f(k)
    where not exists (select 1 from done where done.key = f.k)
    union all
    select * from claimed where outcome <> 'new'
    union all
    select i.key,
           case c.state when 'completed' then 'completed'
                        when 'dead_lettered' then 'dead_lettered'
                        when 'released' then 'not_due'
                        when 'running' then 'held'
                        else 'unseen' end,
           c.attempts, c.throttled, c.last_error, c.result,
           case c.state when 'released' then c.retry_at when 'running' then c.lease_until end,
           c.first_seen_at
    from input i left join jobfleet_claims c on c.key = i.key
    where not exists (select 1 from claimed x where x.key = i.key);
end
$fn$;
`,
  },
  {
    version: 9,
    sql: `
-- In-doubt runs (docs/in-doubt.md). A claim row keeps what the next attempt
-- must know of the one before it:
--   claimed_at  when the current owner claimed it (its attempt's start);
--   intent      what the current attempt said it is about to do (ctx.intend,
--               or the step it is in), written before the call, fenced by owner;
--   ended       how the last finished attempt ended: failed, throttled, in_doubt;
--   previous    the attempt before the current one, as ctx.previous shows it;
--   doubt       the attempt whose outcome is unknown and not yet decided: set
--               when a running claim is taken over (its owner died mid-run),
--               or when a run ends in doubt (InDoubt, a timeout, a drain);
--               cleared once reconcile or the policy lets the handler run;
--               it names its work queue, so that the operator counts a
--               JobWorker's doubts when many share one claims database;
--   steps       the recorded results of ctx.step: step name → the list of its
--               results, appended, never replaced: one entry, unless a step
--               ran twice (jobfleet verify checks that none did).
-- All nullable and without defaults: adding them rewrites nothing, and
-- workers of earlier versions, which never write them, go on.
alter table jobfleet_claims
  add column claimed_at timestamptz,
  add column intent     jsonb,
  add column ended      text,
  add column previous   jsonb,
  add column doubt      jsonb,
  add column steps      jsonb;
-- the doubts still to decide, by queue, for the operator's count (few rows:
-- the hot path's completion leaves doubt alone, so it stays a HOT update)
create index jobfleet_claims_in_doubt on jobfleet_claims ((doubt->>'queue')) where doubt is not null;

-- A held in-doubt job is decided by a person: replayed (re-run), or marked
-- done without running (its claim completed with who decided and why).
alter table jobfleet_dead_letter_audit drop constraint jobfleet_dead_letter_audit_action_check;
alter table jobfleet_dead_letter_audit add constraint jobfleet_dead_letter_audit_action_check
  check (action in ('replayed', 'skipped_completed', 'discarded', 'marked_done'));

-- jobfleet_commit_attempts: jobfleet_commit (migration 8: same parameters,
-- same locking order, same answers) that also keeps the attempts' history
-- above; $15 is the claiming worker's queue. A claim of a key that ran
-- before (retry, takeover) answers one more column, attempt: {previous,
-- doubt, steps}. A new claim answers nothing, as before, and its insert only
-- adds claimed_at.
create function jobfleet_commit_attempts(
  text[], uuid[], text[], text[], float8, text[], uuid[], jsonb[],
  text[], text[], text[], text[], integer[], float8[], text
) returns table (key text, outcome text, attempts integer, throttled integer, last_error text,
                 result jsonb, wait_until timestamptz, first_seen_at timestamptz, attempt jsonb)
language plpgsql set enable_seqscan = off set plan_cache_mode = force_generic_plan as $fn$
#variable_conflict use_column
begin
  insert into jobfleet_acks (delivery_id, job_id, key, outcome, attempt, acked_at)
  select d, j, k, o, a, to_timestamp(t / 1000.0)
  from unnest($9, $10, $11, $12, $13, $14) as x(d, j, k, o, a, t);
  return query
    with done as (
      update jobfleet_claims c
      set state = 'completed', result = x.result, lease_until = null, completed_at = now(), updated_at = now()
      from (select * from unnest($6::text[], $7::uuid[], $8::jsonb[]) as u(key, owner, result) order by key) x
      where c.key = x.key and c.owner = x.owner and c.state = 'running'
      returning c.key
    ), input as (
      select * from unnest($1::text[], $2::uuid[], $3::text[], $4::text[]) as i(key, owner, job_id, type)
    ), claimed as (
      insert into jobfleet_claims as c
        (key, state, owner, lease_until, attempts, last_claim, job_id, type, claimed_at)
      select key, 'running', owner, now() + make_interval(secs => $5), 1, 'new', job_id, type, now()
      from input order by key
      on conflict (key) do update set
        state       = 'running',
        owner       = excluded.owner,
        lease_until = excluded.lease_until,
        retry_at    = null,
        attempts    = c.attempts + 1,
        takeovers   = c.takeovers + (c.state = 'running')::int,
        last_claim  = case when c.state = 'running' then 'takeover' else 'retry' end,
        job_id      = excluded.job_id,
        type        = excluded.type,
        updated_at  = now(),
        claimed_at  = now(),
        intent      = null,
        ended       = null,
        previous    = jsonb_build_object(
                        'attempt', c.attempts, 'owner', c.owner, 'startedAt', c.claimed_at,
                        'intent', c.intent, 'error', c.last_error,
                        'ended', case when c.state = 'running' then 'in_doubt' else c.ended end),
        -- a running claim taken over: its owner died mid-run. Unless it was
        -- only deciding an earlier doubt (still set), that run is the doubt now.
        doubt       = case when c.state = 'running'
                        then coalesce(c.doubt, jsonb_build_object(
                          'attempt', c.attempts, 'owner', c.owner, 'startedAt', c.claimed_at,
                          'intent', c.intent, 'how', 'taken_over', 'queue', $15))
                        else c.doubt end
      where (c.state = 'released' and (c.retry_at is null or c.retry_at <= now()))
         or (c.state = 'running' and c.lease_until < now())
      returning c.key, c.last_claim as outcome, c.attempts, c.throttled, c.last_error,
                null::jsonb as result, null::timestamptz as wait_until, c.first_seen_at,
                jsonb_strip_nulls(jsonb_build_object('previous', c.previous, 'doubt', c.doubt, 'steps', c.steps)) as attempt
    )
    select null::text, 'now', null::int, null::int, null::text, null::jsonb, null::timestamptz, now(), null::jsonb
    union all
    select k, 'fenced', null, null, null, null, null, null, null
    from unnest($6::text[]) as f(k)
    where not exists (select 1 from done where done.key = f.k)
    union all
    select * from claimed where outcome <> 'new'
    union all
    select i.key,
           case c.state when 'completed' then 'completed'
                        when 'dead_lettered' then 'dead_lettered'
                        when 'released' then 'not_due'
                        when 'running' then 'held'
                        else 'unseen' end,
           c.attempts, c.throttled, c.last_error, c.result,
           case c.state when 'released' then c.retry_at when 'running' then c.lease_until end,
           c.first_seen_at, null::jsonb
    from input i left join jobfleet_claims c on c.key = i.key
    where not exists (select 1 from claimed x where x.key = i.key);
end
$fn$;
`,
  },
];

/** The claims tables' migrations, recorded in jobfleet_schema_migrations. */
export const CLAIMS_MIGRATIONS: MigrationSet = {
  table: 'jobfleet_schema_migrations',
  migrations: MIGRATIONS,
};

export const SQL = {
  /**
   * One group-commit statement: claims ($1..$5), completions ($6..$8) and the
   * ack journal's rows ($9..$14) together; answers only what the worker
   * cannot infer (migration 8), and a retried or taken-over claim's history (migration 9).
   */
  commit: `select * from jobfleet_commit_attempts($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,

  /** $1 keys, $2 owners, $3 lease seconds: the lease keeper's one statement per tick; returns the keys still held. */
  renewBatch: `select * from jobfleet_renew_batch($1, $2, $3)`,

  /** $1 key: the fallback read when a concurrent insert hid the row from the claim's snapshot. */
  peek: `select state, attempts, lease_until from jobfleet_claims where key = $1`,

  /** $1 key, $2 owner, $3 lease seconds. Fenced: only the current owner extends its lease. */
  renew: `update jobfleet_claims set lease_until = now() + make_interval(secs => $3), updated_at = now()
          where key = $1 and owner = $2 and state = 'running'`,

  /** $1 key, $2 owner, $3 result. Fenced: a worker whose lease was taken over records nothing. */
  complete: `update jobfleet_claims
             set state = 'completed', result = $3, lease_until = null, completed_at = now(), updated_at = now()
             where key = $1 and owner = $2 and state = 'running'`,

  /** $1 key, $2 owner, $3 seconds until the retry may run, $4 error. */
  releaseForRetry: `update jobfleet_claims
                    set state = 'released', lease_until = null, retry_at = now() + make_interval(secs => $3),
                        last_error = $4, ended = 'failed', updated_at = now()
                    where key = $1 and owner = $2 and state = 'running'`,

  /**
   * $1 key, $2 owner, $3 seconds until the retry may run, $4 error, $5 the
   * ceiling of throttled retries. The dependency throttled: the claim goes
   * back with its attempt refunded (the job did not fail; its dependency was
   * busy) and the throttled count raised — unless that count reached the
   * ceiling. \`before\` is the count before (null: the claim was lost),
   * \`released\` whether it went back.
   */
  releaseForThrottle: `
with cur as (
  select key, throttled from jobfleet_claims
  where key = $1 and owner = $2 and state = 'running'
  for update
), released as (
  update jobfleet_claims c
  set state = 'released', lease_until = null, retry_at = now() + make_interval(secs => $3),
      last_error = $4, attempts = greatest(c.attempts - 1, 0), throttled = c.throttled + 1,
      ended = 'throttled', updated_at = now()
  from cur where c.key = cur.key and cur.throttled < $5
  returning 1
)
select (select throttled from cur) as before, (select count(*) from released)::int as released`,

  /**
   * $1 key, $2 owner, $3 queue. A drain gives the claim back at once and refunds the
   * attempt: the handler was stopped by a deploy, not by its own failure.
   * An aborted run may have made its call before it stopped: the next
   * attempt decides it first (docs/in-doubt.md).
   */
  releaseForDrain: `update jobfleet_claims
                    set state = 'released', lease_until = null, retry_at = null,
                        attempts = greatest(attempts - 1, 0), ended = 'in_doubt',
                        doubt = coalesce(doubt, jsonb_build_object(
                          'attempt', attempts, 'owner', owner, 'startedAt', claimed_at,
                          'intent', intent, 'how', 'drained', 'queue', $3::text)),
                        updated_at = now()
                    where key = $1 and owner = $2 and state = 'running'`,

  /**
   * $1 key, $2 owner, $3 seconds until the retry may run, $4 error, $5 how
   * (in_doubt_thrown, timed_out, reconcile_unknown), $6 queue. The run ended without
   * knowing whether its effect happened: the next attempt decides it before
   * anything runs again. An undecided earlier doubt (reconcile answered
   * unknown) stays the doubt.
   */
  releaseInDoubt: `update jobfleet_claims
                   set state = 'released', lease_until = null, retry_at = now() + make_interval(secs => $3),
                       last_error = $4, ended = 'in_doubt',
                       doubt = coalesce(doubt, jsonb_build_object(
                         'attempt', attempts, 'owner', owner, 'startedAt', claimed_at,
                         'intent', intent, 'how', $5::text, 'queue', $6::text)),
                       updated_at = now()
                   where key = $1 and owner = $2 and state = 'running'`,

  /**
   * $1 key, $2 owner, $3 the intent (jsonb), $4 lease seconds. Fenced: a
   * worker whose claim was taken over records nothing, and is told so before
   * its call. Extends the lease, as the call is about to start.
   */
  intend: `update jobfleet_claims
           set intent = $3, lease_until = greatest(lease_until, now() + make_interval(secs => $4)),
               updated_at = now()
           where key = $1 and owner = $2 and state = 'running'`,

  /**
   * $1 key, $2 owner, $3 step name, $4 its result (jsonb). Fenced; the
   * step's intent is spent. Appended to the step's list of results, so that
   * a step that ran twice shows (jobfleet verify: one-result-per-step).
   */
  recordStep: `update jobfleet_claims
               set steps = coalesce(steps, '{}'::jsonb) || jsonb_build_object(
                     $3::text, coalesce(steps -> $3::text, '[]'::jsonb) || jsonb_build_array($4::jsonb)),
                   intent = null, updated_at = now()
               where key = $1 and owner = $2 and state = 'running'`,

  /** $1 key, $2 owner. The doubt is decided (not done, or re-run by policy): the handler runs. Fenced. */
  clearDoubt: `update jobfleet_claims set doubt = null, updated_at = now()
               where key = $1 and owner = $2 and state = 'running'`,

  /**
   * $1 delivery id, $2 job id, $3 key, $4 type, $5 schema version, $6 attempts,
   * $7 reason, $8 failure class, $9 queue, $10 owner team, $11 revision,
   * $12 payload hash, $13 first seen, $14 claim owner (null: never claimed),
   * $15 payload (null unless the worker stores payloads).
   * Records the dead letter and, when we hold the claim, marks the key
   * dead-lettered — atomically, in one round trip.
   */
  deadLetter: `
with dl as (
  insert into jobfleet_dead_letters
    (delivery_id, job_id, key, type, schema_version, attempts, reason, failure_class,
     queue, owner, revision, payload_hash, first_seen_at, payload)
  values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $15)
  on conflict (delivery_id, attempts) do nothing
  returning id
), claim as (
  update jobfleet_claims
  set state = 'dead_lettered', lease_until = null, last_error = $7, updated_at = now()
  where $14::uuid is not null and key = $3 and owner = $14::uuid and state = 'running'
  returning 1
)
select (select id from dl) as id, (select count(*) from claim)::int as claim_updated`,

  /**
   * $1 retention seconds, $2 batch size. Walks the index on first_seen_at,
   * oldest first (migration 5 says why not completed_at): keys older than
   * the retention that are not completed (quarantined ones) are walked past
   * on every sweep. A swept key's journal rows go with it, so that verify
   * never looks for a record that retention removed on purpose.
   */
  sweepCompleted: `
with swept as (
  delete from jobfleet_claims
  where key in (
    select key from jobfleet_claims
    where first_seen_at < now() - make_interval(secs => $1)
      and state = 'completed' and completed_at < now() - make_interval(secs => $1)
    order by first_seen_at
    limit $2
  )
  returning key
), journal as (
  delete from jobfleet_acks where key in (select key from swept)
)
select count(*)::int as swept from swept`,

  /** $1..$6: parallel arrays of delivery id, job id, key, outcome, attempt, acked-at (ms). */
  journalAcks: `
insert into jobfleet_acks (delivery_id, job_id, key, outcome, attempt, acked_at)
select d, j, k, o, a, to_timestamp(t / 1000.0)
from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::float8[]) as x(d, j, k, o, a, t)`,
} as const;
