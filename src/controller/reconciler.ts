// Reconcile one JobWorker, by key, in three rooms: observe (./observe.ts,
// reads only) → plan (src/reconcile/plan.ts, pure) → apply (here): the plan's
// writes in its order (src/reconcile/writes.ts decides which object is which),
// then the status write, then the events of what was written. Level-triggered
// and idempotent: everything is read again each time, and a steady state
// makes no writes at all.
import { createHash } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { Logger } from 'pino';
import { API_VERSION, KIND, LIMITED_BY, type JobWorkerStatus } from '../api/jobworker.js';
import { KubeApiError, resourcePath, type KubeClient, type KubeObject } from '../kube/client.js';
import { eventTarget, type EventRecorder, type EventTarget } from '../kube/events.js';
import type { OperatorMetrics } from '../metrics.js';
import { FIELD_MANAGER } from '../reconcile/desired.js';
import type { Observation } from '../reconcile/observation.js';
import {
  planToCompletionAsync,
  type Plan,
  type PlanEvent,
  type ScalingMemory,
} from '../reconcile/plan.js';
import { DELETION_COST } from '../reconcile/scale-down.js';
import { isSubset } from '../reconcile/subset.js';
import type { Write } from '../reconcile/writes.js';
import type { DeadLetterReader } from '../signals/dead-letters.js';
import { Observer, type ObjectCache } from './observe.js';
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
  /** how often a JobWorker's quarantine is read (default 30 s) */
  deadLetterReadMs?: number;
  /** how long a verified child without a watch is trusted before it is read again (drift repair; default 5 min) */
  verifyEveryMs?: number;
}

export class JobWorkerReconciler {
  /** per JobWorker (namespace/name): each child's resourceVersion we last applied or verified, per desired hash */
  private readonly verified = new Map<
    string,
    Map<string, { hash: string; rv: string; at: number }>
  >();
  /** per JobWorker (namespace/name): its uid and the ControllerRevisions known to exist */
  private readonly recorded = new Map<string, { uid: string; names: Set<string> }>();
  /** per JobWorker: a digest of the status last written, and the resourceVersion it was written over */
  private readonly lastStatus = new Map<string, { before?: string; digest: string }>();
  /** per JobWorker: the scaler's window and AIMD cap, and the queue-age estimate's memory */
  private readonly scaling = new Map<string, ScalingMemory>();
  private readonly observer: Observer;
  private readonly now: () => Date;
  private readonly pollMs: number;
  private readonly deadLetterReadMs: number;
  private readonly verifyEveryMs: number;

  constructor(private readonly d: ReconcilerDeps) {
    this.now = d.now ?? (() => new Date());
    this.pollMs = d.pollMs ?? 10_000;
    this.deadLetterReadMs = d.deadLetterReadMs ?? 30_000;
    this.verifyEveryMs = d.verifyEveryMs ?? 5 * 60_000;
    this.observer = new Observer({
      client: d.client,
      metrics: d.metrics,
      now: this.now,
      secretTtlMs: d.secretTtlMs,
      prometheusUrl: d.prometheusUrl,
      deadLetters: d.deadLetters,
      deadLetterReadMs: this.deadLetterReadMs,
    });
  }

  /**
   * `cache`: the watches of the leadership term that runs this reconcile —
   * reads from them instead of GETs (at a thousand JobWorkers, a GET per
   * object per reconcile is most of the apiserver's load), bound per call so
   * that a reconcile still running when its term ended never reads the next
   * term's half-filled caches. Without one, GETs.
   */
  async reconcile(key: string, cache?: ObjectCache): Promise<ProcessResult> {
    const [namespace, name] = key.split('/') as [string, string];
    const raw = await this.observer.jobWorker(namespace, name, cache);
    // Deleted: the children go by garbage collection (ownerReferences); nothing
    // outside the cluster needs cleaning, so there is no finalizer.
    if (!raw || raw.metadata.deletionTimestamp) {
      this.forget(namespace, name);
      return {};
    }
    const end = this.d.metrics.reconcileDuration.startTimer();
    try {
      const obs = await this.observer.observe(raw, cache);
      return await this.apply(obs, await this.plan(obs, key));
    } catch (err) {
      this.d.metrics.reconcileErrors.inc({ namespace, jobworker: name });
      throw err;
    } finally {
      end();
    }
  }

