// The operator process: leader election, then informers feeding a keyed work
// queue that runs the JobWorker reconciler; /healthz, /readyz and /metrics.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import pino, { type Logger } from 'pino';
import { API_VERSION, KIND } from './api/jobworker.js';
import { Informer, keyOf } from './controller/informer.js';
import { LeaderElector } from './controller/leader.js';
import { JobWorkerReconciler, NeedsAttention } from './controller/reconciler.js';
import { JobReplayController } from './controller/replay-controller.js';
import { REPLAY_KIND } from './api/jobreplay.js';
import { WorkQueue } from './controller/workqueue.js';
import type { KubeClient } from './kube/client.js';
import { EventRecorder } from './kube/events.js';
import { operatorMetrics, type OperatorMetrics } from './metrics.js';
import { LABEL_JOBWORKER } from './reconcile/desired.js';
import { DeadLetterReader } from './signals/dead-letters.js';

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
  concurrency?: number;
  resyncMs?: number;
  /** how often queue signals are read while scaling on age (default 10 s) */
  pollMs?: number;
  /** how long a read Secret is reused (default 30 s) */
  secretTtlMs?: number;
  /** how often each JobWorker's dead-letter quarantine is read (default 30 s) */
  deadLetterReadMs?: number;
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

export async function startOperator(o: OperatorOptions): Promise<Operator> {
  const log = o.log ?? pino({ level: process.env.LOG_LEVEL ?? 'info' });
  const metrics = operatorMetrics();
  const events = new EventRecorder(o.client, 'jobfleet-operator', log, Date.now, () =>
    metrics.apiWrites.inc({ kind: 'Event' }),
  );
  const namespaces = o.namespaces?.length ? o.namespaces : [undefined];
  let queue: WorkQueue | undefined;
  let replayQueue: WorkQueue | undefined;
  const replays = new JobReplayController({
    client: o.client,
    events,
    log,
    progressEveryMs: o.replayProgressMs,
  });
  let informers: Informer[] = [];
  const caches = new Map<string, Informer>(); // `${kind}/${namespace ?? ''}` → its informer
  const deadLetters = new DeadLetterReader();
  const reconciler = new JobWorkerReconciler({
    deadLetters,
    deadLetterReadMs: o.deadLetterReadMs,
    client: o.client,
    events,
    metrics,
    log,
    pollMs: o.pollMs,
    secretTtlMs: o.secretTtlMs,
    prometheusUrl: o.prometheusUrl,
    cache: (kind, namespace, name) =>
      (caches.get(`${kind}/${namespace}`) ?? caches.get(`${kind}/`))?.cache.get(
        `${namespace}/${name}`,
      ),
  });
  let synced = false;

  const startControllers = () => {
    const q = new WorkQueue({
      concurrency: o.concurrency ?? 4,
      onError: (key, err, retryInMs) => {
        const level = err instanceof NeedsAttention ? 'info' : 'warn';
        log[level](
          { key, err: (err as Error).message, retryInMs },
          'reconcile did not finish; retrying',
        );
      },
    });
    queue = q;
    const rq = new WorkQueue({
      concurrency: 2,
      onError: (key, err, retryInMs) =>
        log.warn(
          { key, err: (err as Error).message, retryInMs },
          'JobReplay reconcile failed; retrying',
        ),
    });
    replayQueue = rq;
    const resyncMs = o.resyncMs ?? 5 * 60_000;
    informers = namespaces.flatMap((namespace) => [
      new Informer(o.client, {
        apiVersion: API_VERSION,
        kind: KIND,
        namespace,
        resyncMs,
        log,
        onChange: (key) => q.add(key),
      }),
      // A Deployment's status changes (pods ready, rollout done) wake its JobWorker.
      new Informer(o.client, {
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        namespace,
        labelSelector: 'app.kubernetes.io/managed-by=jobfleet',
        resyncMs: 24 * 3600_000,
        log,
        onChange: (_key, obj) => {
          const owner = obj?.metadata.labels?.[LABEL_JOBWORKER];
          if (obj && owner)
            q.add(keyOf({ metadata: { namespace: obj.metadata.namespace, name: owner } }));
        },
      }),
    ]);
    caches.clear();
    namespaces.forEach((namespace, i) => {
      caches.set(`JobWorker/${namespace ?? ''}`, informers[2 * i] as Informer);
      caches.set(`Deployment/${namespace ?? ''}`, informers[2 * i + 1] as Informer);
    });
    const replayInformers = namespaces.map(
      (namespace) =>
        new Informer(o.client, {
          apiVersion: API_VERSION,
          kind: REPLAY_KIND,
          namespace,
          resyncMs,
          log,
          onChange: (key) => rq.add(key),
        }),
    );
    informers.push(...replayInformers);
    void Promise.all(replayInformers.map((i) => i.start())).then(
      () => rq.start((key) => replays.reconcile(key)),
      (err: Error) => log.error({ err: err.message }, 'initial JobReplay list failed'),
    );
    // Reconcile only once every cache is filled: a key read from a half-filled cache looks deleted.
    void Promise.all(informers.slice(0, 2 * namespaces.length).map((i) => i.start())).then(
      () => {
        synced = true;
        q.start((key) => reconciler.reconcile(key));
      },
      (err: Error) => log.error({ err: err.message }, 'initial list failed'),
    );
  };

  const stopControllers = async () => {
    synced = false;
    for (const i of informers) i.stop();
    informers = [];
    await queue?.stop();
    queue = undefined;
    await replays.stop();
    await replayQueue?.stop();
    replayQueue = undefined;
  };

  const elector = new LeaderElector(o.client, { ...o.lease, identity: o.identity }, log, {
    onStartedLeading: () => {
      metrics.isLeader.set(1);
      startControllers();
    },
    onStoppedLeading: () => {
      metrics.isLeader.set(0);
      void stopControllers();
    },
  });

  const server = http.createServer((req, res) => {
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
      // A standby is ready (it is campaigning); a leader once its caches are synced.
      const ok = !elector.isLeader || synced;
      res.writeHead(ok ? 200 : 503).end(ok ? 'ok\n' : 'caches not synced\n');
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(o.port ?? 8080, r));
  elector.start();
  log.info({ identity: o.identity, namespaces: o.namespaces ?? 'all' }, 'operator started');

  return {
    port: (server.address() as AddressInfo).port,
    metrics,
    isLeader: () => elector.isLeader,
    idle: () => queue?.idle() ?? Promise.resolve(),
    stop: async () => {
      await elector.stop();
      await stopControllers();
      await deadLetters.close();
      await new Promise((r) => server.close(r));
      log.info('operator stopped');
    },
  };
}
