// What one worker replica can do, pure: from the workers' own figures, by
// Little's law — a replica with `prefetch` slots, each busy for the mean
// time a job takes, completes prefetch ÷ that time jobs per second. Unlike a
// rate learnt from a saturated queue this holds whether or not a backlog is
// waiting. The time per job is taken two ways and the longer wins:
//  - handler seconds ÷ handler runs (the handler histogram's sum and count);
//  - busy slot-seconds (the in-flight gauge over time) ÷ jobs completed.
// The second counts what the first misses: runs that completed nothing (a
// throttled call is a quick run, and then a retry), and long jobs still
// running. The figures are each pod's counters, differenced per pod (a
// restarted pod starts over), read from Prometheus (src/signals/prometheus.ts)
// or, without one, from the pods' /metrics (src/signals/worker-capacity.ts);
// the simulator in bench/ feeds the same function.

/** One pod's figures: counters since its process started, and the in-flight gauge. */
export interface PodCounters {
  pod: string;
  handlerSecondsSum: number;
  handlerRuns: number;
  /** jobs_total{outcome="completed"} */
  completed: number;
  inflight: number;
}

/** Each pod's figures, read from the pods themselves or as Prometheus last scraped them. */
export interface CapacityReading {
  source: 'WorkerMetrics' | 'Prometheus';
  pods: PodCounters[];
}

export type CapacitySource = CapacityReading['source'];

interface Sample {
  at: number;
  /** handler seconds and runs, jobs completed and busy slot-seconds over the interval */
  seconds: number;
  runs: number;
  completed: number;
  busy: number;
  /** the interval's length (s) */
  dt: number;
}

export interface CapacityMemory {
  /** each pod's figures at the last reading (to take differences; a restarted pod starts over) */
  last?: Record<string, Omit<PodCounters, 'pod'>>;
  lastAt?: number;
  /** when the first reading came */
  since?: number;
  /** where the last reading came from */
  source?: CapacitySource;
  /** recent intervals, newest last */
  samples: Sample[];
}

export interface CapacityEstimate {
  /** jobs/s one replica completes when its slots are full */
  perReplica: number;
  meanServiceSeconds: number;
  /** jobs/s the fleet completed over the last half minute (what the dependency accepted); none without a new reading */
  completedRate?: number;
  source: CapacitySource;
}

/**
 * How long a window the mean is taken over. Handler times are often heavy-
 * tailed (lognormal σ 2 has a coefficient of variation above 7): a ten-second
 * mean of a few hundred completions swings by ±30 %, a five-minute one by a
 * few per cent. The window is a ratio of sums, so busy intervals weigh more;
 * it ends at the newest interval that completed anything, so an idle fleet
 * keeps the estimate its last busy minutes gave.
 */
const WINDOW_MS = 300_000;
const RATE_WINDOW_MS = 30_000;
/** Fewer completions than this in the whole window: no estimate (a handful says little). */
const MIN_COMPLETIONS = 20;

/** With no new reading (none due, or none possible), the estimate the memory holds. */
export function estimateCapacity(
  reading: CapacityReading | undefined,
  prefetch: number,
  memory: CapacityMemory | undefined,
  nowMs: number,
): { estimate?: CapacityEstimate; memory: CapacityMemory } {
  const samples = [...(memory?.samples ?? [])];
  const dt = memory?.lastAt !== undefined ? (nowMs - memory.lastAt) / 1000 : undefined;
  let last: CapacityMemory['last'] = memory?.last;
  let sample: Sample | undefined;
  // With no reading, the samples as they are.
  if (reading) {
    last = {};
    const sum = { at: nowMs, seconds: 0, runs: 0, completed: 0, busy: 0, dt: dt ?? 0 };
    for (const { pod, ...now } of reading.pods) {
      last[pod] = now;
      const before = memory?.last?.[pod];
      // A pod seen for the first time, or restarted (its counters went back), gives no difference yet.
      if (!before || dt === undefined || now.handlerRuns < before.handlerRuns) continue;
      if (now.completed < before.completed || now.handlerSecondsSum < before.handlerSecondsSum)
        continue;
      sum.seconds += now.handlerSecondsSum - before.handlerSecondsSum;
      sum.runs += now.handlerRuns - before.handlerRuns;
      sum.completed += now.completed - before.completed;
      sum.busy += ((before.inflight + now.inflight) / 2) * dt;
    }
    if (dt !== undefined) sample = sum;
  }
  // An interval that ran nothing says nothing (an idle fleet keeps its estimate); one that
  // only held long jobs, or only refused calls, counts.
  if (sample && (sample.completed > 0 || sample.busy > 0 || sample.seconds > 0))
    samples.push(sample);
  const newest = samples.at(-1)?.at ?? nowMs;
  while (samples.length && newest - samples[0]!.at > WINDOW_MS) samples.shift();
  const total = { seconds: 0, runs: 0, completed: 0, busy: 0 };
  for (const s of samples) {
    total.seconds += s.seconds;
    total.runs += s.runs;
    total.completed += s.completed;
    total.busy += s.busy;
  }
  const source = reading?.source ?? memory?.source;
  const lastAt = reading ? nowMs : memory?.lastAt;
  const since = memory?.since ?? (reading ? nowMs : undefined);
  const next: CapacityMemory = {
    samples,
    ...(since !== undefined && { since }),
    ...(lastAt !== undefined && { lastAt }),
    ...(last && { last }),
    ...(source && { source }),
  };
  if (total.completed < MIN_COMPLETIONS || !source) return { memory: next };
  const perRun = total.runs > 0 ? total.seconds / total.runs : 0;
  const meanServiceSeconds = Math.max(perRun, total.busy / total.completed);
  if (!(meanServiceSeconds > 0)) return { memory: next };
  return {
    estimate: {
      perReplica: prefetch / meanServiceSeconds,
      meanServiceSeconds,
      ...(reading && { completedRate: completedRate(samples, nowMs, memory?.since) }),
      source,
    },
    memory: next,
  };
}

/**
 * Jobs/s completed over the last RATE_WINDOW_MS (or since the first reading).
 * Not over the last reading alone: Prometheus' counters move once per scrape,
 * so a poll between scrapes reads nothing and the next reads a whole scrape's.
 */
function completedRate(samples: Sample[], nowMs: number, since = nowMs): number {
  const from = Math.max(nowMs - RATE_WINDOW_MS, since);
  const n = samples.filter((s) => s.at > from).reduce((a, s) => a + s.completed, 0);
  return nowMs > from ? n / ((nowMs - from) / 1000) : 0;
}
