// Reconcile one JobWorker, by key: observe (reads only) → desired state and
// status (pure, src/reconcile/) → server-side apply → one status write.
// Level-triggered and idempotent: it re-reads everything each time, and a
// steady state makes no writes at all.
import { isDeepStrictEqual } from 'node:util';
import type { Logger } from 'pino';
import {
  API_VERSION,
  KIND,
  parseSpec,
  type JobWorker,
  type JobWorkerSpec,
  type JobWorkerStatus,
} from '../api/jobworker.js';
import { KubeApiError, type KubeClient, type KubeObject } from '../kube/client.js';
import type { EventRecorder } from '../kube/events.js';
import type { OperatorMetrics } from '../metrics.js';
import {
  FIELD_MANAGER,
  contractHash,
  desiredDeployment,
  desiredMetricsService,
  desiredPdb,
  templateHash,
} from '../reconcile/desired.js';
import { assignRevision } from '../reconcile/revisions.js';
import { computeStatus, type DeploymentObservation } from '../reconcile/status.js';
import { isSubset } from '../reconcile/subset.js';
import type { ProcessResult } from './workqueue.js';

/** A problem a person must fix; reported in status and retried with backoff. */
export class NeedsAttention extends Error {
  override readonly name = 'NeedsAttention';
}

interface Problem {
  reason: string;
  message: string;
}

export interface ReconcilerDeps {
  client: KubeClient;
  events: EventRecorder;
  metrics: OperatorMetrics;
  log: Logger;
  now?: () => Date;
}

export class JobWorkerReconciler {
  /** object key → resourceVersion we last applied or verified, per desired hash */
  private readonly verified = new Map<string, { hash: string; rv: string }>();
  private readonly now: () => Date;

  constructor(private readonly d: ReconcilerDeps) {
    this.now = d.now ?? (() => new Date());
  }

  async reconcile(key: string): Promise<ProcessResult> {
    const [namespace, name] = key.split('/') as [string, string];
    const raw = await this.d.client.find<KubeObject>(API_VERSION, KIND, namespace, name);
    // Deleted: the children go by garbage collection (ownerReferences); nothing
    // outside the cluster needs cleaning, so there is no finalizer.
    if (!raw || raw.metadata.deletionTimestamp) {
      this.forget(namespace, name);
      return {};
    }
    const end = this.d.metrics.reconcileDuration.startTimer();
    try {
      return await this.reconcileObject(raw);
    } catch (err) {
      this.d.metrics.reconcileErrors.inc({ namespace, jobworker: name });
      throw err;
    } finally {
      end();
    }
  }

