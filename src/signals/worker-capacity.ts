// The workers' own figures for what a replica can do, read straight from the
// worker pods when no Prometheus is configured: each ready pod's /metrics
// (handler seconds, completed jobs), a few pods at most, in
// parallel, each with a short timeout. src/reconcile/capacity.ts turns them
// into an estimate; a pod that does not answer is left out of this reading.
import type { KubeClient, KubeObject } from '../kube/client.js';
import type { PodCounters } from '../reconcile/capacity.js';
import { LABEL_JOBWORKER } from '../reconcile/desired.js';
import { workerUrl, type PodShape } from './worker-readiness.js';

/** Capacity is per replica: a sample of pods says it as well as all of them. */
const READ_AT_MOST = 10;
const TIMEOUT_MS = 1000;

export async function readWorkerCounters(
  client: KubeClient,
  namespace: string,
  name: string,
): Promise<PodCounters[]> {
  const list = await client.list<KubeObject & PodShape>('v1', 'Pod', namespace, {
    labelSelector: `${LABEL_JOBWORKER}=${name}`,
  });
  const ready = list.items
    .filter((p) => !p.metadata.deletionTimestamp)
    .filter((p) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'))
    .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))
    .slice(0, READ_AT_MOST);
  const read = await Promise.all(
    ready.map(async (pod) => {
      const url = workerUrl(pod, '/metrics');
      if (!url) return undefined;
      const text = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) }).then(
        (r) => (r.ok ? r.text() : undefined),
        () => undefined,
      );
      return text === undefined ? undefined : { pod: pod.metadata.name, ...parseCounters(text) };
    }),
  );
  return read.filter((c): c is PodCounters => c !== undefined);
}

/** The figures capacity needs, summed over their label sets, from the text exposition format. */
export function parseCounters(text: string): Omit<PodCounters, 'pod'> {
  const c = { handlerSecondsSum: 0, completed: 0 };
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (!Number.isFinite(value)) continue;
    if (line.startsWith('jobfleet_handler_duration_seconds_sum')) c.handlerSecondsSum += value;
    else if (line.startsWith('jobfleet_jobs_total{') && line.includes('outcome="completed"'))
      c.completed += value;
  }
  return c;
}
