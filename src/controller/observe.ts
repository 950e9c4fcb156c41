// Every read of one JobWorker reconcile, into one Observation: the spec and
// what is wrong with it, the Secrets it names (values stay in memory), its
// Deployment, the queue's statistics and throttling, and the quarantine
// snapshot. Each source is a value or the reason it is missing; nothing here
// decides anything (src/reconcile/plan.ts does).
import { API_VERSION, KIND, parseSpec, type JobWorkerSpec } from '../api/jobworker.js';
import type { KubeClient, KubeObject } from '../kube/client.js';
import type { OperatorMetrics } from '../metrics.js';
import {
  cohortDeploymentName,
  envProblems,
  LABEL_COHORT,
  LABEL_JOBWORKER,
} from '../reconcile/desired.js';
import type { CapacityReading, PodCounters } from '../reconcile/capacity.js';
import type { Observation, Problem, QueueObservation } from '../reconcile/observation.js';
import type { DeadLetterInput } from '../reconcile/status.js';
import type { DeadLetterReader, DeadLetterStats } from '../signals/dead-letters.js';
import { fetchFleetSignals, prometheusFor, PrometheusError } from '../signals/prometheus.js';
import { readWorkerPods } from '../signals/worker-metrics.js';
import type { HeadReading, QueueStats } from '../reconcile/queue-age.js';
import { fetchQueueStats, ManagementApiError, vhostOf } from '../signals/rabbitmq.js';

/** The RabbitMQ management API and vhost a JobWorker's Secrets name; undefined without both URLs. */
export function managementApi(
  secrets: Map<string, string>,
): { url: string; vhost: string } | undefined {
  const url = secrets.get('spec.broker.managementUrlSecretRef');
  const amqpUrl = secrets.get('spec.broker.urlSecretRef');
  return url && amqpUrl ? { url, vhost: vhostOf(amqpUrl) } : undefined;
}

/** A JobWorker or Deployment as a watch last saw it (the informers' caches). */
export type ObjectCache = (
  kind: 'JobWorker' | 'Deployment',
  namespace: string,
  name: string,
) => KubeObject | undefined;

export interface ObserverDeps {
  client: KubeClient;
  metrics: OperatorMetrics;
  now: () => Date;
  secretTtlMs?: number;
  prometheusUrl?: string;
  deadLetters?: DeadLetterReader;
  deadLetterReadMs: number;
}

interface DeadLetterRead {
  stats?: DeadLetterStats;
  error?: string;
}

/**
 * Without Prometheus, how often the worker pods' own figures are read per
 * JobWorker: a pod list and a few HTTP reads, and capacity moves slowly
 * (its estimate is a five-minute window).
 */
const WORKER_COUNTERS_READ_MS = 30_000;

/** How long a reconcile waits for a quarantine read before going on with the last one. */
const DEAD_LETTER_READ_WAIT_MS = 2000;

export class Observer {
  /** Secrets are not watched (they are not ours to list): read at most every 30 s per Secret. */
  private readonly secretCache = new Map<
    string,
    { at: number; secret: (KubeObject & { data?: Record<string, string> }) | undefined }
  >();
  /** per JobWorker: the last quarantine read (its stats, or the error and the stats before it) */
  private readonly deadLetterReads = new Map<string, DeadLetterRead>();
  /** per JobWorker until it is forgotten: a read started before forget() writes nothing */
  private readonly deadLetterTokens = new Map<string, object>();
  /** per JobWorker: when its worker pods' figures were last read */
  private readonly countersReadAt = new Map<string, number>();

  constructor(private readonly d: ObserverDeps) {}

  /** `cache`: the calling leadership term's watches; without one, a GET. */
  async jobWorker(
    namespace: string,
    name: string,
    cache?: ObjectCache,
  ): Promise<KubeObject | undefined> {
    return cache
      ? cache('JobWorker', namespace, name)
      : this.d.client.find<KubeObject>(API_VERSION, KIND, namespace, name);
  }

