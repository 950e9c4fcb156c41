// Operator metrics (DESIGN.md §3); labels: namespace and jobworker only.
import client from 'prom-client';

export function operatorMetrics(registry = new client.Registry()) {
  const r = [registry];
  const labelNames = ['namespace', 'jobworker'] as const;
  return {
    registry,
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
    reconcileErrors: new client.Counter({
      name: 'jobfleet_reconcile_errors_total',
      help: 'Reconciles that failed and will be retried',
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
  };
}

export type OperatorMetrics = ReturnType<typeof operatorMetrics>;
