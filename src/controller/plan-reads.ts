// The reads a plan asks for (src/reconcile/plan.ts, `need`): a revision's
// pods or recorded spec, the schema versions seen in the queue, the queued
// total, what the unready workers say, what each pod holds before a
// scale-down.
// Every decision is the planner's; this module only reads.
import type { Logger } from 'pino';
import type { JobWorkerSpec } from '../api/jobworker.js';
import type { KubeClient, KubeObject } from '../kube/client.js';
import { LABEL_JOBWORKER, LABEL_REVISION, revisionRecordName } from '../reconcile/desired.js';
import type { Observation } from '../reconcile/observation.js';
import type { PlanAnswers, PlanNeed } from '../reconcile/plan.js';
import type { PodFacts } from '../reconcile/rollout-plan.js';
import { readWorkerReports } from '../signals/worker-readiness.js';
import { readCohortSamples, readPodLoad } from '../signals/worker-metrics.js';
import { fetchSeenSchemaVersions, prometheusFor } from '../signals/prometheus.js';
import { fetchQueuedTotal } from '../signals/rabbitmq.js';
import { managementApi } from './observe.js';

export interface PlanReads {
  client: KubeClient;
  log: Logger;
  /** the operator's Prometheus, when the spec names none */
  prometheusUrl?: string;
}

/** Reads what a plan asked for (`need`) into `answers`; the caller plans again. */
export async function answerNeed(
  need: PlanNeed,
  answers: PlanAnswers,
  obs: Observation,
  reads: PlanReads,
): Promise<void> {
  const { raw, spec } = obs;
  const namespace = raw.metadata.namespace as string;
  const name = raw.metadata.name;
  switch (need.kind) {
    case 'pods':
      answers.pods = {
        ...answers.pods,
        [need.revision]: await pods(reads.client, namespace, name, need.revision),
      };
      return;
    case 'seenVersions':
      answers.seenVersions = spec && (await seenVersions(reads, spec, namespace, name));
      return;
    case 'queued':
      answers.queued = spec && (await queued(obs.secrets, spec.broker.queue));
      return;
    case 'revisionSpec': {
      const record = await reads.client.find<KubeObject & { data?: Record<string, unknown> }>(
        'apps/v1',
        'ControllerRevision',
        namespace,
        revisionRecordName(name, need.revision),
      );
      // Only this JobWorker's own: a record left by an earlier object of the same name is not its past.
      const ours = record?.metadata.ownerReferences?.some((o) => o.uid === raw.metadata.uid);
      answers.revisionSpecs = {
        ...answers.revisionSpecs,
        [need.revision]: ours ? record?.data : undefined,
      };
      return;
    }
    case 'workers':
      answers.workers = await readWorkerReports(reads.client, namespace, name).catch(
        () => undefined,
      );
      return;
    case 'podLoad':
      answers.podLoad = await readPodLoad(reads.client, namespace, name).catch(() => undefined);
      return;
    case 'cohortSamples':
      // Unreadable: no samples this time; the figures wait for the next read.
      answers.cohortSamples = await readCohortSamples(reads.client, namespace, name).catch(
        () => [],
      );
      return;
  }
}

async function pods(
  client: KubeClient,
  namespace: string,
  name: string,
  revision: string,
): Promise<PodFacts[]> {
  const list = await client.list<KubeObject>('v1', 'Pod', namespace, {
    labelSelector: `${LABEL_JOBWORKER}=${name},${LABEL_REVISION}=${revision}`,
  });
  return list.items.map((p) => ({
    restarts: Math.max(
      0,
      ...(
        (p.status as { containerStatuses?: Array<{ restartCount?: number }> } | undefined)
          ?.containerStatuses ?? []
      ).map((c) => c.restartCount ?? 0),
    ),
  }));
}

async function seenVersions(
  reads: PlanReads,
  spec: JobWorkerSpec,
  namespace: string,
  name: string,
): Promise<number[] | undefined> {
  const url = prometheusFor(spec, reads.prometheusUrl);
  if (!url) return undefined;
  try {
    return await fetchSeenSchemaVersions(url, namespace, name);
  } catch (err) {
    reads.log.warn({ err }, 'schema versions seen: Prometheus unreadable');
    return undefined;
  }
}

async function queued(secrets: Map<string, string>, queue: string): Promise<number | undefined> {
  const api = managementApi(secrets);
  if (!api) return undefined;
  try {
    return await fetchQueuedTotal(api.url, api.vhost, queue);
  } catch {
    return undefined;
  }
}
