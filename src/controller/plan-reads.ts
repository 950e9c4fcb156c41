// The reads a plan asks for (src/reconcile/plan.ts, `need`): a revision's
// pods or recorded spec, the schema versions seen in the queue, the queued
// total, what the unready workers say, what each pod holds before a
// scale-down.
// Every decision is the planner's; this module only reads.
import type { Logger } from 'pino';
import type { JobWorkerSpec } from '../api/jobworker.js';
import type { KubeObject } from '../kube/client.js';
import { LABEL_REVISION, ownRecord } from '../reconcile/children/index.js';
import type { Observation } from '../reconcile/model/index.js';
import type { PlanAnswers, PlanNeed } from '../reconcile/plan.js';
import type { PodFacts } from '../reconcile/rollout/index.js';
import { readWorkerReports, restartsOf, type PodShape } from '../signals/worker-readiness.js';
import { readCohortSamples, readPodLoad } from '../signals/worker-metrics.js';
import { fetchSeenSchemaVersions, prometheusFor } from '../signals/prometheus.js';
import { fetchQueuedTotal } from '../signals/rabbitmq.js';
import { managementApi } from './observe.js';

export interface PlanReads {
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
      answers.pods = { ...answers.pods, [need.revision]: podFacts(obs.pods, need.revision) };
      return;
    case 'seenVersions':
      answers.seenVersions = spec && (await seenVersions(reads, spec, namespace, name));
      return;
    case 'queued':
      answers.queued = spec && (await queued(obs.secrets, spec.broker.queue));
      return;
    case 'revisionSpec':
      answers.revisionSpecs = {
        ...answers.revisionSpecs,
        [need.revision]: ownRecord(raw, obs.records, need.revision)?.data,
      };
      return;
    case 'workers':
      answers.workers = await readWorkerReports(obs.pods);
      return;
    case 'podLoad':
      answers.podLoad = await readPodLoad(obs.pods);
      return;
    case 'cohortSamples':
      answers.cohortSamples = await readCohortSamples(obs.pods);
      return;
  }
}

function podFacts(pods: KubeObject[], revision: string): PodFacts[] {
  return pods
    .filter((p) => p.metadata.labels?.[LABEL_REVISION] === revision)
    .map((p) => ({ restarts: restartsOf(p as PodShape) }));
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
