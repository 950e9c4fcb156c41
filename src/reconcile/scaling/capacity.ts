// What one worker replica can do, pure: from the workers' own figures, by
// Little's law — a replica with `prefetch` slots, each busy for the mean
// time a job takes, completes prefetch ÷ that time jobs per second. Unlike a
// rate learnt from a saturated queue this holds whether or not a backlog is
// waiting. The time a job takes is handler seconds ÷ jobs completed (the
// handler histogram's sum, jobs_total{outcome="completed"}): runs that
// complete nothing — a throttled call is a quick run, then a retry; a failure
// — count their time and no job, so capacity is in completed jobs.
//
// The figures are each pod's counters, differenced per pod (a restarted pod
// starts over), read from Prometheus (src/signals/prometheus.ts) or, without
// one, from the pods' /metrics (src/signals/worker-metrics.ts); the
// simulator in bench/ feeds the same function. (The in-flight gauge was
// tried as a second measure, busy slot-seconds ÷ jobs, for long jobs still
// running: integrated between sparse readings it swung by half at every
// change of load, and the backlog cross-check in ./replicas.ts covers a
// fleet whose long jobs have not finished yet.)
import type { CapacityCounters, CapacityReading } from '../model/index.js';

export type CapacitySource = CapacityReading['source'];

interface Sample {
  at: number;
  /** handler seconds and jobs completed since the reading before */
  seconds: number;
  completed: number;
}

export interface CapacityMemory {
  /** each pod's counters at the last reading (to take differences) */
  last?: Record<string, Omit<CapacityCounters, 'pod'>>;
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
 * it ends at the newest interval that ran anything, so an idle fleet keeps
 * the estimate its last busy minutes gave.
 */
const WINDOW_MS = 300_000;
/**
 * The completed-jobs rate is taken over this long, not over the last reading:
 * Prometheus' counters move once per scrape, so a poll between scrapes reads
 * nothing and the next reads a whole scrape's.
 */
const RATE_WINDOW_MS = 30_000;
/**
 * Fewer completions than this in the whole window: no estimate. Handler times
 * are heavy-tailed: with lognormal σ 1 the mean of n has a standard error of
 * 131 %/√n — 29 % at 20 (a status that swung by a quarter, measured on real
 * workers), 13 % at 100.
 */
const MIN_COMPLETIONS = 100;

/** With no new reading (none due, or none possible), the estimate the memory holds. */
export function estimateCapacity(
  reading: CapacityReading | undefined,
  prefetch: number,
  memory: CapacityMemory | undefined,
  nowMs: number,
): { estimate?: CapacityEstimate; memory: CapacityMemory } {
  const samples = [...(memory?.samples ?? [])];
  let last = memory?.last;
  if (reading) {
    last = {};
    const sample = { at: nowMs, seconds: 0, completed: 0 };
    for (const { pod, ...now } of reading.pods) {
      last[pod] = now;
      const before = memory?.last?.[pod];
      // A pod seen for the first time, or restarted (its counters went back), gives no difference yet.
      if (!before || now.completed < before.completed) continue;
      if (now.handlerSecondsSum < before.handlerSecondsSum) continue;
      sample.seconds += now.handlerSecondsSum - before.handlerSecondsSum;
      sample.completed += now.completed - before.completed;
    }
    // An interval that ran nothing says nothing: an idle fleet keeps its estimate.
    if (sample.seconds > 0 || sample.completed > 0) samples.push(sample);
  }
  const newest = samples.at(-1)?.at ?? nowMs;
  while (samples.length && newest - samples[0]!.at > WINDOW_MS) samples.shift();
  let seconds = 0;
  let completed = 0;
  for (const s of samples) {
    seconds += s.seconds;
    completed += s.completed;
  }
  const source = reading?.source ?? memory?.source;
  const since = memory?.since ?? (reading ? nowMs : undefined);
  const next: CapacityMemory = {
    samples,
    ...(last && { last }),
    ...(since !== undefined && { since }),
    ...(source && { source }),
  };
  if (completed < MIN_COMPLETIONS || !(seconds > 0) || !source) return { memory: next };
  const meanServiceSeconds = seconds / completed;
  return {
    estimate: {
      perReplica: prefetch / meanServiceSeconds,
      meanServiceSeconds,
      ...(reading && { completedRate: completedRate(samples, nowMs, since) }),
      source,
    },
    memory: next,
  };
}

/** Jobs/s completed over the last RATE_WINDOW_MS (or since the first reading). */
function completedRate(samples: Sample[], nowMs: number, since = nowMs): number {
  const from = Math.max(nowMs - RATE_WINDOW_MS, since);
  const n = samples.filter((s) => s.at > from).reduce((a, s) => a + s.completed, 0);
  return nowMs > from ? n / ((nowMs - from) / 1000) : 0;
}
