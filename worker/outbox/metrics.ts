// The relay's metrics (docs/outbox.md lists them). One label, `outbox`: which
// outbox a process relays (a worker may relay two: its claims database's,
// where handlers' follow-ups wait, and the one its JobWorker names).
import client from 'prom-client';

export type PublishError = 'broker_unreachable' | 'refused' | 'unroutable';

export interface OutboxStats {
  unsent: number;
  /** seconds since the oldest unsent row was created; 0 when there is none */
  oldestSeconds: number;
}

const shared = new WeakMap<client.Registry, ReturnType<typeof build>>();

function build(registry: client.Registry) {
  const registers = [registry];
  return {
    published: new client.Counter({
      name: 'jobfleet_outbox_published_total',
      help: 'Outbox rows published and confirmed by the broker',
      labelNames: ['outbox'],
      registers,
    }),
    republished: new client.Counter({
      name: 'jobfleet_outbox_republished_total',
      help: 'Outbox rows confirmed after an earlier publish of theirs was tried (a relay died or lost its database between the publish and the mark): a second copy the consumers’ claims absorb',
      labelNames: ['outbox'],
      registers,
    }),
    errors: new client.Counter({
      name: 'jobfleet_outbox_publish_errors_total',
      help: 'Outbox rows not published: broker_unreachable (no connection or the channel closed), refused (nacked) or unroutable (no such queue)',
      labelNames: ['outbox', 'reason'],
      registers,
    }),
    active: new client.Gauge({
      name: 'jobfleet_outbox_relay_active',
      help: '1 while this process holds the outbox’s relay lock and publishes; 0 while it stands by',
      labelNames: ['outbox'],
      registers,
    }),
    unsent: new client.Gauge({
      name: 'jobfleet_outbox_unsent',
      help: 'Outbox rows not yet confirmed by the broker (read by the active relay)',
      labelNames: ['outbox'],
      registers,
    }),
    oldest: new client.Gauge({
      name: 'jobfleet_outbox_oldest_unsent_seconds',
      help: 'Age of the oldest outbox row not yet confirmed by the broker (read by the active relay)',
      labelNames: ['outbox'],
      registers,
    }),
  };
}

/** The relay metrics on `registry`, one set per registry however many relays share it. */
export function outboxMetrics(registry: client.Registry, outbox: string) {
  let m = shared.get(registry);
  if (!m) shared.set(registry, (m = build(registry)));
  const l = { outbox };
  return {
    published: (n: number) => m.published.inc(l, n),
    republished: (n: number) => m.republished.inc(l, n),
    error: (reason: PublishError, n: number) => m.errors.inc({ ...l, reason }, n),
    active: (on: boolean) => m.active.set(l, on ? 1 : 0),
    stats: (s: OutboxStats) => {
      m.unsent.set(l, s.unsent);
      m.oldest.set(l, s.oldestSeconds);
    },
  };
}

export type OutboxMetrics = ReturnType<typeof outboxMetrics>;
