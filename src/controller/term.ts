// One leadership term: the informers, work queues and replay runs that exist
// while this replica leads. Each term owns its own, so stopping a term that
// ended touches nothing of the next one: a lease lost and regained quickly
// leaves exactly one working set (a stop that reads shared variables after an
// await would stop the new term's queues instead).
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { API_VERSION, KIND } from '../api/jobworker.js';
import { REPLAY_KIND } from '../api/jobreplay.js';
import type { KubeClient, KubeObject } from '../kube/client.js';
import type { QueueFigures } from '../metrics.js';
import type { EventRecorder } from '../kube/events.js';
import { LABEL_JOBWORKER } from '../reconcile/children/index.js';
import { CreationWindow, hasItsPods } from './creation-window.js';
import { Informer, keyOf } from './informer.js';
import type { ObjectCache } from './observe.js';
import { slimPod } from '../signals/worker-readiness.js';
import type { QuarantinePoll } from './quarantine-poll.js';
import { JobReplayController } from './replay-controller.js';
import { NeedsAttention, type JobWorkerReconciler } from './reconciler.js';
import { deploymentHasNews, hasNews } from './unchanged.js';
import { WorkQueue, type ProcessResult } from './workqueue.js';

export type Controller = 'jobworker' | 'jobreplay';

/** A creation whose Deployment has no pods after this long gives its slot up (quota, admission, a stuck controller manager). */
const CREATION_TIMEOUT_MS = 30_000;

export interface TermDeps {
  client: KubeClient;
  reconciler: JobWorkerReconciler;
  events: EventRecorder;
  log: Logger;
  /** watched namespaces; [undefined] for all */
  namespaces: Array<string | undefined>;
  concurrency: number;
  /** JobWorkers created at once while the control plane creates their pods (./creation-window.ts); 0: no limit */
  creationWindow?: number;
  /** how long a creation may hold its turn without its Deployment getting pods (default 30 s) */
  creationTimeoutMs?: number;
  resyncMs: number;
  replayProgressMs?: number;
  /** told when the term's queues start and stop (the work-queue gauge) */
  onQueues?: (delta: number) => void;
  /** a watch reopened, for jobfleet_watch_restarts_total */
  onWatchRestart?: (kind: string) => void;
  /** a key put back with backoff, for jobfleet_workqueue_retries_total */
  onRetry?: (queue: Controller) => void;
  /** a key queued, and one started after waiting `ms`: jobfleet_workqueue_adds_total, …_queue_duration_seconds */
  onQueued?: (queue: Controller) => void;
  onStarted?: (queue: Controller, ms: number) => void;
  /** each reconcile's result, for jobfleet_reconcile_total */
  onReconciled?: (controller: Controller, result: 'success' | 'requeue' | 'error') => void;
}

export class LeadershipTerm {
  private readonly informers: Informer[];
  /** kind/namespace ('' for all) → its informer */
  private readonly caches = new Map<string, Informer>();
  private readonly queue: WorkQueue;
  private readonly replayQueue: WorkQueue;
  private readonly replays: JobReplayController;
  private readonly creations: CreationWindow;
  private readonly expiry: NodeJS.Timeout;
  /** the quarantines, read between reconciles once these have begun */
  private readonly quarantines: QuarantinePoll | undefined;
  private stopping: Promise<void> | undefined;
  /** every JobWorker and Deployment cache is filled: reconciles have begun */
  synced = false;

  constructor(private readonly d: TermDeps) {
    this.replays = new JobReplayController({
      client: d.client,
      events: d.events,
      log: d.log,
      progressEveryMs: d.replayProgressMs,
    });
    this.creations = new CreationWindow({
      size: d.creationWindow ?? 0,
      timeoutMs: d.creationTimeoutMs ?? CREATION_TIMEOUT_MS,
    });
    this.queue = this.workQueue('jobworker', d.concurrency);
    this.quarantines = d.reconciler.quarantinePoll((key) => this.queue.add(key));
    this.replayQueue = this.workQueue('jobreplay', 2);
    const owned = d.namespaces.flatMap((namespace) => this.ownedInformers(namespace));
    const replayInformers = d.namespaces.map((namespace) => this.replayInformer(namespace));
    this.informers = [...owned, ...replayInformers];
    this.expiry = setInterval(() => this.startTurns(this.creations.expire(Date.now())), 1000);
    this.expiry.unref();
    d.onQueues?.(2);
    this.startReplays(replayInformers);
    this.startReconciles(owned);
  }

  /** A work queue whose adds, waits and retries are counted under `controller`. */
  private workQueue(controller: Controller, concurrency: number): WorkQueue {
    const d = this.d;
    return new WorkQueue({
      concurrency,
      onError: () => d.onRetry?.(controller),
      onAdd: () => d.onQueued?.(controller),
      onStart: (ms) => d.onStarted?.(controller, ms),
    });
  }

