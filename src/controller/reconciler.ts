// Reconcile one JobWorker, by key, in three rooms: observe (./observe.ts,
// reads only) → plan (src/reconcile/plan.ts, pure; src/reconcile/children/writes.ts
// settles which of its writes are still to make) → apply (here): those
// writes in order, then the status write, then the events of what was
// written. Level-triggered and idempotent: each plan reads everything
// again, and a steady state makes no writes at all. A reconcile that finds
// nothing new since the last plan (./unchanged.ts) makes none.
import type { Logger } from 'pino';
import { API_VERSION, KIND, LIMITED_BY } from '../api/jobworker.js';
import { KubeApiError, resourcePath, type KubeClient, type KubeObject } from '../kube/client.js';
import { eventTarget, type EventRecorder, type EventTarget } from '../kube/events.js';
import type { OperatorMetrics } from '../metrics.js';
import {
  FIELD_MANAGER,
  afterConflict,
  settle,
  type Settled,
  type Write,
} from '../reconcile/children/index.js';
import type { Observation } from '../reconcile/model/index.js';
import {
  planToCompletionAsync,
  type Plan,
  type PlanAnswers,
  type PlanEvent,
} from '../reconcile/plan.js';
import { DELETION_COST } from '../reconcile/scaling/index.js';
import { BROKER_REASONS } from '../reconcile/broker/index.js';
import { planFromHeld, workersAskEveryMs, workersShortSince } from '../reconcile/status/index.js';
import type { BrokerSettingsReader } from '../signals/broker-settings.js';
import type { DeadLetterReader } from '../signals/dead-letters.js';
import type { OutboxReader } from '../signals/outbox.js';
import { podsToAsk } from '../signals/worker-readiness.js';
import { JobWorkerMemories, type JobWorkerMemory } from './memory.js';
import { Observer, type ObjectCache, type ReconcileCounts } from './observe.js';
import { childrenVersions, unchanged } from './unchanged.js';
import { QuarantinePoll } from './quarantine-poll.js';
import { answerNeed } from './plan-reads.js';
import type { ProcessResult } from './workqueue.js';

/** A problem a person must fix; reported in status and retried with backoff. */
export class NeedsAttention extends Error {
  override readonly name = 'NeedsAttention';
}

export interface ReconcilerDeps {
  client: KubeClient;
  events: EventRecorder;
  metrics: OperatorMetrics;
  log: Logger;
  now?: () => Date;
  /** how often a JobWorker's queue is read while scaling on its age */
  pollMs?: number;
  /** how long a read Secret is reused (default 30 s): a rotated credential is seen within this */
  secretTtlMs?: number;
  /** Prometheus for fleet signals when a JobWorker names none (spec.scaling.prometheusUrl) */
  prometheusUrl?: string;
  /** reads the quarantine from each JobWorker's claims database; unset: not observed */
  deadLetters?: DeadLetterReader;
  /** reads the outbox a JobWorker names (spec.outbox); unset: not observed */
  outbox?: OutboxReader;
  /** how often a JobWorker's quarantine is read (default 30 s) */
  deadLetterReadMs?: number;
  /** reads each broker's policies and flags (BrokerSettingsSafe); unset: not checked */
  brokerSettings?: BrokerSettingsReader;
  /** how often a broker's settings are read (default a minute) */
  brokerSettingsReadMs?: number;
  /** this operator's leader-election Lease, recorded in each status (`kubectl jobworker status` reads it) */
  operatorLease?: { namespace: string; name: string };
  /** told of each spec validation and each plan (tests count them) */
  counts?: ReconcileCounts;
}

export class JobWorkerReconciler {
  /** what this process keeps of each JobWorker between reconciles, forgotten in one place (./memory.ts) */
  private readonly memory = new JobWorkerMemories();
  private readonly observer: Observer;
  private readonly now: () => Date;
  private readonly pollMs: number;
  private readonly deadLetterReadMs: number;

  constructor(private readonly d: ReconcilerDeps) {
    this.now = d.now ?? (() => new Date());
    this.pollMs = d.pollMs ?? 10_000;
    this.deadLetterReadMs = d.deadLetterReadMs ?? 30_000;
    this.observer = new Observer({
      client: d.client,
      metrics: d.metrics,
      now: this.now,
      secretTtlMs: d.secretTtlMs,
      prometheusUrl: d.prometheusUrl,
      deadLetters: d.deadLetters,
      deadLetterReadMs: this.deadLetterReadMs,
      ...(d.outbox && { outbox: d.outbox }),
      brokerSettings: d.brokerSettings,
      brokerSettingsReadMs: d.brokerSettingsReadMs,
      memory: this.memory,
      ...(d.counts && { counts: d.counts }),
    });
  }

