// The operator's entry point: `node dist/src/main.js` (the image, and from
// source after `make build`; tsx costs memory and CPU the product should
// not be measured with). Configuration from the
// environment (the Helm chart sets it):
//   KUBECONFIG                    out of cluster; in cluster the service account is used
//   JOBFLEET_WATCH_NAMESPACES     comma-separated; all namespaces when empty
//   POD_NAMESPACE, POD_NAME       the leader Lease's namespace and this replica's identity
//   JOBFLEET_LEASE_NAME           default jobfleet-operator
//   JOBFLEET_LEASE_DURATION_SECONDS  default 15 (renew deadline 10 s, retry every 2 s)
//   JOBFLEET_OPERATOR_PORT        /healthz /readyz /metrics, default 8080
//   JOBFLEET_OPERATOR_HOST        the address they listen on, default all interfaces
//   JOBFLEET_CONCURRENCY          JobWorker reconciles at once, default 16 (they mostly wait on the
//                                 apiserver; bench/RESULTS.md, operator: 4 → 16 cut 300 JobWorkers 30 → 22 s)
//   JOBFLEET_CREATION_WINDOW      JobWorkers whose Deployments the control plane is creating at once, default 50;
//                                 the rest of a mass create waits its turn (src/controller/creation-window.ts), 0: no limit
//   JOBFLEET_RESYNC_SECONDS       every JobWorker is reconciled at least this often, default 300
//   JOBFLEET_PROMETHEUS_URL       Prometheus scraping the workers (throttling signal); per JobWorker: spec.scaling.prometheusUrl
//   LOG_LEVEL                     default info
import os from 'node:os';
import { createLogger } from '../worker/log.js';
import { KubeClient } from './kube/client.js';
import { DEFAULT_RESYNC_SECONDS, startOperator } from './operator.js';

const log = createLogger();

function wholeNumber(v: string | undefined, name: string, min: number): number | undefined {
  if (v === undefined || v === '') return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min)
    throw new Error(`${name} must be a whole number of ${min} or more, got "${v}"`);
  return n;
}
const env = process.env;
const leaseSeconds = Number(env.JOBFLEET_LEASE_DURATION_SECONDS ?? 15);
const operator = await startOperator({
  client: KubeClient.fromDefault(),
  namespaces: (env.JOBFLEET_WATCH_NAMESPACES ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean),
  identity: env.POD_NAME ?? `${os.hostname()}-${process.pid}`,
  lease: {
    namespace: env.POD_NAMESPACE ?? 'default',
    name: env.JOBFLEET_LEASE_NAME ?? 'jobfleet-operator',
    // client-go's proportions: renew deadline 2/3 of the lease, retry period 2/15 of it
    leaseDurationSeconds: leaseSeconds,
    renewDeadlineSeconds: leaseSeconds * (2 / 3),
    retryPeriodSeconds: Math.max(0.5, leaseSeconds * (2 / 15)),
  },
  port: Number(env.JOBFLEET_OPERATOR_PORT ?? 8080),
  host: env.JOBFLEET_OPERATOR_HOST || undefined,
  concurrency: wholeNumber(env.JOBFLEET_CONCURRENCY, 'JOBFLEET_CONCURRENCY', 1),
  creationWindow: wholeNumber(env.JOBFLEET_CREATION_WINDOW, 'JOBFLEET_CREATION_WINDOW', 0),
  resyncMs: Number(env.JOBFLEET_RESYNC_SECONDS ?? DEFAULT_RESYNC_SECONDS) * 1000,
  brokerSettingsReadMs:
    (wholeNumber(
      env.JOBFLEET_BROKER_SETTINGS_READ_SECONDS,
      'JOBFLEET_BROKER_SETTINGS_READ_SECONDS',
      10,
    ) ?? 60) * 1000,
  prometheusUrl: env.JOBFLEET_PROMETHEUS_URL || undefined,
  log,
});

const shutdown = () => {
  log.info('signal received: releasing the lease and stopping');
  operator.stop().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.once('SIGTERM', shutdown);
process.once('SIGINT', shutdown);
