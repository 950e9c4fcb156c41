// The outbox's tables and statements, as text (docs/wire-format.md documents
// the table for producers in other languages). Its migrations are a set of
// their own: a producer's database gets the outbox and nothing else.
import type { MigrationSet } from '../migrate.js';

export const OUTBOX_MIGRATIONS: MigrationSet = {
  table: 'jobfleet_outbox_migrations',
  migrations: [
    {
      version: 1,
      sql: `
-- One row per job to publish, inserted in the producer's own transaction.
-- The relay publishes unsent rows in id order (for one producer's
-- transactions, one after the other, that is their commit order) and sets
-- sent_at after the broker's confirm.
create table jobfleet_outbox (
  id             bigserial primary key,
  queue          text not null check (queue <> ''),
  message_id     text not null check (message_id <> ''),
  key            text not null check (key <> ''),
  type           text not null check (type <> ''),
  schema_version integer not null,
  -- json, not jsonb: the payload is published as it was written
  payload        json not null,
  -- more AMQP headers, string values (e.g. traceparent)
  headers        jsonb,
  created_at     timestamptz not null default clock_timestamp(),
  -- publishes tried, as far as the relays know: 2 or more when a relay died
  -- with the row in flight, so that a copy may have gone out twice (the
  -- consumer's claim absorbs it: same key)
  publishes      integer not null default 0,
  -- a row the broker refused waits until then (the others go on)
  retry_at       timestamptz,
  last_error     text,
  sent_at        timestamptz
);
-- the relay's batches and the operator's oldest-unsent read walk only these
create index jobfleet_outbox_unsent on jobfleet_outbox (id) where sent_at is null;
-- retention deletes sent rows, oldest first
create index jobfleet_outbox_sent_at on jobfleet_outbox (sent_at) where sent_at is not null;

-- What the active relay last did: one row, read by the operator
-- (OutboxDelivering) and by \`kubectl jobworker why\`.
create table jobfleet_outbox_relay (
  one           boolean primary key default true check (one),
  holder        text not null,
  active_since  timestamptz not null,
  heartbeat_at  timestamptz not null,
  last_sent_at  timestamptz,
  last_error    text,
  last_error_at timestamptz,
  -- the rows the relay has published and not yet marked: whoever takes the
  -- lock over counts their second publish
  in_flight     bigint[] not null default '{}'
);

-- Wakes the relay within milliseconds of a commit (NOTIFY is delivered at
-- commit, once per transaction and payload); polling covers what it misses.
create function jobfleet_outbox_notify() returns trigger language plpgsql as $$
begin
  perform pg_notify('jobfleet_outbox', tg_table_schema);
  return null;
end $$;
create trigger jobfleet_outbox_notify after insert on jobfleet_outbox
  for each statement execute function jobfleet_outbox_notify();
`,
    },
  ],
};

/** The LISTEN channel; a notification's payload is the schema whose outbox has new rows. */
export const NOTIFY_CHANNEL = 'jobfleet_outbox';

/** Advisory lock class of the relay's lock; the object is the table's oid (one relay per table). */
const RELAY_LOCK_CLASS = 0x6a6f62; // "job"

