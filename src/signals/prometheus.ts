// Fleet signals from Prometheus: how often the dependency throttles the
// workers — the input of the downstream cap's AIMD — and the workers' own
// figures for what a replica can do (src/reconcile/scaling/capacity.ts). Worker
// series carry the `namespace` and `jobworker` labels (added by the scrape
// config: the chart's PodMonitor copies them from the pod).
import type { CapacityCounters } from '../reconcile/model/index.js';

export interface FleetSignals {
  /** throttled responses per second, fleet-wide */
  throttleRate: number;
  /** each worker's figures as last scraped (none until a worker has been scraped) */
  pods: CapacityCounters[];
}

export class PrometheusError extends Error {
  override readonly name = 'PrometheusError';
}

/** PromQL string literal escaping for label values. */
const q = (v: string) => `"${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

/** The worker figures capacity needs (src/reconcile/scaling/capacity.ts), as raw series. */
const COUNTERS = ['jobfleet_handler_duration_seconds_sum', 'jobfleet_jobs_total'];

/**
 * One query per poll: the throttling rate, and each worker's counters as
 * last scraped. The counters are read raw and differenced per pod by the
 * caller, not taken as rate()s: a rate over a window divides by the whole
 * window, so a pod started within it reads low (its first minute's
 * completions at a fraction of what they were) — after every scale-up.
 */
/**
 * The Prometheus a JobWorker's fleet signals come from: the one its spec
 * names (spec.scaling.prometheusUrl), else the operator's
 * (JOBFLEET_PROMETHEUS_URL); undefined: none, and the throttling cap and the
 * gate's schema-versions-seen check are off.
 */
export function prometheusFor(
  spec: { scaling: { prometheusUrl?: string } },
  operatorDefault: string | undefined,
): string | undefined {
  return spec.scaling.prometheusUrl ?? operatorDefault;
}

export function fleetQuery(namespace: string, jobworker: string): string {
  const labels = `namespace=${q(namespace)},jobworker=${q(jobworker)}`;
  return (
    `label_replace(sum(rate(jobfleet_downstream_throttled_total{${labels}}[1m])), "figure", "throttleRate", "", "")` +
    ` or {__name__=~"${COUNTERS.join('|')}",${labels}}`
  );
}

type Vector = Array<{ metric?: Record<string, string>; value?: [number, string] }>;

/** An instant query; the vector it returns. */
async function promQuery(baseUrl: string, query: string, timeoutMs: number): Promise<Vector> {
  const url = `${baseUrl.replace(/\/$/, '')}/api/v1/query?query=${encodeURIComponent(query)}`;
  let res: Response;
  try {
    res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).name;
    throw new PrometheusError(`Prometheus unreachable at ${new URL(baseUrl).host} (${cause})`);
  }
  if (!res.ok)
    throw new PrometheusError(`Prometheus answered ${res.status} at ${new URL(baseUrl).host}`);
  const body = (await res.json()) as { data?: { result?: Vector } };
  return body.data?.result ?? [];
}

export async function fetchFleetSignals(
  baseUrl: string,
  namespace: string,
  jobworker: string,
  timeoutMs = 5000,
): Promise<FleetSignals> {
  let throttleRate = 0; // no series yet (nothing throttled, or not scraped yet) is 0
  const pods = new Map<string, CapacityCounters>();
  for (const r of await promQuery(baseUrl, fleetQuery(namespace, jobworker), timeoutMs)) {
    const m = r.metric ?? {};
    const v = Number(r.value?.[1]);
    if (!Number.isFinite(v)) continue;
    if (m.figure === 'throttleRate') {
      throttleRate = v;
      continue;
    }
    // the chart's PodMonitor labels each series with its pod; a static target has only its instance
    const pod = m.pod ?? m.instance ?? '';
    const c = pods.get(pod) ?? { pod, handlerSecondsSum: 0, completed: 0 };
    if (m.__name__ === 'jobfleet_handler_duration_seconds_sum') c.handlerSecondsSum += v;
    else if (m.__name__ === 'jobfleet_jobs_total' && m.outcome === 'completed') c.completed += v;
    pods.set(pod, c);
  }
  return { throttleRate, pods: [...pods.values()] };
}

/** Schema versions the fleet's workers dequeued in the last `window` (jobfleet_schema_version_seen_total). */
export async function fetchSeenSchemaVersions(
  baseUrl: string,
  namespace: string,
  jobworker: string,
  window = '15m',
  timeoutMs = 5000,
): Promise<number[]> {
  const sel = `{namespace=${q(namespace)},jobworker=${q(jobworker)}}`;
  const query = `sum by (version) (increase(jobfleet_schema_version_seen_total${sel}[${window}])) > 0`;
  return (await promQuery(baseUrl, query, timeoutMs))
    .map((r) => Number(r.metric?.version))
    .filter((v) => Number.isInteger(v) && v > 0);
}
