// Every read of one JobWorker reconcile, into one Observation: the spec and
// what is wrong with it, the Secrets it names (values stay in memory), its
// Deployments, Service, PDB, pods and revision records as the term's watches
// saw them, the queue's statistics and throttling, and the quarantine
// snapshot. Each source is a value or the reason it is missing; nothing here
// decides anything (src/reconcile/plan.ts and writes.ts do).
import { parseSpec, type JobWorkerSpec } from '../api/jobworker.js';
import type { KubeClient, KubeObject } from '../kube/client.js';
import type { OperatorMetrics } from '../metrics.js';
import { cohortDeploymentName, envProblems, ownCohort } from '../reconcile/children/index.js';
import {
  OUTBOX_READ_MS,
  type CapacityReading,
  type Observation,
  type Problem,
  type QueueObservation,
  type DeadLetterInput,
  type OutboxInput,
  type QueueStats,
} from '../reconcile/model/index.js';
import type { BrokerSettingsReader } from '../signals/broker-settings.js';
import type { DeadLetterReader } from '../signals/dead-letters.js';
import type { OutboxReader } from '../signals/outbox.js';
import type { JobWorkerMemories, ParsedSpec } from './memory.js';
import { readQuarantine } from './quarantine-poll.js';
import { fetchFleetSignals, prometheusFor, PrometheusError } from '../signals/prometheus.js';
import { readWorkerPods, type Pod } from '../signals/worker-metrics.js';
import { fetchQueueStats, ManagementApiError, vhostOf } from '../signals/rabbitmq.js';

/** The RabbitMQ management API and vhost a JobWorker's Secrets name; undefined without both URLs. */
export function managementApi(
  secrets: Map<string, string>,
): { url: string; vhost: string } | undefined {
  const url = secrets.get('spec.broker.managementUrlSecretRef');
  const amqpUrl = secrets.get('spec.broker.urlSecretRef');
  return url && amqpUrl ? { url, vhost: vhostOf(amqpUrl) } : undefined;
}

/** What the leadership term's watches last saw (the informers' caches): nothing here is a GET. */
export interface ObjectCache {
  get(kind: 'JobWorker' | 'Deployment', namespace: string, name: string): KubeObject | undefined;
  /** the objects of `kind` labelled as the JobWorker's (whoever owns them) */
  owned(
    kind: 'Pod' | 'ControllerRevision' | 'Service' | 'PodDisruptionBudget',
    namespace: string,
    jobworker: string,
  ): KubeObject[];
}

export interface ObserverDeps {
  client: KubeClient;
  metrics: OperatorMetrics;
  now: () => Date;
  secretTtlMs?: number;
  prometheusUrl?: string;
  deadLetters?: DeadLetterReader;
  deadLetterReadMs: number;
  /** reads the outbox spec.outbox names; unset: not observed */
  outbox?: OutboxReader;
  /** reads the broker's policies and flags (BrokerSettingsSafe); unset: not checked */
  brokerSettings?: BrokerSettingsReader;
  /** how often a broker's settings are read (default a minute) */
  brokerSettingsReadMs?: number;
  /** each JobWorker's memory (./memory.ts), shared with the reconciler that forgets it */
  memory: JobWorkerMemories;
  /** told of each spec validation (tests count them) */
  counts?: ReconcileCounts;
}

/** The costly steps of a reconcile, counted (tests: a reconcile that found nothing new makes none). */
export interface ReconcileCounts {
  specParsed?(): void;
  planned?(): void;
}

/**
 * Without Prometheus, how often the worker pods' own figures are read per
 * JobWorker: a pod list and a few HTTP reads, and capacity moves slowly
 * (its estimate is a five-minute window).
 */
const WORKER_COUNTERS_READ_MS = 30_000;

/** How long a reconcile waits for a quarantine read before going on with the last one. */
const DATABASE_READ_WAIT_MS = 2000;

/**
 * A database read, or undefined once DATABASE_READ_WAIT_MS has passed: a slow
 * database holds a reconcile for at most that long (the read goes on).
 */
function withinReadWait<T>(read: Promise<T>): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((res) => {
    timer = setTimeout(() => res(undefined), DATABASE_READ_WAIT_MS);
  });
  return Promise.race([read, late]).finally(() => clearTimeout(timer));
}

export class Observer {
  /** Secrets are not watched (they are not ours to list): read at most every 30 s per Secret. */
  private readonly secretCache = new Map<
    string,
    { at: number; secret: (KubeObject & { data?: Record<string, string> }) | undefined }
  >();

  constructor(private readonly d: ObserverDeps) {}

