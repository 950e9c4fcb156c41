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
  desiredDeployment,
  desiredMetricsService,
  desiredPdb,
  envProblems,
} from '../reconcile/desired.js';
import {
  computeStatus,
  deadLetterDueInMs,
  observeDeployment,
  type DeadLetterInput,
} from '../reconcile/status.js';
import type { DeadLetterReader, DeadLetterStats } from '../signals/dead-letters.js';
import { isSubset } from '../reconcile/subset.js';
import {
  decideReplicas,
  type LimitedBy,
  type ScalingSpec,
  type ScalingState,
  type Signals,
} from '../reconcile/scaling.js';
import {
  fetchQueueStats,
  ManagementApiError,
  queueAge,
  vhostOf,
  type AgeMemory,
  type QueueAge,
} from '../signals/rabbitmq.js';
import { fetchFleetSignals, PrometheusError } from '../signals/prometheus.js';
import type { RolloutPlan } from '../reconcile/rollout-plan.js';
import { observeAndPlanRollout } from './rollouts.js';
import type { ProcessResult } from './workqueue.js';

/** How long a verified child without a watch is trusted before it is read again (drift repair). */
const VERIFY_EVERY_MS = 5 * 60_000;

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
  /** how often a JobWorker's queue is read while scaling on its age */
  pollMs?: number;
  /**
   * Reads from the informers' caches (kept current by watches) instead of
   * GETs: at a thousand JobWorkers, a GET per object per reconcile is most of
   * the apiserver's load.
   */
  cache?: (
    kind: 'JobWorker' | 'Deployment',
    namespace: string,
    name: string,
  ) => KubeObject | undefined;
  /** how long a read Secret is reused (default 30 s): a rotated credential is seen within this */
  secretTtlMs?: number;
  /** Prometheus for fleet signals when a JobWorker names none (spec.scaling.prometheusUrl) */
  prometheusUrl?: string;
  /** reads the quarantine from each JobWorker's claims database; unset: not observed */
  deadLetters?: DeadLetterReader;
  /** how often a JobWorker's quarantine is read (default 30 s) */
  deadLetterReadMs?: number;
}

/** Every value of limitedBy, so that the gauge reads 0 for those not in force. */
const LIMITS: readonly LimitedBy[] = [
  'age',
  'downstream',
  'maxReplicas',
  'minReplicas',
  'stabilization',
  'signalMissing',
];

interface DeadLetterRead {
  stats?: DeadLetterStats;
  error?: string;
}

/** How long a reconcile waits for a quarantine read before going on with the last one. */
const DEAD_LETTER_READ_WAIT_MS = 2000;

export interface ScalingOutcome {
  desired: number;
  limitedBy: LimitedBy;
  message: string;
  signalOk: boolean;
  oldestAgeSeconds?: number;
  queueDepth?: number;
  ageSource?: 'HeadTimestamp' | 'Estimated';
  polling: boolean;
}

export class JobWorkerReconciler {
  /** object key → resourceVersion we last applied or verified, per desired hash */
  private readonly verified = new Map<string, { hash: string; rv: string; at: number }>();
  /** per JobWorker: the scaler's window and AIMD cap, and the queue-age estimate's memory */
  private readonly scaling = new Map<string, { scaling: ScalingState; age: AgeMemory }>();
  /** per JobWorker: the last quarantine read (its stats, or the error and the stats before it) */
  private readonly deadLetterReads = new Map<string, DeadLetterRead>();
  /** per JobWorker until it is forgotten: a read started before forget() writes nothing */
  private readonly deadLetterTokens = new Map<string, object>();
  private readonly now: () => Date;
  private readonly pollMs: number;
  private readonly deadLetterReadMs: number;
  /** Secrets are not watched (they are not ours to list): read at most every 30 s per Secret. Values never leave memory. */
  private readonly secretCache = new Map<
    string,
    { at: number; secret: (KubeObject & { data?: Record<string, string> }) | undefined }
  >();

  constructor(private readonly d: ReconcilerDeps) {
    this.now = d.now ?? (() => new Date());
    this.pollMs = d.pollMs ?? 10_000;
    this.deadLetterReadMs = d.deadLetterReadMs ?? 30_000;
  }

  async reconcile(key: string): Promise<ProcessResult> {
    const [namespace, name] = key.split('/') as [string, string];
    const raw = this.d.cache
      ? this.d.cache('JobWorker', namespace, name)
      : await this.d.client.find<KubeObject>(API_VERSION, KIND, namespace, name);
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
    }
    if (parsed.ok) {
      const env = envProblems(parsed.spec);
      if (env.length) problems.push({ reason: 'InvalidSpec', message: env.join(' ') });
    }
    const secrets = parsed.ok
      ? await this.readSecrets(namespace, parsed.spec)
      : { problems: [], values: new Map<string, string>() };
    problems.push(...secrets.problems);
    let deployment = this.d.cache
      ? this.d.cache('Deployment', namespace, name)
      : await this.d.client.find<KubeObject>('apps/v1', 'Deployment', namespace, name);