  /**
   * `cache`: the watches of the leadership term that runs this reconcile —
   * every read of the cluster but Secrets comes from them (at a thousand
   * JobWorkers, a GET per object per reconcile is most of the apiserver's
   * load), bound per call so that a reconcile still running when its term
   * ended never reads the next term's half-filled caches.
   */
  async reconcile(key: string, cache: ObjectCache): Promise<ProcessResult> {
    const [namespace, name] = key.split('/') as [string, string];
    const raw = cache.get('JobWorker', namespace, name);
    // Deleted: the children go by garbage collection (ownerReferences); nothing
    // outside the cluster needs cleaning, so there is no finalizer.
    if (!raw || raw.metadata.deletionTimestamp) {
      this.forget(namespace, name);
      return {};
    }
    const memory = this.memory.of(key);
    const nowMs = this.now().getTime();
    const children = childrenVersions(raw, cache);
    const seen = { term: cache, raw, children, deadLetters: memory.deadLetters, nowMs };
    const last = memory.planned;
    if (last && unchanged(last, seen)) {
      this.d.metrics.reconcileUnchanged.inc();
      const due = last.dueAt;
      return due !== undefined ? { requeueAfterMs: Math.max(1, due - nowMs) } : {};
    }
    memory.planned = undefined;
    const end = this.d.metrics.reconcileDuration.startTimer();
    try {
      const obs = await this.observer.observe(raw, cache);
      const plan = await this.plan(obs, memory);
      this.setGauges(namespace, name, plan);
      this.setOutboxGauges(namespace, name, obs, plan);
      const written = await this.apply(raw, settle(plan, obs, memory.status), memory);
      if (obs.problems.length)
        throw new NeedsAttention(obs.problems.map((p) => p.message).join(' '));
      // What this plan was made from: until one of these changes, or its requeue is due, it stands.
      memory.planned = {
        term: cache,
        versions: [raw.metadata.resourceVersion, written].filter((v): v is string => !!v),
        children,
        deadLetters: memory.deadLetters,
        ...(plan.requeueAfterMs !== undefined && { dueAt: nowMs + plan.requeueAfterMs }),
      };
      return plan.requeueAfterMs !== undefined ? { requeueAfterMs: plan.requeueAfterMs } : {};
    } catch (err) {
      this.d.metrics.reconcileErrors.inc({ namespace, jobworker: name });
      throw err;
    } finally {
      end();
    }
  }

  /**
   * The quarantines read between reconciles, every deadLetterReadMs: `wake`
   * hears of each JobWorker whose read changed. Undefined when quarantines
   * are not observed.
   */
  quarantinePoll(wake: (key: string) => void): QuarantinePoll | undefined {
    if (!this.d.deadLetters) return undefined;
    return new QuarantinePoll({
      reader: this.d.deadLetters,
      memory: this.memory,
      everyMs: this.deadLetterReadMs,
      wake,
    });
  }

  /** The pure plan, with the reads it asks for answered. */
  private async plan(obs: Observation, memory: JobWorkerMemory): Promise<Plan> {
    this.d.counts?.planned?.();
    let asked = false;
    const held = memory.firstStatusHeld;
    const p = await planToCompletionAsync(
      {
        obs: planFromHeld(obs, held?.status),
        memory: memory.scaling,
        deprecationWarned: memory.deprecationWarned,
        now: this.now(),
        pollMs: this.pollMs,
        brokerSettingsReadMs: this.d.brokerSettingsReadMs,
        ...(this.d.operatorLease && { operatorLease: this.d.operatorLease }),
        ...(held && { firstStatusHeldAt: held.at }),
      },
      (need, answers) => {
        if (need.kind === 'workers') {
          asked = true;
          return this.askWorkers(obs, memory, answers);
        }
        return answerNeed(need, answers, obs, {
          log: this.d.log,
          prometheusUrl: this.d.prometheusUrl,
        });
      },
    );
    // The fleet is ready again (or not yet short long enough): the next shortfall starts afresh.
    if (!asked) memory.workers = undefined;
    if (p.memory) memory.scaling = p.memory;
    if (p.deprecationWarned !== undefined) memory.deprecationWarned = p.deprecationWarned;
    if (p.statusHeldMs !== undefined)
      memory.firstStatusHeld = { at: held?.at ?? this.now().getTime(), status: p.status };
    else if (obs.raw.status) memory.firstStatusHeld = undefined;
    return p;
  }

