// What acting on a JobWorker's queues needs, read from the cluster: its work
// and dead-letter queue names and the URLs in the Secrets it names. Used by
// the JobReplay controller and the kubectl plugin. The URLs stay in memory.
import { API_VERSION, KIND, parseSpec, type JobWorkerSpec } from '../api/jobworker.js';
import type { KubeClient, KubeObject } from './client.js';

export interface JobWorkerTarget {
  spec: JobWorkerSpec;
  queue: string;
  deadLetterQueue: string;
  amqpUrl: string;
  claimsUrl: string;
}

export async function resolveJobWorker(
  client: KubeClient,
  namespace: string,
  name: string,
): Promise<JobWorkerTarget | { problem: string; missing?: true }> {
  const jw = await client.find<KubeObject & { spec?: unknown }>(API_VERSION, KIND, namespace, name);
  if (!jw) return { problem: `JobWorker ${namespace}/${name} does not exist`, missing: true };
  const parsed = parseSpec(jw.spec);
  if (!parsed.ok)
    return {
      problem: `JobWorker ${namespace}/${name} has an invalid spec: ${parsed.problems.join('; ')}`,
    };
  const s = parsed.spec;
  const urls: string[] = [];
  for (const [field, ref] of [
    ['spec.broker.urlSecretRef', s.broker.urlSecretRef],
    ['spec.claims.urlSecretRef', s.claims.urlSecretRef],
  ] as const) {
    const secret = await client.find<KubeObject & { data?: Record<string, string> }>(
      'v1',
      'Secret',
      namespace,
      ref.name,
    );
    const encoded = secret?.data?.[ref.key];
    if (!encoded)
      return {
        problem: `Secret ${namespace}/${ref.name} has no key "${ref.key}" (the JobWorker's ${field})`,
      };
    urls.push(Buffer.from(encoded, 'base64').toString('utf8').trim());
  }
  return {
    spec: s,
    queue: s.broker.queue,
    deadLetterQueue: s.retry.deadLetterQueue ?? `${s.broker.queue}.dlq`,
    amqpUrl: urls[0]!,
    claimsUrl: urls[1]!,
  };
}