  private async reconcileObject(raw: KubeObject): Promise<ProcessResult> {
    const namespace = raw.metadata.namespace as string;
    const name = raw.metadata.name;
    const generation = raw.metadata.generation ?? 0;
    const previous = raw.status as JobWorkerStatus | undefined;
    const now = this.now();

    // --- observe -----------------------------------------------------------
    const parsed = parseSpec(raw.spec);
    const problems: Problem[] = [];
    if (!parsed.ok) {
      problems.push({
        reason: 'InvalidSpec',
        message: `The spec is invalid: ${parsed.problems.join('; ')}.`,
      });
    } else {
      problems.push(...(await this.secretProblems(namespace, parsed.spec)));
    }
    let deployment = await this.d.client.find<KubeObject>('apps/v1', 'Deployment', namespace, name);

    // --- desired + apply ---------------------------------------------------
    let history = previous?.history ?? [];
    let updateRevision = previous?.updateRevision;
    const spec = parsed.ok ? parsed.spec : undefined;
    const desiredReplicas = spec
      ? this.desiredReplicas(spec, previous)
      : (previous?.desiredReplicas ?? 0);

    if (spec && problems.length === 0) {
      const jw = { ...raw, spec } as unknown as JobWorker;
      const th = templateHash(jw);
      const assigned = assignRevision(
        history,
        { templateHash: th, image: spec.image, contractHash: contractHash(spec) },
        now,
        spec.rollout.historyLimit,
      );
      history = assigned.history;
      const revisionChanged = updateRevision !== undefined && updateRevision !== assigned.revision;
      updateRevision = assigned.revision;

      const created = !deployment;
      deployment =
        (await this.ensure(
          desiredDeployment(jw, assigned.revision, desiredReplicas),
          deployment,
        )) ?? deployment;
      await this.ensure(desiredMetricsService(jw));
      await this.ensure(desiredPdb(jw));
      const target = this.eventTarget(raw);
      if (created)
        await this.d.events.emit(
          target,
          'Normal',
          'DeploymentCreated',
          `Created Deployment ${name} at revision ${assigned.revision} (${spec.image}).`,
        );
      else if (revisionChanged)
        await this.d.events.emit(
          target,
          'Normal',
          'RevisionChanged',
          `Rolling to revision ${assigned.revision} (${spec.image}).`,
        );
      this.d.metrics.desiredReplicas.set({ namespace, jobworker: name }, desiredReplicas);
    } else if (problems.length) {
      // Hold what runs: a broken spec or a missing Secret must not take down the fleet.
      await this.d.events.emit(
        this.eventTarget(raw),
        'Warning',
        problems[0]!.reason,
        problems.map((p) => p.message).join(' '),
      );
    }

    // --- status --------------------------------------------------------------
    const status = computeStatus({
      generation,
      previous,
      problems,
      desiredReplicas,
      deployment: observeDeployment(deployment),
      updateRevision,
      history,
      now,
    });
    if (!isDeepStrictEqual(normalize(status), normalize(previous ?? {}))) {
      await this.write(
        { apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace }, status },
        'status',
      );
    }
    if (problems.length) throw new NeedsAttention(problems.map((p) => p.message).join(' '));
    // While a rollout is under way, look again soon (Deployment events also wake us).
    return status.conditions?.some((c) => c.type === 'Progressing' && c.status === 'True')
      ? { requeueAfterMs: 5000 }
      : {};
  }

  /** For now, the replica count holds between the bounds; the autoscaler (scaling issue) moves it. */
  private desiredReplicas(spec: JobWorkerSpec, previous: JobWorkerStatus | undefined): number {
    const current = previous?.desiredReplicas ?? spec.scaling.minReplicas;
    return Math.min(spec.scaling.maxReplicas, Math.max(spec.scaling.minReplicas, current));
  }

  private async secretProblems(namespace: string, spec: JobWorkerSpec): Promise<Problem[]> {
    const refs: Array<[string, { name: string; key: string } | undefined]> = [
      ['spec.broker.urlSecretRef', spec.broker.urlSecretRef],
      ['spec.broker.managementUrlSecretRef', spec.broker.managementUrlSecretRef],
      ['spec.claims.urlSecretRef', spec.claims.urlSecretRef],
    ];
    const problems: Problem[] = [];
    for (const [field, ref] of refs) {
      if (!ref) continue;
      const secret = await this.d.client.find<KubeObject & { data?: Record<string, string> }>(
        'v1',
        'Secret',
        namespace,
        ref.name,
      );
      if (!secret) {
        problems.push({
          reason: 'SecretMissing',
          message: `Secret ${namespace}/${ref.name} named by ${field} does not exist: create it, or fix ${field}.name.`,
        });
      } else if (!secret.data?.[ref.key]) {
        // Never the values: only whether the key is there.
        problems.push({
          reason: 'SecretKeyMissing',
          message: `Secret ${namespace}/${ref.name} has no key "${ref.key}" (${field}.key): add it, or fix ${field}.key.`,
        });
      }
    }
    return problems;
  }

  /**
   * Applies `desired` unless every field of it is already live. Returns the
   * object as the server has it after the apply (or undefined when skipped).
   */
  private async ensure(desired: KubeObject, live?: KubeObject): Promise<KubeObject | undefined> {
    const k = `${desired.kind}/${desired.metadata.namespace}/${desired.metadata.name}`;
    const h = JSON.stringify(desired);
    const current =
      live ??
      (await this.d.client.find<KubeObject>(
        desired.apiVersion,
        desired.kind,
        desired.metadata.namespace,
        desired.metadata.name,
      ));
    const known = this.verified.get(k);
    if (current && known && known.hash === h && known.rv === current.metadata.resourceVersion)
      return undefined;
    if (current && isSubset(desired, current)) {
      this.verified.set(k, { hash: h, rv: current.metadata.resourceVersion ?? '' });
      return undefined;
    }
    const applied = await this.write(desired);
    this.verified.set(k, { hash: h, rv: applied.metadata.resourceVersion ?? '' });
    return applied;
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
    for (const k of [...this.verified.keys()])
      if (k.endsWith(`/${namespace}/${name}`) || k.endsWith(`/${namespace}/${name}-metrics`))
        this.verified.delete(k);
  }

  private eventTarget(raw: KubeObject) {
    return {
      apiVersion: API_VERSION,
      kind: KIND,
      metadata: {
        name: raw.metadata.name,
        namespace: raw.metadata.namespace as string,
        uid: raw.metadata.uid as string,
      },
    };
  }
}

function observeDeployment(d: KubeObject | undefined): DeploymentObservation | undefined {
  if (!d) return undefined;
  const spec = d.spec as { replicas?: number } | undefined;
  const st = (d.status ?? {}) as Record<string, number | undefined>;
  return {
    generation: d.metadata.generation ?? 0,
    observedGeneration: st.observedGeneration ?? 0,
    replicas: spec?.replicas ?? 0,
    readyReplicas: st.readyReplicas ?? 0,
    updatedReplicas: st.updatedReplicas ?? 0,
    availableReplicas: st.availableReplicas ?? 0,
  };
}

/** Status as compared: undefined fields dropped (the server omits them). */
function normalize(s: object): unknown {
  return JSON.parse(JSON.stringify(s));
}