  /** One namespace's watches for the JobWorker reconciles: JobWorkers and what they own. */
  private ownedInformers(namespace: string | undefined): Informer[] {
    const d = this.d;
    const q = this.queue;
    const jobWorkers = new Informer(d.client, {
      apiVersion: API_VERSION,
      kind: KIND,
      onWatchRestart: () => d.onWatchRestart?.(KIND),
      namespace,
      // the spec's and metadata's writers are read (who paused, who allowed a key-rule change)
      dropManagedFields: 'status',
      resyncMs: d.resyncMs,
      log: d.log,
      onChange: (key, obj, _gone, old) => {
        if (!obj) this.creationEnded(key);
        // A change of status alone (our own status write) wakes nothing: each
        // plan asks for its own requeue when it must look again.
        if (hasNews(old, obj)) q.add(key);
      },
    });
    // A Deployment's status changes (pods ready, rollout done) wake its JobWorker; the
    // deployment controller's bookkeeping does not (./unchanged.ts).
    const deployments = this.ownedInformer('apps/v1', 'Deployment', namespace, (key, obj, old) => {
      if (obj && hasItsPods(obj)) this.creationEnded(key);
      if (!deploymentHasNews(old, obj) || this.ownWrite(key, obj)) return;
      // A wake-up of a JobWorker whose children exist: served before first-time creations.
      q.add(key, true);
    });
    // A Service or PDB deleted is put back at once; one edited, at its JobWorker's next
    // reconcile (each compares them with the watch's copy). Waking on every change would
    // reconcile each new JobWorker twice more for its own creates.
    const wake = (key: string, obj: KubeObject | undefined) => {
      if (!obj) q.add(key, true);
    };
    const services = this.ownedInformer('v1', 'Service', namespace, wake);
    const pdbs = this.ownedInformer('policy/v1', 'PodDisruptionBudget', namespace, wake);
    // Read at reconciles, never a reason for one: Deployments say when pods change.
    const pods = this.ownedInformer('v1', 'Pod', namespace, undefined, slimPod);
    const records = this.ownedInformer('apps/v1', 'ControllerRevision', namespace);
    const all = [jobWorkers, deployments, services, pdbs, pods, records];
    for (const i of all) this.caches.set(`${i.kind}/${namespace ?? ''}`, i);
    return all;
  }

  /** One namespace's JobReplays: each change queues its key. */
  private replayInformer(namespace: string | undefined): Informer {
    const d = this.d;
    return new Informer(d.client, {
      apiVersion: API_VERSION,
      kind: REPLAY_KIND,
      onWatchRestart: () => d.onWatchRestart?.(REPLAY_KIND),
      namespace,
      resyncMs: d.resyncMs,
      log: d.log,
      onChange: (key) => this.replayQueue.add(key),
    });
  }

  /** JobReplays are reconciled once their lists are in. */
  private startReplays(replayInformers: Informer[]): void {
    void Promise.all(replayInformers.map((i) => i.start())).then(
      () => this.replayQueue.start(this.traced('jobreplay', (key) => this.replays.reconcile(key))),
      (err: Error) => this.d.log.error({ err }, 'initial JobReplay list failed'),
    );
  }

  /** Reconcile only once every cache is filled: a key read from a half-filled cache looks deleted. */
  private startReconciles(owned: Informer[]): void {
    void Promise.all(owned.map((i) => i.start())).then(
      () => {
        if (this.stopping) return;
        this.synced = true;
        const reconcile = this.traced('jobworker', (key) => this.reconcileJobWorker(key));
        // A creation waits for its turn (not a reconcile); the window adds the key back then.
        this.queue.start((key) =>
          this.mayCreate(key) ? reconcile(key) : Promise.resolve({ deferred: true }),
        );
        this.quarantines?.start();
      },
      (err: Error) => this.d.log.error({ err }, 'initial list failed'),
    );
  }

  /** One JobWorker reconcile; a failed creation gives its turn in the window up. */
  private async reconcileJobWorker(key: string): Promise<ProcessResult> {
    try {
      return await this.d.reconciler.reconcile(key, this.cache);
    } catch (err) {
      // A JobWorker that cannot be created (a Secret missing, an invalid spec)
      // must not hold a turn while it backs off: it queues again on its retry.
      // One whose Deployment went out (a later step failed) keeps it until
      // the Deployment has its pods: the control plane is working on it.
      const [namespace, name] = key.split('/') as [string, string];
      if (!this.d.reconciler.appliedDeployment(namespace, name)) this.creationEnded(key);
      throw err;
    }
  }