  /** The pure plan, with the reads it asks for answered. */
  private async plan(obs: Observation, key: string): Promise<Plan> {
    const p = await planToCompletionAsync(
      {
        obs,
        memory: this.scaling.get(key),
        now: this.now(),
        pollMs: this.pollMs,
        deadLetterReadMs: this.deadLetterReadMs,
      },
      (need, answers) =>
        answerNeed(need, answers, obs, {
          client: this.d.client,
          log: this.d.log,
          prometheusUrl: this.d.prometheusUrl,
        }),
    );
    if (p.memory) this.scaling.set(key, p.memory);
    return p;
  }

  /**
   * Children, then status, then events. A failed child apply still records
   * what the plan reached (the status write is deferred, not skipped), and
   * events go out only for a change that was written: one announcing the
   * Deployment (a scale, a new template, a drain) only once the Deployment
   * is as planned.
   */
  private async apply(obs: Observation, plan: Plan): Promise<ProcessResult> {
    const { raw } = obs;
    const namespace = raw.metadata.namespace as string;
    const name = raw.metadata.name;
    let applyError: Error | undefined;
    let created = false;
    let deploymentWritten = false;
    // the stable Deployment is as the plan has it (written now, or already so)
    let deploymentAsPlanned = false;
    try {
      for (const w of plan.writes) {
        const written = await this.carryOut(namespace, raw, w);
        if (w.op === 'apply' && w.role === 'stable') {
          created = w.absent && written;
          deploymentWritten = written;
          deploymentAsPlanned = true;
        }
      }
    } catch (err) {
      applyError = err instanceof Error ? err : new Error(String(err));
    }

    this.setGauges(namespace, name, plan);
    const key = `${namespace}/${name}`;
    const json = JSON.stringify(plan.status);
    const digest = sha1(json);
    // The cache may not have seen our last status write yet (its watch event
    // is on the way): compared with the cache alone, that write would go
    // again. A digest, not the status: kept for every JobWorker.
    const written = this.lastStatus.get(key);
    const changed =
      written && written.before === raw.metadata.resourceVersion
        ? written.digest !== digest
        : !isDeepStrictEqual(
            JSON.parse(json),
            normalize((raw.status as JobWorkerStatus | undefined) ?? {}),
          );
    if (changed) {
      await this.write(
        { apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace }, status: plan.status },
        'status',
      );
      this.lastStatus.set(key, { before: raw.metadata.resourceVersion, digest });
      faultAfterRolloutStep(plan.status.rollout?.phase);
    }
    const target = eventTarget({ ...raw, apiVersion: API_VERSION, kind: KIND });
    // Counted once: by the reconcile whose write lowered the replicas.
    if (plan.scaleDownHeld !== undefined && deploymentWritten)
      this.d.metrics.scaleDownHeld.inc({ namespace, jobworker: name }, plan.scaleDownHeld);
    if (created && plan.createdEvent) await this.emit(target, plan.createdEvent);
    // An event that announces a Deployment write the apiserver refused is not sent.
    if (changed)
      for (const e of plan.events)
        if (e.of !== 'Deployment' || deploymentAsPlanned) await this.emit(target, e);

