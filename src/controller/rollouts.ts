// The rollout's observer: runs the pure planner (src/reconcile/rollout-plan.ts)
// and reads what it asks for — a revision's pods, the schema versions seen in
// the queue, the queued total — then plans again with the answer. Every
// decision is the planner's; this module only reads.
import type { Logger } from 'pino';
import type { JobWorkerSpec } from '../api/jobworker.js';
import type { KubeClient, KubeObject } from '../kube/client.js';
import { LABEL_JOBWORKER, LABEL_REVISION } from '../reconcile/desired.js';
import {
  planRollout,
  type PodFacts,
  type RolloutAnswers,
  type RolloutInput,
  type RolloutNeed,
  type RolloutPlan,
} from '../reconcile/rollout-plan.js';
import { fetchSeenSchemaVersions } from '../signals/prometheus.js';
import { fetchQueuedTotal, vhostOf } from '../signals/rabbitmq.js';

export interface RolloutReads {
  client: KubeClient;
  log: Logger;
  secrets: Map<string, string>;
  /** the operator's Prometheus, when the spec names none */
  prometheusUrl?: string;
}

/** Every need answered at most once: a plan asks for a few things, never in a loop. */
const MAX_ROUNDS = 6;

export async function observeAndPlanRollout(
  input: Omit<RolloutInput, 'answers'>,
  reads: RolloutReads,
): Promise<RolloutPlan> {
  const answers: RolloutAnswers = {};
  for (let round = 0; round < MAX_ROUNDS; round++) {
    const r = planRollout({ ...input, answers });
    if (!('need' in r)) return r;
    await answer(r.need, answers, input, reads);
  }
  throw new Error('rollout planner kept asking for observations (a bug): giving up this reconcile');
}

async function answer(
  need: RolloutNeed,
  answers: RolloutAnswers,
  { raw, spec }: Omit<RolloutInput, 'answers'>,
  reads: RolloutReads,
): Promise<void> {
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
      answers.seenVersions = await seenVersions(reads, spec, namespace, name);
      return;
    case 'queued':
      answers.queued = await queued(reads.secrets, spec.broker.queue);
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
  reads: RolloutReads,
  spec: JobWorkerSpec,
  namespace: string,
  name: string,
): Promise<number[] | undefined> {
  const url = reads.prometheusUrl ?? spec.scaling.prometheusUrl;
  if (!url) return undefined;
  try {
    return await fetchSeenSchemaVersions(url, namespace, name);
  } catch (err) {
    reads.log.warn({ err: (err as Error).message }, 'schema versions seen: Prometheus unreadable');
    return undefined;
  }
}

async function queued(secrets: Map<string, string>, queue: string): Promise<number | undefined> {
  const mgmt = secrets.get('spec.broker.managementUrlSecretRef');
  const amqpUrl = secrets.get('spec.broker.urlSecretRef');
  if (!mgmt || !amqpUrl) return undefined;
  try {
    return await fetchQueuedTotal(mgmt, vhostOf(amqpUrl), queue);
  } catch {
    return undefined;
  }
}