  /**
   * One reconcile, counted by result; a failed one is logged with its
   * controller, namespace, name, a reconcile id and the whole error (the
   * queue retries it with backoff). A problem a person must fix is info.
   */
  private traced(
    controller: Controller,
    run: (key: string) => Promise<ProcessResult | void>,
  ): (key: string) => Promise<ProcessResult | void> {
    return async (key) => {
      try {
        const r = await run(key);
        this.d.onReconciled?.(controller, r?.requeueAfterMs !== undefined ? 'requeue' : 'success');
        return r;
      } catch (err) {
        this.d.onReconciled?.(controller, 'error');
        const [namespace, name] = key.split('/');
        this.d.log[err instanceof NeedsAttention ? 'info' : 'warn'](
          { controller, namespace, name, reconcileID: randomUUID(), err },
          'reconcile did not finish; retrying with backoff',
        );
        throw err;
      }
    };
  }

  /** A Deployment as our own last apply left it (./reconciler.ts, ownDeploymentWrite). */
  private ownWrite(key: string, obj: KubeObject | undefined): boolean {
    const [namespace, name] = key.split('/') as [string, string];
    return this.d.reconciler.ownDeploymentWrite(namespace, name, obj?.metadata.resourceVersion);
  }

  /** A JobWorker without its Deployment is a creation: one of the window's, or it waits. */
  private mayCreate(key: string): boolean {
    const [namespace, name] = key.split('/') as [string, string];
    const jw = this.cache.get('JobWorker', namespace, name);
    if (!jw || jw.metadata.deletionTimestamp || this.cache.get('Deployment', namespace, name))
      return true;
    return this.creations.admit(key, Date.now());
  }

  /** `key` leaves the creation window; the keys whose turn it is now are queued. */
  private creationEnded(key: string): void {
    this.startTurns(this.creations.release(key, Date.now()));
  }

  private startTurns(keys: string[]): void {
    for (const k of keys) this.queue.add(k);
  }

  /** What this term's watches last saw: the reconciles read nothing else of the cluster. */
  readonly cache: ObjectCache = {
    get: (kind, namespace, name) =>
      this.informer(kind, namespace)?.cache.get(`${namespace}/${name}`),
    owned: (kind, namespace, jobworker) =>
      this.informer(kind, namespace)?.byLabel(namespace, jobworker) ?? [],
  };

  private informer(kind: string, namespace: string): Informer | undefined {
    return this.caches.get(`${kind}/${namespace}`) ?? this.caches.get(`${kind}/`);
  }

  /**
   * A watch of one kind of the objects the operator makes (labelled as
   * managed by jobfleet), indexed by their JobWorker; `wake`, when given,
   * hears which JobWorker's object changed.
   */
  private ownedInformer(
    apiVersion: string,
    kind: string,
    namespace: string | undefined,
    wake?: (key: string, obj: KubeObject | undefined, old?: KubeObject) => void,
    slim?: (obj: KubeObject) => KubeObject,
  ): Informer {
    const d = this.d;
    return new Informer(d.client, {
      apiVersion,
      kind,
      namespace,
      labelSelector: 'app.kubernetes.io/managed-by=jobfleet',
      indexLabel: LABEL_JOBWORKER,
      // nothing asks who set these objects' fields
      dropManagedFields: 'all',
      ...(slim && { slim }),
      resyncMs: 24 * 3600_000,
      log: d.log,
      onWatchRestart: () => d.onWatchRestart?.(kind),
      onChange: (_key, obj, gone, old) => {
        const seen = obj ?? gone;
        const owner = seen?.metadata.labels?.[LABEL_JOBWORKER];
        if (!wake || !seen || !owner) return;
        wake(keyOf({ metadata: { namespace: seen.metadata.namespace, name: owner } }), obj, old);
      },
    });
  }

  idle(): Promise<void> {
    return this.queue.idle();
  }

  /** What the queue gauges show. */
  figures(): QueueFigures {
    return {
      depth: { jobworker: this.queue.length, jobreplay: this.replayQueue.length },
      creations: this.creations.stats,
    };
  }

  /** Ends the term: no new reconcile starts; running ones and replay runs finish or abort. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.synced = false;
      clearInterval(this.expiry);
      this.quarantines?.stop();
      for (const i of this.informers) i.stop();
      // The replay queue first: a reconcile it is finishing may still start a
      // run, which the controller's stop then aborts with the rest.
      await Promise.all([
        this.queue.stop(),
        this.replayQueue.stop().then(() => this.replays.stop()),
      ]);
      this.d.onQueues?.(-2);
    })();
    return this.stopping;
  }
}
