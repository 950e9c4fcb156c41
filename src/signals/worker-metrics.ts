// The worker pods' own figures, read straight from each pod's /metrics (on
// its pod IP and metrics port, as Prometheus reaches it), in parallel, each
// with a short timeout; a pod that does not answer is left out, or marked
// unread. What a poll reads, one scrape per pod serving both: the counters
// capacity needs, when no Prometheus is configured (src/reconcile/scaling/capacity.ts),
// and what each pod saw of the queue's head, for the measured age
// (src/reconcile/scaling/queue-age.ts). And what each pod holds, before a scale-down
// (src/reconcile/scaling/scale-down.ts).
import type { KubeObject } from '../kube/client.js';
import type { CapacityCounters, HeadReading } from '../reconcile/model/index.js';
import {
  LATENCY_BOUNDS,
  zeroCounters,
  type PodCounters as RevisionCounters,
  type PodSample,
} from '../reconcile/cohort/index.js';
import { LABEL_REVISION } from '../reconcile/children/index.js';
import { DELETION_COST, type PodLoad } from '../reconcile/scaling/index.js';
import { isReady, restartsOf, workerUrl, type PodShape } from './worker-readiness.js';

/** Capacity is per replica: a sample of pods says it as well as all of them. */
const COUNTERS_FROM_AT_MOST = 10;
const TIMEOUT_MS = 1000;

export type Pod = KubeObject & PodShape;

/** The pods still running, in a stable order (a sample is the same pods each time). */
const running = (pods: Pod[]): Pod[] =>
  pods
    .filter((p) => !p.metadata.deletionTimestamp)
    .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));

async function scrape(pod: Pod): Promise<string | undefined> {
  const url = workerUrl(pod, '/metrics');
  if (!url) return undefined;
  return fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) }).then(
    (r) => (r.ok ? r.text() : undefined),
    () => undefined,
  );
}

/**
 * The head age is the newest delivery across pods, and one idle consumer is
 * enough to say nothing waits: in a large fleet a sample of pods says both.
 */
const HEADS_FROM_AT_MOST = 20;

/**
 * What the operator reads from the worker pods at a poll, from one pod list
 * and one scrape per pod: `heads`, what each answering pod (both Deployments
 * of a Cohort rollout) saw of the queue's head — read at every poll where it
 * is wanted and never from Prometheus, whose scrape interval would add to
 * the age's error; `counters`, the figures capacity needs, from ready pods.
 */
export async function readWorkerPods(
  owned: Pod[],
  want: { heads: boolean; counters: boolean },
): Promise<{ heads?: HeadReading[]; counters?: CapacityCounters[] }> {
  const pods = running(owned);
  const forHeads = want.heads ? pods.slice(0, HEADS_FROM_AT_MOST) : [];
  const forCounters = want.counters ? pods.filter(isReady).slice(0, COUNTERS_FROM_AT_MOST) : [];
  const texts = new Map(
    await Promise.all(
      [...new Set([...forHeads, ...forCounters])].map(
        async (pod) => [pod, await scrape(pod)] as const,
      ),
    ),
  );
  const answered = (ps: Pod[]) =>
    ps.flatMap((pod) => {
      const text = texts.get(pod);
      return text === undefined ? [] : [{ pod, text }];
    });
  return {
    ...(want.heads && {
      heads: answered(forHeads).flatMap(({ text }) => parseHead(text) ?? []),
    }),
    ...(want.counters && {
      counters: answered(forCounters).map(({ pod, text }) => ({
        pod: pod.metadata.name,
        ...parseCounters(text),
      })),
    }),
  };
}

/** A worker's view of the queue's head (worker/queue-head.ts), from its /metrics; undefined from a worker without one. */
export function parseHead(text: string): HeadReading | undefined {
  const m = sums(text);
  if (!m.has('jobfleet_consumer_idle_seconds')) return undefined;
  return {
    lastAgeSeconds: m.get('jobfleet_last_delivery_age_seconds') ?? 0,
    lastAtMs: (m.get('jobfleet_last_delivery_timestamp_seconds') ?? 0) * 1000,
    lastUntimestampedAtMs:
      (m.get('jobfleet_last_untimestamped_delivery_timestamp_seconds') ?? 0) * 1000,
    idleSeconds: m.get('jobfleet_consumer_idle_seconds') ?? 0,
  };
}

