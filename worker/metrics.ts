// Worker metrics (docs/worker.md lists them). Labels are bounded: job type, outcome,
// failure class, retry reason, schema version — never job ids or keys.
import client from 'prom-client';
import type { HeadSnapshot } from './queue-head.js';

export type Outcome = 'completed' | 'duplicate' | 'retried' | 'dead_lettered';

/**
 * process_* and nodejs_* (memory, CPU, event-loop lag, handles), minus the
 * three gauges prom-client names `_total`, which `promtool check metrics`
 * rejects: their per-type versions (nodejs_active_handles{type}…) stay.
 */
export function collectProcessMetrics(registry: client.Registry): void {
  client.collectDefaultMetrics({ register: registry });
  for (const name of [
    'nodejs_active_handles_total',
    'nodejs_active_requests_total',
    'nodejs_active_resources_total',
  ])
    registry.removeSingleMetric(name);
}

/** What a worker holds now: deliveries received and not yet settled, and the oldest one's age. */
export interface Held {
  deliveries: number;
  oldestSeconds: number;
}

/**
 * Asked at each scrape: `held`, which the operator reads to remove the
 * idlest pods first when it scales down (src/reconcile/scaling/scale-down.ts), and
 * `head`, from which it measures the queue's age (src/reconcile/scaling/queue-age.ts).
 */
export function workerMetrics(
  registry = new client.Registry(),
  read: { held?: () => Held; head?: () => HeadSnapshot } = {},
) {
  const r = [registry];
  const held = read.held ?? (() => ({ deliveries: 0, oldestSeconds: 0 }));
  const head =
    read.head ??
    (() => ({ lastAgeSeconds: 0, lastAtMs: 0, lastUntimestampedAtMs: 0, idleSeconds: 0 }));
  const gauge = (name: string, help: string, value: () => number) =>
    new client.Gauge({
      name,
      help,
      registers: r,
      collect() {
        this.set(value());
      },
    });
  collectProcessMetrics(registry);
  return {
    lastDeliveryAge: gauge(
      'jobfleet_last_delivery_age_seconds',
      'Age of the newest delivery that carried a timestamp, when the broker handed it over (ms precision): the queue head’s age at that instant',
      () => head().lastAgeSeconds,
    ),
    lastDeliveryAt: gauge(
      'jobfleet_last_delivery_timestamp_seconds',
      'When that delivery arrived (Unix time, ms precision; 0 before the first)',
      () => head().lastAtMs / 1000,
    ),
    lastUntimestampedAt: gauge(
      'jobfleet_last_untimestamped_delivery_timestamp_seconds',
      'When the newest delivery without any timestamp (no timestamp_in_ms header, no timestamp property) arrived (0 = none)',
      () => head().lastUntimestampedAtMs / 1000,
    ),
    consumerIdle: gauge(
      'jobfleet_consumer_idle_seconds',
      'How long the work-queue consumer has had a free prefetch slot and received nothing: above a second, nothing is waiting in the queue (0 while every slot is taken or it is not consuming)',
      () => head().idleSeconds,
    ),
    untimestamped: new client.Counter({
      name: 'jobfleet_deliveries_untimestamped_total',
      help: 'Deliveries with no timestamp: their queue age cannot be measured (set the timestamp property when publishing, or the broker’s timestamp interceptor)',
      registers: r,
    }),
    heldDeliveries: new client.Gauge({
      name: 'jobfleet_held_deliveries',
      help: 'Deliveries this worker holds: received, not yet acked or returned (running or waiting for a slot)',
      registers: r,
      collect() {
        this.set(held().deliveries);
      },
    }),
    heldOldest: new client.Gauge({
      name: 'jobfleet_held_oldest_seconds',
      help: 'Time since this worker received the oldest delivery it holds (0 when it holds none)',
      registers: r,
      collect() {
        this.set(held().oldestSeconds);
      },
    }),
    registry,
    jobs: new client.Counter({
      name: 'jobfleet_jobs_total',
      help: 'Deliveries by terminal outcome',
      labelNames: ['type', 'outcome'],
      registers: r,
    }),
    retries: new client.Counter({
      name: 'jobfleet_retries_total',
      help: 'Retries scheduled, by reason',
      labelNames: ['type', 'reason'],
      registers: r,
    }),
    redeliveries: new client.Counter({
      name: 'jobfleet_redeliveries_total',
      help: 'Deliveries the broker marked redelivered',
      registers: r,
    }),
    handlerDuration: new client.Histogram({
      name: 'jobfleet_handler_duration_seconds',
      help: 'Handler run time, with the commit that records a completed result (not the claim, the ack, or a failure’s retry or dead-letter record)',
      labelNames: ['type'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
      registers: r,
    }),
    ackJournalDropped: new client.Counter({
      name: 'jobfleet_ack_journal_dropped_total',
      help: 'Ack-journal rows given up (10,000 pending while the store was down, or refused by PostgreSQL): jobfleet verify cannot see those acks',
      registers: r,
    }),
    claimConflicts: new client.Counter({
      name: 'jobfleet_claim_conflicts_total',
      help: 'Deliveries whose key was held by a live lease elsewhere',
      registers: r,
    }),
    messageAge: new client.Histogram({
      name: 'jobfleet_message_age_seconds',
      help: 'Age of a message when dequeued (since created, or since due for a retry)',
      buckets: [0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600],
      registers: r,
    }),
    inflight: new client.Gauge({
      name: 'jobfleet_inflight',
      help: 'Handlers running now',
      registers: r,
    }),
    throttled: new client.Counter({
      name: 'jobfleet_downstream_throttled_total',
      help: 'Handler runs the downstream throttled (429/503, Throttled)',
      labelNames: ['type'],
      registers: r,
    }),
    schemaVersionSeen: new client.Counter({
      name: 'jobfleet_schema_version_seen_total',
      help: 'Envelopes seen, by schema version',
      labelNames: ['version'],
      registers: r,
    }),
    inDoubt: new client.Counter({
      name: 'jobfleet_in_doubt_total',
      help: 'In-doubt attempts (a run whose outcome is unknown) decided, by resolution: done, not_done, unknown (asked again or, at the ceiling, held), conflict (held), re_run (by policy), held (by policy)',
      labelNames: ['type', 'resolution'],
      registers: r,
    }),
    deadLetters: new client.Counter({
      name: 'jobfleet_dead_letters_total',
      help: 'Dead-lettered deliveries, by failure class',
      labelNames: ['type', 'failure_class'],
      registers: r,
    }),
  };
}

export type WorkerMetrics = ReturnType<typeof workerMetrics>;