    if (applyError) throw applyError;
    if (obs.problems.length) throw new NeedsAttention(obs.problems.map((p) => p.message).join(' '));
    return plan.requeueAfterMs !== undefined ? { requeueAfterMs: plan.requeueAfterMs } : {};
  }

  /** One of the plan's writes (../reconcile/writes.ts); for an apply, whether it wrote (false: all live already). */
  private async carryOut(namespace: string, jw: KubeObject, w: Write): Promise<boolean> {
    switch (w.op) {
      case 'record':
        await this.record(jw, w.object);
        return true;
      case 'podCost':
        await this.markPod(namespace, w.pod, w.cost);
        return true;
      case 'apply':
        return (await this.ensure(jw, w.object, w.live, w.absent)) !== undefined;
      case 'delete':
        this.d.metrics.apiWrites.inc({ kind: w.kind });
        await this.d.client.delete(w.apiVersion, w.kind, namespace, w.name);
        return true;
    }
  }

  /** This JobWorker's Deployment was applied (or found as desired) since the operator last forgot it. */
  appliedDeployment(namespace: string, name: string): boolean {
    return this.verified.get(`${namespace}/${name}`)?.has(`Deployment/${name}`) ?? false;
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
  }

  /**
   * Creates a revision's ControllerRevision unless this JobWorker's exists:
   * its data is the spec first seen at that revision, never patched. One left
   * by an earlier object of the same name (another uid) is replaced. A new
   * revision costs one request: create, and read only when one exists.
   */
  private async record(jw: KubeObject, desired: KubeObject): Promise<void> {
    const uid = jw.metadata.uid ?? '';
    const k = `${jw.metadata.namespace}/${jw.metadata.name}`;
    const known = this.recorded.get(k);
    const names = known?.uid === uid ? known.names : new Set<string>();
    this.recorded.set(k, { uid, names });
    if (names.has(desired.metadata.name)) return;
    const { apiVersion, kind, metadata } = desired;
    const create = () => {
      this.d.metrics.apiWrites.inc({ kind });
      return this.d.client.create(desired, undefined, FIELD_MANAGER);
    };
    try {
      await create();
    } catch (err) {
      if (!(err instanceof KubeApiError && err.status === 409)) throw err;
      const live = await this.d.client.find<KubeObject>(
        apiVersion,
        kind,
        metadata.namespace,
        metadata.name,
      );
      if (!live?.metadata.ownerReferences?.some((o) => o.uid === uid)) {
        if (live) await this.d.client.delete(apiVersion, kind, metadata.namespace, metadata.name);
        await create();
      }
    }
    names.add(metadata.name);
  }

  /**
   * Applies `desired` unless every field of it is already live. Returns the
   * object as the server has it after the apply (or undefined when skipped).
   */
  private async ensure(
    jw: KubeObject,
    desired: KubeObject,
    live?: KubeObject,
    absent = false,
  ): Promise<KubeObject | undefined> {
    const owner = `${jw.metadata.namespace}/${jw.metadata.name}`;
    const children =
      this.verified.get(owner) ?? new Map<string, { hash: string; rv: string; at: number }>();
    this.verified.set(owner, children);
    const k = `${desired.kind}/${desired.metadata.name}`;
    // a digest, not the JSON itself: kept per child of every JobWorker
    const h = sha1(JSON.stringify(desired));
    const known = children.get(k);
    const now = this.now().getTime();
    // Children without a watch (Service, PDB): trust a recent verification of
    // the same desired object instead of a GET per reconcile.
    if (!live && !absent && known?.hash === h && now - known.at < this.verifyEveryMs)
      return undefined;
    const current =
      live ??
      (absent
        ? undefined
        : await this.d.client.find<KubeObject>(
            desired.apiVersion,
            desired.kind,
            desired.metadata.namespace,
            desired.metadata.name,
          ));
    if (current && known?.hash === h && known.rv === current.metadata.resourceVersion)
      return undefined;
    if (current && isSubset(desired, current)) {
      children.set(k, { hash: h, rv: current.metadata.resourceVersion ?? '', at: now });
      return undefined;
    }
    const applied = await this.write(desired);
    children.set(k, { hash: h, rv: applied.metadata.resourceVersion ?? '', at: now });
    return applied;
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
    this.scaling.delete(`${namespace}/${name}`);
    this.lastStatus.delete(`${namespace}/${name}`);
    this.recorded.delete(`${namespace}/${name}`);
    this.observer.forget(namespace, name);
    this.d.metrics.forgetDeadLetters(namespace, name);
    // A deleted JobWorker's series go too: alerts must not fire on what no longer exists.
    const labels = { namespace, jobworker: name };
    const m = this.d.metrics;
    for (const g of [m.oldestAge, m.queueDepth, m.desiredReplicas, m.targetAge, m.rolloutBlocked])
      g.remove(labels);
    for (const reason of LIMITED_BY) m.limitedBy.remove({ ...labels, reason });
    this.verified.delete(`${namespace}/${name}`);
  }
}

const sha1 = (s: string) => createHash('sha1').update(s).digest('base64');

/** Status as compared: undefined fields dropped (the server omits them). */
function normalize(s: object): unknown {
  return JSON.parse(JSON.stringify(s));
}

/**
 * Fault injection for the restart test: JOBFLEET_FAULT=after-rollout-step:<step>
 * SIGKILLs the operator right after it records that rollback step, so the
 * next operator must resume from status alone. Never set in production.
 */
function faultAfterRolloutStep(step: string | undefined): void {
  if (step && process.env.JOBFLEET_FAULT === `after-rollout-step:${step}`)
    process.kill(process.pid, 'SIGKILL');
}