  /**
   * What the unready pods say, asked with backoff while the fleet stays
   * short (../reconcile/status: workersAskEveryMs): 10 s, 20 s, 40 s … at most
   * every 5 min; between, their last answer stands while the same pods are unready.
   */
  private async askWorkers(
    obs: Observation,
    memory: JobWorkerMemory,
    answers: PlanAnswers,
  ): Promise<void> {
    const now = this.now().getTime();
    const since = workersShortSince(obs.deployment);
    const pods = podsToAsk(obs.pods);
    const last = memory.workers;
    if (last && since !== undefined && last.at >= since && last.pods === pods) {
      if (now - last.at < workersAskEveryMs(last.at - since)) {
        answers.workers = last.reports;
        return;
      }
    }
    await answerNeed({ kind: 'workers' }, answers, obs, {
      log: this.d.log,
      prometheusUrl: this.d.prometheusUrl,
    });
    memory.workers = { at: now, pods, reports: answers.workers };
  }

  /**
   * The settled writes (../reconcile/children/writes.ts) in order, then the status
   * (written even when a write failed: what the plan reached is recorded),
   * then each event whose writes were made. A list of writes: every choice
   * was made by the planner and `settle`. Returns the resourceVersion our
   * status write gave the JobWorker, if one was made.
   */
  private async apply(
    raw: KubeObject,
    s: Settled,
    memory: JobWorkerMemory,
  ): Promise<string | undefined> {
    const namespace = raw.metadata.namespace as string;
    const name = raw.metadata.name;
    let made = 0;
    let failed: Error | undefined;
    try {
      for (const w of s.writes) {
        const version = await this.carryOut(raw, w);
        made++;
        if (w.op === 'apply' && w.role === 'stable') memory.deploymentApplied = true;
        if (version && w.op === 'apply' && w.object.kind === 'Deployment')
          memory.deploymentWrites = [version, ...(memory.deploymentWrites ?? [])].slice(0, 2);
      }
    } catch (err) {
      failed = err instanceof Error ? err : new Error(String(err));
    }
    let written: string | undefined;
    if (s.status) {
      written = (await this.write(s.status.object, 'status')).metadata.resourceVersion;
      memory.status = s.status.remember;
    }
    if (s.scaleDownHeld && made >= s.scaleDownHeld.after)
      this.d.metrics.scaleDownHeld.inc({ namespace, jobworker: name }, s.scaleDownHeld.count);
    const target = eventTarget({ ...raw, apiVersion: API_VERSION, kind: KIND });
    for (const { event, after } of s.events) if (made >= after) await this.emit(target, event);
    if (failed) throw failed;
    return written;
  }

  /** One of the settled writes (../reconcile/children/writes.ts); an apply's resourceVersion. */
  private async carryOut(jw: KubeObject, w: Write): Promise<string | undefined> {
    const namespace = jw.metadata.namespace as string;
    switch (w.op) {
      case 'record': {
        const { apiVersion, kind, metadata } = w.object;
        if (w.replace) await this.delete(apiVersion, kind, namespace, metadata.name);
        if (await this.create(w.object)) return undefined;
        // One exists that the watch did not show: what follows is settled by the planner's rule.
        const live = await this.d.client.find<KubeObject>(
          apiVersion,
          kind,
          namespace,
          metadata.name,
        );
        for (const next of afterConflict(w, live, jw)) await this.carryOut(jw, next);
        return undefined;
      }
      case 'podCost':
        await this.markPod(namespace, w.pod, w.cost);
        return undefined;
      case 'apply':
        return (await this.write(w.object)).metadata.resourceVersion;
      case 'delete':
        await this.delete(w.apiVersion, w.kind, namespace, w.name);
        return undefined;
    }
  }

  /**
   * A Deployment watch event that shows one of our own last applies: the plan
   * that made it knew all of it, so it wakes nothing (the controller's status
   * changes that follow do): with ./unchanged.ts's deploymentHasNews, 0.6–0.9
   * planned reconciles fewer per new JobWorker (bench/RESULTS.md, operator).
   */
  ownDeploymentWrite(namespace: string, jobworker: string, version: string | undefined): boolean {
    const writes = this.memory.peek(`${namespace}/${jobworker}`)?.deploymentWrites;
    return !!version && !!writes?.includes(version);
  }

  /** This process wrote this JobWorker's Deployment since it last forgot it. */
  appliedDeployment(namespace: string, name: string): boolean {
    return this.memory.peek(`${namespace}/${name}`)?.deploymentApplied ?? false;
  }

