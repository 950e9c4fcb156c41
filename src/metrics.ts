// Operator metrics (docs/scaling.md and the runbook use them); labels: namespace and jobworker only.
import client from 'prom-client';
import { collectProcessMetrics } from '../worker/metrics.js';

export function operatorMetrics(registry = new client.Registry()) {
  const r = [registry];
  collectProcessMetrics(registry);
  const labelNames = ['namespace', 'jobworker'] as const;
  // The oldest dead letter's time per JobWorker: its age is computed at
  // scrape time, so the gauge never lags behind the clock between reads.
  const oldestDeadLetter = new Map<
    string,
    { namespace: string; jobworker: string; at: number | null }
  >();
  const deadLetterOldestAge = new client.Gauge({
    name: 'jobfleet_dead_letter_oldest_age_seconds',
    help: 'Age of the oldest quarantined dead letter (0 when there is none)',
    labelNames,
    registers: r,
    collect() {
      const now = Date.now();
      for (const v of oldestDeadLetter.values())
        this.set(
          { namespace: v.namespace, jobworker: v.jobworker },
          v.at === null ? 0 : Math.max(0, (now - v.at) / 1000),
        );
    },
  });
  const deadLettersQuarantined = new client.Gauge({
    name: 'jobfleet_dead_letters_quarantined',
    help: 'Dead letters waiting in quarantine (not replayed, discarded or superseded)',
    labelNames,
    registers: r,
  });
  const inDoubtHeld = new client.Gauge({
    name: 'jobfleet_in_doubt_held',
    help: 'In-doubt jobs held in the quarantine for a person (failure class in_doubt): the JobfleetInDoubtHeld alert',
    labelNames,
    registers: r,
  });
  const inDoubtDeciding = new client.Gauge({
    name: 'jobfleet_in_doubt_deciding',
    help: 'Jobs whose last attempt is in doubt, being decided by the workers now (reconcile, or the policy)',
    labelNames,
    registers: r,
  });
  const deadLetterMaxAge = new client.Gauge({
    name: 'jobfleet_dead_letter_max_age_seconds',
    help: "The JobWorker's spec.deadLetter.maxAgeSeconds, for alert rules to compare against",
    labelNames,
    registers: r,
  });
  const outboxUnsent = new client.Gauge({
    name: 'jobfleet_queue_outbox_unsent',
    help: 'Rows for the queue waiting in the outbox spec.outbox names (docs/outbox.md)',
    labelNames,
    registers: r,
  });
  const outboxOldestAge = new client.Gauge({
    name: 'jobfleet_queue_outbox_oldest_age_seconds',
    help: 'Age of the oldest of them (0 when none waits): part of jobfleet_queue_oldest_message_age_seconds; the JobfleetOutboxStalled alert',
    labelNames,
    registers: r,
  });
  const outboxDelivering = new client.Gauge({
    name: 'jobfleet_queue_outbox_delivering',
    help: '1 while OutboxDelivering is True (or Unknown), 0 while False: jobs wait and the relay fails, is missing or stalls',
    labelNames,
    registers: r,
  });
  // The leading term's queues, read at scrape time; nothing while standing by.
  let queues: () => QueueFigures | undefined = () => undefined;
  return {
    registry,
    setDeadLetters(
      namespace: string,
      jobworker: string,
      stats: {
        quarantined: number;
        oldestAt: Date | null;
        inDoubt?: { deciding: number; held: number };
      },
      maxAgeSeconds: number,
    ) {
      oldestDeadLetter.set(`${namespace}/${jobworker}`, {
        namespace,
        jobworker,
        at: stats.oldestAt?.getTime() ?? null,
      });
      deadLettersQuarantined.set({ namespace, jobworker }, stats.quarantined);
      inDoubtHeld.set({ namespace, jobworker }, stats.inDoubt?.held ?? 0);
      inDoubtDeciding.set({ namespace, jobworker }, stats.inDoubt?.deciding ?? 0);
      deadLetterMaxAge.set({ namespace, jobworker }, maxAgeSeconds);
    },
    setOutbox(
      namespace: string,
      jobworker: string,
      o: { unsent: number; oldestSeconds: number | null },
      delivering: boolean,
    ) {
      outboxUnsent.set({ namespace, jobworker }, o.unsent);
      outboxOldestAge.set({ namespace, jobworker }, o.oldestSeconds ?? 0);
      outboxDelivering.set({ namespace, jobworker }, delivering ? 1 : 0);
    },
    forgetOutbox(namespace: string, jobworker: string) {
      for (const g of [outboxUnsent, outboxOldestAge, outboxDelivering])
        g.remove({ namespace, jobworker });
    },
    forgetDeadLetters(namespace: string, jobworker: string) {
      oldestDeadLetter.delete(`${namespace}/${jobworker}`);
      for (const g of [
        deadLetterOldestAge,
        deadLettersQuarantined,
        deadLetterMaxAge,
        inDoubtHeld,
        inDoubtDeciding,
      ])
        g.remove({ namespace, jobworker });
    },
    oldestAge: new client.Gauge({
      name: 'jobfleet_queue_oldest_message_age_seconds',
      help: 'Age of the oldest waiting message',
      labelNames,
      registers: r,
    }),
    queueDepth: new client.Gauge({
      name: 'jobfleet_queue_depth',
      help: 'Messages waiting in the work queue',
      labelNames,
      registers: r,
    }),
    targetAge: new client.Gauge({
      name: 'jobfleet_target_oldest_age_seconds',
      help: "The JobWorker's objective (spec.scaling.targetOldestAgeSeconds), for alert rules",
      labelNames,
      registers: r,
    }),
    limitedBy: new client.Gauge({
      name: 'jobfleet_scaling_limited',
      help: '1 for what limits the replica count now (age, downstream, maxReplicas, …), 0 for the rest',
      labelNames: ['namespace', 'jobworker', 'reason'],
      registers: r,
    }),
    brokerSettingsUnsafe: new client.Gauge({
      name: 'jobfleet_broker_settings_unsafe',
      help: "The broker settings found of each reason (BrokerSettingsSafe): PolicyDropsJobs and ConsumerTimeoutTooShort lose or stall jobs; FeatureFlagsDisabled and DeprecatedFeaturesUsed block an upgrade. Absent when the broker's management API was not read",
      labelNames: ['namespace', 'jobworker', 'reason'],
      registers: r,
    }),
    rolloutBlocked: new client.Gauge({
      name: 'jobfleet_rollout_blocked',
      help: '1 while a rollout or rollback is blocked by the compatibility gate',
      labelNames,
      registers: r,
    }),
    desiredReplicas: new client.Gauge({
      name: 'jobfleet_desired_replicas',
      help: 'Replicas the operator wants',
      labelNames,
      registers: r,
    }),
    reconcileDuration: new client.Histogram({
      name: 'jobfleet_reconcile_duration_seconds',
      help: 'Reconcile duration',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: r,
    }),
    reconcileTotal: new client.Counter({
      name: 'jobfleet_reconcile_total',
      help: 'Reconciles by controller and result (success, requeue, error), as controller-runtime counts them',
      labelNames: ['controller', 'result'],
      registers: r,
    }),
    reconcileUnchanged: new client.Counter({
      name: 'jobfleet_reconcile_unchanged_total',
      help: 'JobWorker reconciles that found nothing changed since the last plan (no plan made)',
      registers: r,
    }),
    apiRequests: new client.Counter({
      name: 'jobfleet_api_requests_total',
      help: 'Requests to the Kubernetes API by verb, resource and HTTP status code',
      labelNames: ['verb', 'resource', 'code'],
      registers: r,
    }),
    apiConnections: new client.Counter({
      name: 'jobfleet_api_connections_total',
      help: 'TCP (and TLS) connections opened to the Kubernetes API, for requests or for watches',
      labelNames: ['purpose'],
      registers: r,
    }),
    watchRestarts: new client.Counter({
      name: 'jobfleet_watch_restarts_total',
      help: 'Watches reopened after the first (timeouts, errors, 410 Gone), by kind',
      labelNames: ['kind'],
      registers: r,
    }),
    workQueueRetries: new client.Counter({
      name: 'jobfleet_workqueue_retries_total',
      help: 'Keys put back on a work queue with backoff after a failed reconcile',
      labelNames: ['name'],
      registers: r,
    }),
    reconcileErrors: new client.Counter({
      name: 'jobfleet_reconcile_errors_total',
      help: 'Reconciles that failed and will be retried',
      labelNames,
      registers: r,
    }),
    scaleDownHeld: new client.Counter({
      name: 'jobfleet_scale_down_held_deliveries_total',
      help: 'Deliveries the pods a scale-down removed still held (0 is the goal: the idlest pods go first)',
      labelNames,
      registers: r,
    }),
    apiWrites: new client.Counter({
      name: 'jobfleet_api_writes_total',
      help: 'Writes the operator made to the Kubernetes API, by kind',
      labelNames: ['kind'],
      registers: r,
    }),
    isLeader: new client.Gauge({
      name: 'jobfleet_operator_leader',
      help: '1 while this replica holds the leader lease',
      registers: r,
    }),
    workQueues: new client.Gauge({
      name: 'jobfleet_operator_work_queues',
      help: 'Work queues running: 2 (JobWorker, JobReplay) while leading, 0 otherwise; more means a stale leadership term is still running',
      registers: r,
    }),
    workQueueAdds: new client.Counter({
      name: 'jobfleet_workqueue_adds_total',
      help: 'Keys queued, by work queue (adds merged into a pending one are not counted)',
      labelNames: ['name'],
      registers: r,
    }),
    workQueueWait: new client.Histogram({
      name: 'jobfleet_workqueue_queue_duration_seconds',
      help: 'How long a key waited in its work queue before its reconcile started',
      labelNames: ['name'],
      buckets: [0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: r,
    }),
    workQueueDepth: new client.Gauge({
      name: 'jobfleet_workqueue_depth',
      help: 'Keys waiting in each work queue of the leading term',
      labelNames: ['name'],
      registers: r,
      collect() {
        this.reset();
        for (const [name, n] of Object.entries(queues()?.depth ?? {})) this.set({ name }, n);
      },
    }),
    creations: new client.Gauge({
      name: 'jobfleet_creations',
      help: 'JobWorkers being created (inFlight: Deployment not yet with its pods) and waiting for a turn in the creation window',
      labelNames: ['state'],
      registers: r,
      collect() {
        const c = queues()?.creations ?? { inFlight: 0, waiting: 0 };
        this.set({ state: 'inFlight' }, c.inFlight);
        this.set({ state: 'waiting' }, c.waiting);
      },
    }),
    /** Where the queue gauges read from (the leading term), or nothing. */
    readQueues(fn: () => QueueFigures | undefined): void {
      queues = fn;
    },
  };
}

export interface QueueFigures {
  depth: Record<string, number>;
  creations: { inFlight: number; waiting: number };
}

export type OperatorMetrics = ReturnType<typeof operatorMetrics>;
