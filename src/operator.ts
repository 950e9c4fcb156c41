// The operator process: leader election, then informers feeding a keyed work
// queue that runs the JobWorker reconciler; /healthz, /readyz and /metrics.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { createLogger } from '../worker/log.js';
import { LeaderElector } from './controller/leader.js';
import { JobWorkerReconciler } from './controller/reconciler.js';
import { LeadershipTerm, type TermDeps } from './controller/term.js';
import type { KubeClient } from './kube/client.js';
import { EventRecorder } from './kube/events.js';
import { requestKind } from './kube/request-kind.js';
import { operatorMetrics, type OperatorMetrics } from './metrics.js';
import { BrokerSettingsReader } from './signals/broker-settings.js';
import { DeadLetterReader } from './signals/dead-letters.js';
import { OutboxReader } from './signals/outbox.js';

export interface OperatorOptions {
  client: KubeClient;
  /** watch only these namespaces (namespaced mode, with Roles); all when empty */
  namespaces?: string[];
  identity: string;
  lease: {
    namespace: string;
    name: string;
    leaseDurationSeconds?: number;
    renewDeadlineSeconds?: number;
    retryPeriodSeconds?: number;
  };
  /** 0 = any free port */
  port?: number;
  /** the address /metrics, /healthz and /readyz listen on; all interfaces by default */
  host?: string;
  concurrency?: number;
  /** JobWorkers created at once (src/controller/creation-window.ts), default 50; 0: no limit */
  creationWindow?: number;
  /** how long a creation may hold its turn without its Deployment getting pods (default 30 s) */
  creationTimeoutMs?: number;
  resyncMs?: number;
  /** how often queue signals are read while scaling on age (default 10 s) */
  pollMs?: number;
  /** how long a read Secret is reused (default 30 s) */
  secretTtlMs?: number;
  /** how often each JobWorker's dead-letter quarantine is read (default 30 s) */
  deadLetterReadMs?: number;
  /** how often each broker's policies and feature flags are read (BrokerSettingsSafe; default 60 s) */
  brokerSettingsReadMs?: number;
  /** how often a running JobReplay writes its progress (default 1 s) */
  replayProgressMs?: number;
  /** Prometheus for fleet signals (throttling) when a JobWorker names none */
  prometheusUrl?: string;
  log?: Logger;
}