  async observe(raw: KubeObject, cache?: ObjectCache): Promise<Observation> {
    const namespace = raw.metadata.namespace as string;
    const name = raw.metadata.name;
    const parsed = parseSpec(raw.spec);
    const problems: Problem[] = [];
    if (!parsed.ok)
      problems.push({
        reason: 'InvalidSpec',
        message: `The spec is invalid: ${parsed.problems.join('; ')}.`,
      });
    const spec = parsed.ok ? parsed.spec : undefined;
    if (spec) {
      const env = envProblems(spec);
      if (env.length) problems.push({ reason: 'InvalidSpec', message: env.join(' ') });
    }
    const secrets = spec
      ? await this.readSecrets(namespace, spec)
      : { problems: [], values: new Map<string, string>() };
    problems.push(...secrets.problems);
    const deployment = cache
      ? cache('Deployment', namespace, name)
      : await this.d.client.find<KubeObject>('apps/v1', 'Deployment', namespace, name);
    const cohortName = cohortDeploymentName(name);
    const named = cache
      ? cache('Deployment', namespace, cohortName)
      : await this.d.client.find<KubeObject>('apps/v1', 'Deployment', namespace, cohortName);
    // Only this JobWorker's cohort: a Deployment of that name may be another's (a JobWorker named so).
    const labels = named?.metadata.labels ?? {};
    const cohortDeployment =
      labels[LABEL_COHORT] === 'true' && labels[LABEL_JOBWORKER] === name ? named : undefined;
    const polling = !!secrets.values.get('spec.broker.managementUrlSecretRef');
    const queue =
      spec && problems.length === 0
        ? await this.queue(namespace, name, spec, secrets.values, deployment, cohortDeployment)
        : undefined;
    const deadLetters =
      spec && this.d.deadLetters
        ? await this.observeDeadLetters(namespace, name, spec, secrets.values)
        : undefined;
    return {
      raw,
      spec,
      problems,
      secrets: secrets.values,
      deployment,
      ...(cohortDeployment && { cohortDeployment }),
      ...(queue && { queue }),
      polling,
      ...(deadLetters && { deadLetters }),
    };
  }

  /** Drops what was kept for a deleted JobWorker; a quarantine read still running writes nothing. */
  forget(namespace: string, name: string): void {
    this.deadLetterReads.delete(`${namespace}/${name}`);
    this.deadLetterTokens.delete(`${namespace}/${name}`);
    this.countersReadAt.delete(`${namespace}/${name}`);
  }

  private async queue(
    namespace: string,
    name: string,
    spec: JobWorkerSpec,
    secrets: Map<string, string>,
    deployment: KubeObject | undefined,
    cohort: KubeObject | undefined,
  ): Promise<QueueObservation> {
    const api = managementApi(secrets);
    if (!api)
      return {
        ok: false,
        missing:
          'no queue-age signal: set spec.broker.managementUrlSecretRef to the RabbitMQ management API',
      };
    try {
      const stats = await fetchQueueStats(api.url, api.vhost, spec.broker.queue);
      const prometheusUrl = prometheusFor(spec, this.d.prometheusUrl);
      const ready = (deployment?.status as { readyReplicas?: number } | undefined)?.readyReplicas;
      const { heads, counters } = await this.fromPods(namespace, name, {
        heads: headsWanted(stats, deployment, cohort),
        counters: !prometheusUrl && !!ready && this.countersDue(namespace, name),
      });
      if (!prometheusUrl) {
        const capacity: CapacityReading | undefined = counters?.length
          ? { source: 'WorkerMetrics', pods: counters }
          : undefined;
        return { ok: true, stats, ...(heads && { heads }), ...(capacity && { capacity }) };
      }
      const fleet = await fetchFleetSignals(prometheusUrl, namespace, name);
      return {
        ok: true,
        stats,
        ...(heads && { heads }),
        throttleRate: fleet.throttleRate,
        ...(fleet.pods.length && { capacity: { source: 'Prometheus', pods: fleet.pods } }),
      };
    } catch (err) {
      return {
        ok: false,
        missing:
          err instanceof ManagementApiError || err instanceof PrometheusError
            ? err.message
            : `queue signal failed: ${(err as Error).message}`,
      };
    }
  }

  /** One read of the worker pods for what this poll wants of them; an unreadable list is no reading. */
  private async fromPods(
    namespace: string,
    name: string,
    want: { heads: boolean; counters: boolean },
  ): Promise<{ heads?: HeadReading[]; counters?: PodCounters[] }> {
    if (!want.heads && !want.counters) return {};
    return readWorkerPods(this.d.client, namespace, name, want).catch(() => ({}));
  }

  /** The worker pods' own figures are read every WORKER_COUNTERS_READ_MS (capacity keeps its last between). */
  private countersDue(namespace: string, name: string): boolean {
    const key = `${namespace}/${name}`;
    const now = this.d.now().getTime();
    if (now - (this.countersReadAt.get(key) ?? -Infinity) < WORKER_COUNTERS_READ_MS) return false;
    this.countersReadAt.set(key, now);
    return true;
  }

  private async secret(namespace: string, name: string) {
    const k = `${namespace}/${name}`;
    const hit = this.secretCache.get(k);
    const now = this.d.now().getTime();
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
    const read = this.d.deadLetters
      .read(claimsUrl, spec.broker.queue, this.d.deadLetterReadMs)
      .then(
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
}

/**
 * What the worker pods saw of the queue's head is wanted when the broker
 * gives no head timestamp (quorum queues; classic ones with untimestamped
 * messages) and the fleet has pods.
 */
function headsWanted(
  stats: QueueStats,
  deployment: KubeObject | undefined,
  cohort: KubeObject | undefined,
): boolean {
  if (stats.headMessageTimestamp || (stats.type === 'classic' && stats.messagesReady === 0))
    return false;
  const pods = (d: KubeObject | undefined) =>
    Number((d?.status as { replicas?: number } | undefined)?.replicas ?? 0);
  return pods(deployment) + pods(cohort) > 0;
}