  /** `cache`: the calling leadership term's watches. */
  async observe(raw: KubeObject, cache: ObjectCache): Promise<Observation> {
    const namespace = raw.metadata.namespace as string;
    const name = raw.metadata.name;
    const { parsed, env } = this.parsed(raw);
    const problems: Problem[] = [];
    if (!parsed.ok)
      problems.push({
        reason: 'InvalidSpec',
        message: `The spec is invalid: ${parsed.problems.join('; ')}.`,
      });
    const spec = parsed.ok ? parsed.spec : undefined;
    if (env.length) problems.push({ reason: 'InvalidSpec', message: env.join(' ') });
    const secrets = spec
      ? await this.readSecrets(namespace, spec)
      : { problems: [], values: new Map<string, string>() };
    problems.push(...secrets.problems);
    const deployment = cache.get('Deployment', namespace, name);
    const named = cache.get('Deployment', namespace, cohortDeploymentName(name));
    const cohortDeployment = ownCohort(named, name);
    const polling = !!secrets.values.get('spec.broker.managementUrlSecretRef');
    const pods = cache.owned('Pod', namespace, name) as Pod[];
    const queue =
      spec && problems.length === 0
        ? await this.queue(
            namespace,
            name,
            spec,
            secrets.values,
            pods,
            deployment,
            cohortDeployment,
          )
        : undefined;
    const api = spec && problems.length === 0 ? managementApi(secrets.values) : undefined;
    const brokerSettings =
      api && this.d.brokerSettings
        ? await this.d.brokerSettings.read(
            api.url,
            api.vhost,
            this.d.brokerSettingsReadMs ?? 60_000,
          )
        : undefined;
    const deadLetters =
      spec && this.d.deadLetters
        ? await this.observeDeadLetters(namespace, name, spec, secrets.values)
        : undefined;
    const outbox =
      spec?.outbox && this.d.outbox ? await this.observeOutbox(spec, secrets.values) : undefined;
    return {
      raw,
      spec,
      problems,
      secrets: secrets.values,
      deployment,
      ...(cohortDeployment && { cohortDeployment }),
      others: [
        ...cache.owned('Service', namespace, name),
        ...cache.owned('PodDisruptionBudget', namespace, name),
      ],
      pods,
      records: cache.owned('ControllerRevision', namespace, name),
      ...(queue && { queue }),
      polling,
      ...(deadLetters && { deadLetters }),
      ...(outbox && { outbox }),
      ...(brokerSettings && { brokerSettings }),
    };
  }

  /**
   * The outbox spec.outbox names, from a snapshot of its database at most
   * half OUTBOX_READ_MS old (one read per database, shared by its
   * JobWorkers); a slow database holds the reconcile for at most 2 s.
   */
  private async observeOutbox(
    spec: JobWorkerSpec,
    secrets: Map<string, string>,
  ): Promise<OutboxInput | undefined> {
    const url = secrets.get('spec.outbox.urlSecretRef');
    const o = spec.outbox;
    if (!url || !o || !this.d.outbox) return undefined;
    const read = this.d.outbox.read(url, spec.broker.queue, OUTBOX_READ_MS / 2).then(
      (stats) => ({ stats }),
      (err: unknown) => ({ error: (err as Error).message }),
    );
    const r = (await withinReadWait(read)) ?? {
      error: 'the outbox database did not answer within 2 s',
    };
    return { stalledAfterSeconds: o.stalledAfterSeconds, ...r };
  }

  /**
   * The spec parsed and checked once per uid and generation (the apiserver
   * bumps the generation on every spec change): zod's validation of an
   * unchanged spec was a good part of every reconcile's CPU.
   */
  private parsed(raw: KubeObject): ParsedSpec {
    const memory = this.d.memory.of(`${raw.metadata.namespace}/${raw.metadata.name}`);
    const generation = raw.metadata.generation;
    const of = `${raw.metadata.uid ?? ''}/${generation ?? ''}`;
    if (generation !== undefined && memory.spec?.of === of) return memory.spec;
    this.d.counts?.specParsed?.();
    const parsed = parseSpec(raw.spec);
    const spec: ParsedSpec = { of, parsed, env: parsed.ok ? envProblems(parsed.spec) : [] };
    if (generation !== undefined) memory.spec = spec;
    return spec;
  }

  private async queue(
    namespace: string,
    name: string,
    spec: JobWorkerSpec,
    secrets: Map<string, string>,
    pods: Pod[],
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
      const { heads, counters } = await readWorkerPods(pods, {
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

  /** The worker pods' own figures are read every WORKER_COUNTERS_READ_MS (capacity keeps its last between). */
  private countersDue(namespace: string, name: string): boolean {
    const memory = this.d.memory.of(`${namespace}/${name}`);
    const now = this.d.now().getTime();
    if (now - (memory.countersReadAt ?? -Infinity) < WORKER_COUNTERS_READ_MS) return false;
    memory.countersReadAt = now;
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
      ['spec.outbox.urlSecretRef', spec.outbox?.urlSecretRef],
    ];
    const problems: Problem[] = [];
    const values = new Map<string, string>();
    // One read per Secret per reconcile, found or not: refs often share one.
    const read = new Map<string, ReturnType<Observer['secret']>>();
    for (const [field, ref] of refs) {
      if (!ref) continue;
      if (!read.has(ref.name)) read.set(ref.name, this.secret(namespace, ref.name));
      const secret = await read.get(ref.name);
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
    // for what no longer exists.
    const memory = this.d.memory.of(key);
    const current = () => this.d.memory.current(key, memory);
    memory.quarantineAt = { claimsUrl, queue: spec.broker.queue };
    const read = readQuarantine(
      this.d.deadLetters,
      memory.quarantineAt,
      this.d.deadLetterReadMs,
      () => memory.deadLetters,
    ).then((r) => {
      if (!r.error && r.stats && current())
        this.d.metrics.setDeadLetters(namespace, name, r.stats, spec.deadLetter.maxAgeSeconds);
      return r;
    });
    void read.then((r) => {
      if (current()) memory.deadLetters = r;
    });
    const r = (await withinReadWait(read)) ?? memory.deadLetters;
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