export interface Operator {
  port: number;
  metrics: OperatorMetrics;
  isLeader(): boolean;
  /** resolves when the queue has nothing to do (tests) */
  idle(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * JobWorker reconciles at once, unless JOBFLEET_CONCURRENCY (the chart's
 * `concurrency`) says otherwise: the one default, for the shipped binary and
 * for everything that starts the operator in-process (tests, the demo, bench).
 */
export const DEFAULT_CONCURRENCY = 16;

/**
 * Every JobWorker is planned again at least this often (JOBFLEET_RESYNC_SECONDS),
 * though nothing woke it: what the bench's steady state measures.
 */
export const DEFAULT_RESYNC_SECONDS = 300;

export async function startOperator(o: OperatorOptions): Promise<Operator> {
  const log = o.log ?? createLogger();
  const metrics = operatorMetrics();
  const events = new EventRecorder(o.client, 'jobfleet-operator', log, Date.now, () =>
    metrics.apiWrites.inc({ kind: 'Event' }),
  );
  countApiCalls(o.client, metrics);
  const namespaces = o.namespaces?.length ? o.namespaces : [undefined];
  const deadLetters = new DeadLetterReader();
  const outbox = new OutboxReader();
  // The current leadership term (see ./controller/term.ts); undefined while standing by.
  let term: LeadershipTerm | undefined;
  metrics.readQueues(() => term?.figures());
  const reconciler = new JobWorkerReconciler({
    deadLetters,
    outbox,
    deadLetterReadMs: o.deadLetterReadMs,
    brokerSettings: new BrokerSettingsReader(),
    brokerSettingsReadMs: o.brokerSettingsReadMs,
    client: o.client,
    events,
    metrics,
    log,
    pollMs: o.pollMs,
    secretTtlMs: o.secretTtlMs,
    prometheusUrl: o.prometheusUrl,
    operatorLease: { namespace: o.lease.namespace, name: o.lease.name },
  });

  const elector = new LeaderElector(o.client, { ...o.lease, identity: o.identity }, log, {
    onStartedLeading: () => {
      metrics.isLeader.set(1);
      term = newTerm(o, { reconciler, events, log, namespaces }, metrics);
    },
    onStoppedLeading: () => {
      metrics.isLeader.set(0);
      // Campaign again in-process rather than exit (client-go's default): the
      // ended term's queues take no new keys at once, and /metrics and
      // /healthz stay up. A reconcile already running finishes (its calls are
      // bounded by the client's timeout, not the lease): docs/rollouts.md.
      const ended = term;
      term = undefined;
      void ended?.stop();
    },
  });

  // A standby is ready (it is campaigning); a leader once its caches are synced.
  const server = probeServer(metrics, () => !elector.isLeader || !!term?.synced);
  await new Promise<void>((r) => server.listen(o.port ?? 8080, o.host, r));
  elector.start();
  log.info({ identity: o.identity, namespaces: o.namespaces ?? 'all' }, 'operator started');

  return {
    port: (server.address() as AddressInfo).port,
    metrics,
    isLeader: () => elector.isLeader,
    idle: () => term?.idle() ?? Promise.resolve(),
    stop: async () => {
      const last = term;
      await elector.stop();
      await last?.stop();
      await deadLetters.close();
      await outbox.close();
      await new Promise((r) => server.close(r));
      log.info('operator stopped');
    },
  };
}

/** Counts the client's apiserver requests (by verb, resource and code) and connections. */
function countApiCalls(client: KubeClient, metrics: OperatorMetrics): void {
  client.observe({
    request: (method, path, status) => {
      const k = requestKind(method, path, status);
      if (k)
        metrics.apiRequests.inc({
          verb: k.verbs[0] ?? method.toLowerCase(),
          resource: k.group ? `${k.resource}.${k.group}` : k.resource,
          code: String(status),
        });
    },
    connection: (purpose) => metrics.apiConnections.inc({ purpose }),
  });
}

/** A leadership term with the options' settings, its queues and watches counted in `metrics`. */
function newTerm(
  o: OperatorOptions,
  shared: Pick<TermDeps, 'reconciler' | 'events' | 'log' | 'namespaces'>,
  metrics: OperatorMetrics,
): LeadershipTerm {
  return new LeadershipTerm({
    client: o.client,
    ...shared,
    concurrency: o.concurrency ?? DEFAULT_CONCURRENCY,
    creationWindow: o.creationWindow ?? 50,
    creationTimeoutMs: o.creationTimeoutMs,
    resyncMs: o.resyncMs ?? DEFAULT_RESYNC_SECONDS * 1000,
    replayProgressMs: o.replayProgressMs,
    onQueues: (delta) => metrics.workQueues.inc(delta),
    onRetry: (name) => metrics.workQueueRetries.inc({ name }),
    onQueued: (name) => metrics.workQueueAdds.inc({ name }),
    onStarted: (name, ms) => metrics.workQueueWait.observe({ name }, ms / 1000),
    onWatchRestart: (kind) => metrics.watchRestarts.inc({ kind }),
    onReconciled: (controller, result) => metrics.reconcileTotal.inc({ controller, result }),
  });
}

/** /metrics, /healthz and /readyz (200 when `ready()`, else 503). */
function probeServer(metrics: OperatorMetrics, ready: () => boolean): http.Server {
  return http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/metrics') {
      void metrics.registry.metrics().then((body) => {
        res.writeHead(200, { 'content-type': metrics.registry.contentType });
        res.end(body);
      });
      return;
    }
    if (path === '/healthz') {
      res.writeHead(200).end('ok\n');
      return;
    }
    if (path === '/readyz') {
      const ok = ready();
      res.writeHead(ok ? 200 : 503).end(ok ? 'ok\n' : 'caches not synced\n');
      return;
    }
    res.writeHead(404).end();
  });
}