  private emit(target: EventTarget, e: PlanEvent): Promise<void> {
    return this.d.events.emit(target, e.type, e.reason, e.message);
  }

  private setGauges(namespace: string, jobworker: string, plan: Plan): void {
    const labels = { namespace, jobworker };
    const m = this.d.metrics;
    const s = plan.scaling;
    if (s) {
      m.targetAge.set(labels, s.targetAgeSeconds);
      for (const reason of LIMITED_BY)
        m.limitedBy.set({ ...labels, reason }, s.limitedBy === reason ? 1 : 0);
      if (s.oldestAgeSeconds !== undefined) m.oldestAge.set(labels, s.oldestAgeSeconds);
      if (s.queueDepth !== undefined) m.queueDepth.set(labels, s.queueDepth);
    }
    if (plan.rolloutBlocked !== undefined) {
      m.desiredReplicas.set(labels, plan.desiredReplicas);
      m.rolloutBlocked.set(labels, plan.rolloutBlocked ? 1 : 0);
    }
    if (plan.brokerUnsafe)
      for (const [reason, n] of Object.entries(plan.brokerUnsafe))
        m.brokerSettingsUnsafe.set({ ...labels, reason }, n);
    else for (const reason of BROKER_REASONS) m.brokerSettingsUnsafe.remove({ ...labels, reason });
  }

  /** The outbox spec.outbox names, as read for this plan; none named, none exported. */
  private setOutboxGauges(
    namespace: string,
    jobworker: string,
    obs: Observation,
    plan: Plan,
  ): void {
    const stats = obs.outbox?.stats;
    if (!obs.outbox) return this.d.metrics.forgetOutbox(namespace, jobworker);
    if (!stats) return;
    const c = plan.status.conditions?.find((x) => x.type === 'OutboxDelivering');
    this.d.metrics.setOutbox(namespace, jobworker, stats, c?.status !== 'False');
  }

  /** A create; false when one of that name exists already. */
  private async create(obj: KubeObject): Promise<boolean> {
    this.d.metrics.apiWrites.inc({ kind: obj.kind });
    return this.d.client.create(obj, undefined, FIELD_MANAGER).then(
      () => true,
      (err: unknown) => {
        if (err instanceof KubeApiError && err.status === 409) return false;
        throw err;
      },
    );
  }

  /** A deletion; one already gone is done. */
  private async delete(apiVersion: string, kind: string, namespace: string, name: string) {
    this.d.metrics.apiWrites.inc({ kind });
    await this.d.client.delete(apiVersion, kind, namespace, name).catch((err: unknown) => {
      if (!(err instanceof KubeApiError && err.status === 404)) throw err;
    });
  }

  /** One pod's deletion cost (null: our mark taken off); a pod already gone needs none. */
  private async markPod(namespace: string, pod: string, cost: string | null): Promise<void> {
    this.d.metrics.apiWrites.inc({ kind: 'Pod' });
    await this.d.client
      .request(
        'PATCH',
        resourcePath('v1', 'Pod', namespace, pod),
        { metadata: { annotations: { [DELETION_COST]: cost } } },
        'application/merge-patch+json',
      )
      .catch((err: unknown) => {
        if (!(err instanceof KubeApiError && err.status === 404)) throw err;
      });
  }

  private async write(obj: KubeObject, subresource?: 'status'): Promise<KubeObject> {
    this.d.metrics.apiWrites.inc({ kind: subresource ? `${obj.kind}/status` : obj.kind });
    try {
      return await this.d.client.apply<KubeObject>(
        obj,
        FIELD_MANAGER,
        subresource ? { subresource } : {},
      );
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404 && subresource) {
        // Deleted while we worked: nothing to report on.
        return obj;
      }
      throw err;
    }
  }

  private forget(namespace: string, name: string): void {
    this.memory.forget(`${namespace}/${name}`);
    this.d.metrics.forgetDeadLetters(namespace, name);
    this.d.metrics.forgetOutbox(namespace, name);
    // A deleted JobWorker's series go too: alerts must not fire on what no longer exists.
    const labels = { namespace, jobworker: name };
    const m = this.d.metrics;
    for (const g of [m.oldestAge, m.queueDepth, m.desiredReplicas, m.targetAge, m.rolloutBlocked])
      g.remove(labels);
    for (const reason of LIMITED_BY) m.limitedBy.remove({ ...labels, reason });
    for (const reason of BROKER_REASONS) m.brokerSettingsUnsafe.remove({ ...labels, reason });
  }
}
