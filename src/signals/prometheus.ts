// Fleet signals from Prometheus: how often the dependency throttles the
// workers — the input of the downstream cap's AIMD. Worker series carry the
// `namespace` and `jobworker` labels (added by the scrape config: the chart's
// PodMonitor copies them from the pod).
export interface FleetSignals {
  /** throttled responses per second, fleet-wide */
  throttleRate: number;
}

export class PrometheusError extends Error {
  override readonly name = 'PrometheusError';
}

/** PromQL string literal escaping for label values. */
const q = (v: string) => `"${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

export function fleetQueries(
  namespace: string,
  jobworker: string,
): Record<keyof FleetSignals, string> {
  const sel = `{namespace=${q(namespace)},jobworker=${q(jobworker)}}`;
  return {
    throttleRate: `sum(rate(jobfleet_downstream_throttled_total${sel}[1m]))`,
  };
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

async function instant(baseUrl: string, query: string, timeoutMs: number): Promise<number> {
  // An empty vector (no series yet: nothing throttled, or not scraped yet) is 0.
  const v = Number((await promQuery(baseUrl, query, timeoutMs))[0]?.value?.[1] ?? 0);
  return Number.isFinite(v) ? v : 0;
}

export async function fetchFleetSignals(
  baseUrl: string,
  namespace: string,
  jobworker: string,
  timeoutMs = 5000,
): Promise<FleetSignals> {
  return {
    throttleRate: await instant(
      baseUrl,
      fleetQueries(namespace, jobworker).throttleRate,
      timeoutMs,
    ),
  };
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