export const OUTBOX_SQL = {
  /** $1..$9 arrays, one element per job: rows in the caller's transaction. */
  insert: `insert into jobfleet_outbox
             (queue, message_id, key, type, schema_version, payload, headers, created_at)
           select * from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[],
                                $6::json[], $7::jsonb[], $8::timestamptz[])
           returning id`,

  /** The relay's session lock, and the schema its notifications name. */
  tryLock: `select pg_try_advisory_lock(${RELAY_LOCK_CLASS}, 'jobfleet_outbox'::regclass::oid::int) as locked,
                   current_schema() as schema`,

  /**
   * The lock's session notices a peer gone without a word (its node lost,
   * its network cut) within about 25 s, not the system's two hours: the
   * server ends the backend, and the lock goes with it.
   */
  keepalive: `select set_config('tcp_keepalives_idle', '10', false),
                     set_config('tcp_keepalives_interval', '5', false),
                     set_config('tcp_keepalives_count', '3', false)`,

  /**
   * $1 seconds: the holder's backend ended when it has run no statement for
   * that long (an active relay runs one every poll: this one's process is
   * frozen, its session open, and keepalives cannot tell), so that a standby
   * can take the lock. A backend of another role shows no state_change here,
   * and is left alone. Answers whether one was ended.
   */
  endSilent: `select coalesce(bool_or(pg_terminate_backend(l.pid)), false) as ended
              from pg_locks l join pg_stat_activity a on a.pid = l.pid
              where l.locktype = 'advisory' and l.granted
                and l.database = (select oid from pg_database where datname = current_database())
                and l.classid = ${RELAY_LOCK_CLASS} and l.objid = 'jobfleet_outbox'::regclass::oid
                and a.state_change < now() - $1 * interval '1 second'`,

  /**
   * $1 holder: the relay is active. Answers the rows the previous holder
   * had in flight (published, perhaps, and not marked).
   */
  activate: `with before as (select in_flight from jobfleet_outbox_relay)
             insert into jobfleet_outbox_relay (holder, active_since, heartbeat_at)
             values ($1, now(), now())
             on conflict (one) do update
               set holder = excluded.holder, active_since = now(), heartbeat_at = now(),
                   last_error = null, last_error_at = null, in_flight = '{}'
             returning coalesce((select in_flight from before), '{}')::text[] as in_flight`,

  /** $1 holder, $2 the last error (null: none since the last heartbeat). */
  heartbeat: `update jobfleet_outbox_relay set heartbeat_at = now(),
                     last_error = coalesce($2, last_error),
                     last_error_at = case when $2::text is null then last_error_at else now() end
              where holder = $1`,

  /**
   * $1 batch size, $2 the ids of the batches in flight, $3 holder: the next
   * unsent rows in id order, noted in flight with the others (one statement:
   * a relay that dies with them published is known to have).
   */
  take: `with next as (
           select id, queue, message_id, key, type, schema_version, payload::text as payload,
                  headers, (extract(epoch from created_at) * 1000)::float8 as created_ms, publishes
           from jobfleet_outbox
           where sent_at is null and (retry_at is null or retry_at <= now())
             and id <> all($2::bigint[])
           order by id limit $1
         ), noted as (
           update jobfleet_outbox_relay
           set in_flight = $2::bigint[] || array(select id from next)
           where holder = $3
         )
         select id::text as id, queue, message_id, key, type, schema_version, payload, headers,
                created_ms, publishes
         from next order by next.id`,

  /**
   * $1 ids confirmed by the broker, $2 holder, $3 the ids still in flight, $4
   * those of them a dead relay had published too (a WITH that writes runs
   * whether read or not).
   */
  sent: `with sent as (
           update jobfleet_outbox
           set sent_at = now(), last_error = null, retry_at = null,
               publishes = publishes + case when id = any($4::bigint[]) then 2 else 1 end
           where id = any($1::bigint[]) and sent_at is null
         )
         update jobfleet_outbox_relay
         set last_sent_at = now(), heartbeat_at = now(), in_flight = $3::bigint[]
         where holder = $2`,

  /** $1 ids the broker refused, $2 their wait (ms), $3 why: they wait; the others go on. */
  refused: `update jobfleet_outbox
            set retry_at = now() + $2 * interval '1 millisecond', last_error = $3,
                publishes = publishes + 1
            where id = any($1::bigint[]) and sent_at is null`,

  /** $1 seconds kept after sending, $2 batch: sent rows past their retention, oldest first. */
  sweep: `delete from jobfleet_outbox where id in (
            select id from jobfleet_outbox
            where sent_at is not null and sent_at < now() - $1 * interval '1 second'
            order by sent_at limit $2)`,

  /** The unsent rows: how many, and the oldest one's creation (per queue). */
  unsent: `select queue, count(*)::int as unsent, min(created_at) as oldest
           from jobfleet_outbox where sent_at is null group by queue`,

  /** The relay's row, as the operator reads it. */
  relay: `select holder, active_since, heartbeat_at, last_sent_at, last_error, last_error_at,
                 now() as now
          from jobfleet_outbox_relay`,
} as const;