    // --- desired + apply ---------------------------------------------------
    let history = previous?.history ?? [];
    let updateRevision = previous?.updateRevision;
    const spec = parsed.ok ? parsed.spec : undefined;
    const live = (deployment?.spec as { replicas?: number } | undefined)?.replicas;
    // While a rollback drains, the Deployment sits at 0: the autoscaler keeps
    // its own count, to restore the previous revision at.
    const current = Number(
      (previous?.rollout && live === 0 ? previous.desiredReplicas : live) ??
        previous?.desiredReplicas ??
        0,
    );
    const scaling =
      spec && problems.length === 0
        ? await this.scale(
            `${namespace}/${name}`,
            spec,
            current,
            Number(
              (deployment?.status as { readyReplicas?: number } | undefined)?.readyReplicas ?? 0,
            ),
            secrets.values,
          )
        : undefined;
    const desiredReplicas = scaling?.desired ?? current;
    const deadLetters =
      spec && this.d.deadLetters
        ? await this.observeDeadLetters(namespace, name, spec, secrets.values)
        : undefined;

    let plan: RolloutPlan | undefined;
    let appliedReplicas = desiredReplicas;
    if (spec && problems.length === 0) {
      plan = await observeAndPlanRollout(
        {
          raw,
          spec,
          previous,
          deployment,
          now,
          ageSeconds: scaling?.signalOk ? scaling.oldestAgeSeconds : undefined,
        },
        {
          client: this.d.client,
          log: this.d.log,
          secrets: secrets.values,
          prometheusUrl: this.d.prometheusUrl,
        },
      );
      history = plan.history;
      const revisionChanged =
        updateRevision !== undefined && updateRevision !== plan.targetRevision;
      updateRevision = plan.targetRevision;
      appliedReplicas = plan.scaleToZero ? 0 : desiredReplicas;
      // The template applied is the planned revision's, from that revision's spec.
      const jw = { ...raw, spec: plan.deploySpec } as unknown as JobWorker;
      const created = !deployment;
      deployment =
        (await this.ensure(
          desiredDeployment(jw, plan.deployRevision, appliedReplicas),
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
          `Created Deployment ${name} at revision ${plan.deployRevision} (${plan.deploySpec.image}) with ${appliedReplicas} replicas.${scaling ? ` ${scaling.message}` : ''}`,
        );
      else if (revisionChanged && !plan.status.rollingBack)
        await this.d.events.emit(
          target,
          'Normal',
          'RevisionChanged',
          `Rolling to revision ${plan.targetRevision} (${plan.deploySpec.image}).`,
        );
      for (const e of plan.events) await this.d.events.emit(target, e.type, e.reason, e.message);
      this.d.metrics.desiredReplicas.set({ namespace, jobworker: name }, desiredReplicas);
      this.d.metrics.rolloutBlocked.set({ namespace, jobworker: name }, plan.blocked ? 1 : 0);
      if (deployment && !created && scaling && !plan.scaleToZero && desiredReplicas !== current) {
        await this.d.events.emit(
          target,
          'Normal',
          desiredReplicas > current ? 'ScaledUp' : 'ScaledDown',
          `Scaled from ${current} to ${desiredReplicas} replicas. ${scaling.message}`,
        );
      }
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
      scaling,
      deadLetters,
      rollout: plan?.status,
      appliedReplicas,
    });
    if (!isDeepStrictEqual(normalize(status), normalize(previous ?? {}))) {
      await this.write(
        { apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace }, status },
        'status',
      );
      faultAfterRolloutStep(status.rollout?.phase);
    }
    if (problems.length) throw new NeedsAttention(problems.map((p) => p.message).join(' '));
    // Deployment changes wake us through its watch; queue age has no watch, so poll it.
    if (plan?.requeueMs !== undefined) return { requeueAfterMs: plan.requeueMs };
    if (status.conditions?.some((c) => c.type === 'Progressing' && c.status === 'True'))
      return { requeueAfterMs: Math.min(5000, this.pollMs) };
    // The quarantine has no watch either: read it again soon, and turn the
    // condition at the moment the oldest entry passes maxAge.
    const deadLetterDue = deadLetters
      ? Math.min(this.deadLetterReadMs, deadLetterDueInMs(deadLetters, now) ?? Infinity)
      : undefined;
    const after = Math.min(scaling?.polling ? this.pollMs : Infinity, deadLetterDue ?? Infinity);
    return Number.isFinite(after) ? { requeueAfterMs: after } : {};
  }

  /** Desired replicas from the queue's signals, through the pure decision in src/reconcile/scaling.ts. */
  private async scale(
    key: string,
    spec: JobWorkerSpec,
    current: number,
    readyReplicas: number,
    secrets: Map<string, string>,
  ): Promise<ScalingOutcome> {
    const sc = spec.scaling;
    const scalingSpec: ScalingSpec = {
      ...sc,
      prefetch: spec.broker.prefetch,
      maxConcurrency: sc.downstream?.maxConcurrency,
    };
    const memory = this.scaling.get(key) ?? { scaling: { recommendations: [] }, age: {} };
    const nowMs = this.now().getTime();
    const mgmtUrl = secrets.get('spec.broker.managementUrlSecretRef');
    const amqpUrl = secrets.get('spec.broker.urlSecretRef');
    let signals: Signals;
    let age: QueueAge | undefined;
    if (!mgmtUrl || !amqpUrl) {
      signals = {
        ok: false,
        missing:
          'no queue-age signal: set spec.broker.managementUrlSecretRef to the RabbitMQ management API',
      };
    } else {
      try {
        const stats = await fetchQueueStats(mgmtUrl, vhostOf(amqpUrl), spec.broker.queue);
        const r = queueAge(stats, nowMs, memory.age);
        memory.age = r.memory;
        age = r.age;
        signals = { ...age.signals, readyReplicas };
        const prometheusUrl = spec.scaling.prometheusUrl ?? this.d.prometheusUrl;
        if (prometheusUrl) {
          const [namespace, jobworker] = key.split('/') as [string, string];
          const fleet = await fetchFleetSignals(prometheusUrl, namespace, jobworker);
          signals = { ...signals, throttleRate: fleet.throttleRate };
        }
      } catch (err) {
        signals = {
          ok: false,
          missing:
            err instanceof ManagementApiError || err instanceof PrometheusError
              ? err.message
              : `queue signal failed: ${(err as Error).message}`,
        };
      }
    }
    // A new fleet starts at minReplicas; an unreadable signal never moves it.
    const base = current === 0 && !this.scaling.has(key) ? sc.minReplicas : current;
    const d = decideReplicas(scalingSpec, base, signals, memory.scaling, nowMs);
    memory.scaling = d.state;
    this.scaling.set(key, memory);
    const desired = signals.ok
      ? d.desired
      : Math.min(sc.maxReplicas, Math.max(sc.minReplicas, base));
    {
      const [namespace, jobworker] = key.split('/') as [string, string];
      this.d.metrics.targetAge.set({ namespace, jobworker }, sc.targetOldestAgeSeconds);
      for (const reason of LIMITS)
        this.d.metrics.limitedBy.set(
          { namespace, jobworker, reason },
          d.limitedBy === reason ? 1 : 0,
        );
    }
    if (age) {
      const [namespace, jobworker] = key.split('/') as [string, string];
      this.d.metrics.oldestAge.set({ namespace, jobworker }, age.signals.oldestAgeSeconds);
      this.d.metrics.queueDepth.set({ namespace, jobworker }, age.signals.depth);
    }
    return {
      desired,
      limitedBy: d.limitedBy,
      message: d.message,
      signalOk: signals.ok,
      oldestAgeSeconds: age?.signals.oldestAgeSeconds,
      queueDepth: age?.signals.depth,
      ageSource: age?.ageSource,
      polling: !!mgmtUrl,
    };
  }

  private async secret(namespace: string, name: string) {
    const k = `${namespace}/${name}`;
    const hit = this.secretCache.get(k);
    const now = this.now().getTime();
    if (hit && now - hit.at < (this.d.secretTtlMs ?? 30_000)) return hit.secret;
    const secret = await this.d.client.find<KubeObject & { data?: Record<string, string> }>(
      'v1',
      'Secret',
      namespace,
      name,
    );
    if (this.secretCache.size > 10_000) this.secretCache.clear();
    // Only found Secrets are remembered: a missing one is looked for again on every retry.
    if (secret) this.secretCache.set(k, { at: now, secret });
    else this.secretCache.delete(k);
    return secret;
  }

  /** Reads the Secrets the spec names; problems name the Secret and key, never a value. */
  private async readSecrets(
    namespace: string,
    spec: JobWorkerSpec,
  ): Promise<{ problems: Problem[]; values: Map<string, string> }> {
    const refs: Array<[string, { name: string; key: string } | undefined]> = [
      ['spec.broker.urlSecretRef', spec.broker.urlSecretRef],
      ['spec.broker.managementUrlSecretRef', spec.broker.managementUrlSecretRef],
      ['spec.claims.urlSecretRef', spec.claims.urlSecretRef],
    ];
    const problems: Problem[] = [];
    const values = new Map<string, string>();
    for (const [field, ref] of refs) {
      if (!ref) continue;
      const secret = await this.secret(namespace, ref.name);
      const encoded = secret?.data?.[ref.key];
      if (!secret) {
        problems.push({
          reason: 'SecretMissing',
          message: `Secret ${namespace}/${ref.name} named by ${field} does not exist: create it, or fix ${field}.name.`,
        });
      } else if (!encoded) {
        problems.push({
          reason: 'SecretKeyMissing',
          message: `Secret ${namespace}/${ref.name} has no key "${ref.key}" (${field}.key): add it, or fix ${field}.key.`,
        });
      } else {
        values.set(field, Buffer.from(encoded, 'base64').toString('utf8').trim());
      }
    }
    return { problems, values };
  }

  /**
   * Applies `desired` unless every field of it is already live. Returns the
   * object as the server has it after the apply (or undefined when skipped).
   */
  private async ensure(desired: KubeObject, live?: KubeObject): Promise<KubeObject | undefined> {
    const k = `${desired.kind}/${desired.metadata.namespace}/${desired.metadata.name}`;
    const h = JSON.stringify(desired);
    const known = this.verified.get(k);
    const now = this.now().getTime();
    // Children without a watch (Service, PDB): trust a recent verification of
    // the same desired object instead of a GET per reconcile.
    if (!live && known?.hash === h && now - known.at < VERIFY_EVERY_MS) return undefined;
    const current =
      live ??
      (await this.d.client.find<KubeObject>(
        desired.apiVersion,
        desired.kind,
        desired.metadata.namespace,
        desired.metadata.name,
      ));
    if (current && known?.hash === h && known.rv === current.metadata.resourceVersion)
      return undefined;
    if (current && isSubset(desired, current)) {
      this.verified.set(k, { hash: h, rv: current.metadata.resourceVersion ?? '', at: now });
      return undefined;
    }
    const applied = await this.write(desired);
    this.verified.set(k, { hash: h, rv: applied.metadata.resourceVersion ?? '', at: now });
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

  /**
   * The quarantine of this JobWorker's queue, from a snapshot of its claims
   * database at most deadLetterReadMs old (one query per database, shared by
   * its JobWorkers). A slow database holds the reconcile for at most 2 s; the
   * read finishes in the background and the next reconcile sees it.
   */
  private async observeDeadLetters(
    namespace: string,
    name: string,
    spec: JobWorkerSpec,
    secrets: Map<string, string>,
  ): Promise<DeadLetterInput | undefined> {
    const claimsUrl = secrets.get('spec.claims.urlSecretRef');
    if (!claimsUrl || !this.d.deadLetters) return undefined;
    const key = `${namespace}/${name}`;
    // A read that finishes after its JobWorker was deleted must not write: it
    // would bring back series that forget() removed, and an alert would fire
    // for what no longer exists. The token lives until forget().
    let token = this.deadLetterTokens.get(key);
    if (!token) this.deadLetterTokens.set(key, (token = {}));
    const current = () => this.deadLetterTokens.get(key) === token;
    const read = this.d.deadLetters.read(claimsUrl, spec.broker.queue, this.deadLetterReadMs).then(
      (stats): DeadLetterRead => {
        if (current())
          this.d.metrics.setDeadLetters(namespace, name, stats, spec.deadLetter.maxAgeSeconds);
        return { stats };
      },
      (err: Error): DeadLetterRead => ({
        stats: this.deadLetterReads.get(key)?.stats,
        error: err.message,
      }),
    );
    void read.then((r) => {
      if (current()) this.deadLetterReads.set(key, r);
    });
    const r =
      (await Promise.race([
        read,
        new Promise<undefined>((res) => setTimeout(() => res(undefined), DEAD_LETTER_READ_WAIT_MS)),
      ])) ?? this.deadLetterReads.get(key);
    return {
      owner: spec.deadLetter.owner,
      maxAgeSeconds: spec.deadLetter.maxAgeSeconds,
      queue: spec.broker.queue,
      stats: r?.stats,
      error: r?.error,
    };
  }

  private forget(namespace: string, name: string): void {
    this.scaling.delete(`${namespace}/${name}`);
    this.deadLetterReads.delete(`${namespace}/${name}`);
    this.deadLetterTokens.delete(`${namespace}/${name}`);
    this.d.metrics.forgetDeadLetters(namespace, name);
    // A deleted JobWorker's series go too: alerts must not fire on what no longer exists.
    const labels = { namespace, jobworker: name };
    const m = this.d.metrics;
    for (const g of [m.oldestAge, m.queueDepth, m.desiredReplicas, m.targetAge, m.rolloutBlocked])
      g.remove(labels);
    for (const reason of LIMITS) m.limitedBy.remove({ ...labels, reason });
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