/** Every pod of the JobWorker and what it holds (undefined where it did not answer). */
export async function readPodLoad(owned: Pod[]): Promise<PodLoad[]> {
  const pods = running(owned);
  return Promise.all(
    pods.map(async (pod) => {
      const text = isReady(pod) ? await scrape(pod) : undefined;
      const m = text === undefined ? undefined : sums(text);
      const cost = pod.metadata.annotations?.[DELETION_COST];
      return {
        pod: pod.metadata.name,
        ...(m && {
          held: {
            deliveries: m.get('jobfleet_held_deliveries') ?? 0,
            oldestSeconds: m.get('jobfleet_held_oldest_seconds') ?? 0,
          },
        }),
        ...(cost !== undefined && { cost }),
      };
    }),
  );
}

/**
 * Every pod of the JobWorker (both Deployments of a Cohort rollout), its
 * revision and restarts, and its counters where it answers: what a cohort
 * step's analysis compares (src/reconcile/cohort/figures.ts).
 */
export async function readCohortSamples(owned: Pod[]): Promise<PodSample[]> {
  const pods = running(owned);
  return Promise.all(
    pods.map(async (pod) => {
      const text = await scrape(pod);
      return {
        pod: pod.metadata.name,
        revision: pod.metadata.labels?.[LABEL_REVISION],
        createdAt: pod.metadata.creationTimestamp ?? new Date(0).toISOString(),
        restarts: restartsOf(pod),
        ...(text !== undefined && { counters: parseRevisionCounters(text) }),
      };
    }),
  );
}

/** What a cohort step compares, from one worker's /metrics. */
export function parseRevisionCounters(text: string): RevisionCounters {
  const c: RevisionCounters = zeroCounters();
  for (const { name, labels, value } of samples(text)) {
    if (name === 'jobfleet_jobs_total') {
      c.handled += value;
      if (labels.outcome === 'completed') c.completed += value;
      if (labels.outcome === 'dead_lettered') c.deadLettered += value;
      if (labels.outcome === 'duplicate') c.duplicates += value;
    } else if (name === 'jobfleet_claim_conflicts_total') {
      // a delivery that found its key held elsewhere: handled, as a duplicate (not a retry)
      c.handled += value;
      c.duplicates += value;
    } else if (name === 'jobfleet_retries_total' && labels.reason !== 'claim_conflict')
      c.retried += value;
    else if (name === 'jobfleet_dead_letters_total') {
      const k = labels.failure_class ?? 'unknown';
      c.deadLettersByClass[k] = (c.deadLettersByClass[k] ?? 0) + value;
    } else if (name === 'jobfleet_handler_duration_seconds_bucket') {
      const le = labels.le === '+Inf' ? Infinity : Number(labels.le);
      const i = LATENCY_BOUNDS.indexOf(le);
      if (i >= 0) c.latency[i]! += value;
    }
  }
  return c;
}

/** The jobfleet_* samples of the text exposition format, with their labels. */
function* samples(
  text: string,
): Generator<{ name: string; labels: Record<string, string>; value: number }> {
  for (const line of text.split('\n')) {
    if (!line.startsWith('jobfleet_')) continue;
    const brace = line.indexOf('{');
    const space = line.lastIndexOf(' ');
    const hasLabels = brace >= 0 && brace < space;
    const value = Number(line.slice(space + 1));
    if (!Number.isFinite(value)) continue;
    const labels: Record<string, string> = {};
    if (hasLabels)
      for (const m of line
        .slice(brace + 1, line.lastIndexOf('}'))
        .matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g))
        labels[m[1]!] = m[2]!;
    yield { name: line.slice(0, hasLabels ? brace : line.indexOf(' ')), labels, value };
  }
}

/** The figures capacity needs, summed over their label sets. */
export function parseCounters(text: string): Omit<CapacityCounters, 'pod'> {
  const m = sums(
    text,
    (labels) => !labels.includes('outcome=') || labels.includes('outcome="completed"'),
  );
  return {
    handlerSecondsSum: m.get('jobfleet_handler_duration_seconds_sum') ?? 0,
    completed: m.get('jobfleet_jobs_total') ?? 0,
  };
}

/** Each metric's samples summed over their label sets (those `keep` accepts), from the text exposition format. */
function sums(text: string, keep: (labels: string) => boolean = () => true): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line.startsWith('jobfleet_')) continue;
    const brace = line.indexOf('{');
    const space = line.lastIndexOf(' ');
    const name = line.slice(0, brace >= 0 && brace < space ? brace : line.indexOf(' '));
    const labels = brace >= 0 && brace < space ? line.slice(brace, line.lastIndexOf('}') + 1) : '';
    const value = Number(line.slice(space + 1));
    if (!Number.isFinite(value) || !keep(labels)) continue;
    out.set(name, (out.get(name) ?? 0) + value);
  }
  return out;
}
