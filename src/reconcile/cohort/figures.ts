// A cohort step's figures, pure: the workers' counters, read from each pod,
// turned into what each revision did over the step's window — deltas since
// the last read, so that stable pods with a long history count only the
// window, and a restarted process (its counters back at zero) counts what it
// did since. The per-pod last reads are memory (lost on an operator restart:
// the next read is then a baseline, except for pods created since the last
// read, which count in full); the window's totals are in status.
import type { RevisionFigures } from '../../api/jobworker.js';

/** The upper bounds of jobfleet_handler_duration_seconds (worker/metrics.ts), +Inf last. */
export const LATENCY_BOUNDS = [
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10,
  30,
  60,
  120,
  Infinity,
] as const;

/** One pod's counters, as read from its /metrics (latency cumulative per LATENCY_BOUNDS). */
export interface PodCounters {
  handled: number;
  completed: number;
  deadLettered: number;
  retried: number;
  duplicates: number;
  deadLettersByClass: Record<string, number>;
  latency: number[];
}

export interface PodSample {
  pod: string;
  revision: string | undefined;
  createdAt: string;
  /** the highest restart count among its containers */
  restarts: number;
  /** undefined: it did not answer */
  counters?: PodCounters;
}

/** Per pod: its counters and restart count at the last read. */
export type FiguresMemory = Record<string, { counters: PodCounters; restarts: number }>;

export const noFigures = (): RevisionFigures => ({
  handled: 0,
  completed: 0,
  deadLettered: 0,
  retried: 0,
  duplicates: 0,
  restarts: 0,
  pods: 0,
});

/** A pod's counters before it did anything. */
export const zeroCounters = (): PodCounters => ({
  handled: 0,
  completed: 0,
  deadLettered: 0,
  retried: 0,
  duplicates: 0,
  deadLettersByClass: {},
  latency: LATENCY_BOUNDS.map(() => 0),
});

function minus(a: PodCounters, b: PodCounters): PodCounters | undefined {
  const d: PodCounters = {
    handled: a.handled - b.handled,
    completed: a.completed - b.completed,
    deadLettered: a.deadLettered - b.deadLettered,
    retried: a.retried - b.retried,
    duplicates: a.duplicates - b.duplicates,
    deadLettersByClass: Object.fromEntries(
      Object.entries(a.deadLettersByClass).map(([k, v]) => [k, v - (b.deadLettersByClass[k] ?? 0)]),
    ),
    latency: a.latency.map((v, i) => v - (b.latency[i] ?? 0)),
  };
  const negative =
    [d.handled, d.completed, d.deadLettered, d.retried, d.duplicates].some((v) => v < 0) ||
    d.latency.some((v) => v < 0) ||
    Object.values(d.deadLettersByClass).some((v) => v < 0);
  return negative ? undefined : d;
}

function add(f: RevisionFigures, d: PodCounters): RevisionFigures {
  const byClass = { ...(f.deadLettersByClass ?? {}) };
  for (const [k, v] of Object.entries(d.deadLettersByClass))
    if (v > 0) byClass[k] = (byClass[k] ?? 0) + v;
  const latency = LATENCY_BOUNDS.map((_, i) => (f.latencyBuckets?.[i] ?? 0) + (d.latency[i] ?? 0));
  return {
    ...f,
    handled: f.handled + d.handled,
    completed: f.completed + d.completed,
    deadLettered: f.deadLettered + d.deadLettered,
    retried: f.retried + d.retried,
    duplicates: f.duplicates + d.duplicates,
    ...(Object.keys(byClass).length > 0 && { deadLettersByClass: byClass }),
    ...(latency.some((v) => v > 0) && { latencyBuckets: latency }),
  };
}

export interface Accumulated {
  cohort: RevisionFigures;
  stable: RevisionFigures;
  memory: FiguresMemory;
}

/**
 * Adds what each pod of `cohort` and `stable` did since the last read to the
 * window's totals. A pod unknown to memory counts in full when it was created
 * after `countFrom` (the last read: nothing of it is in the totals yet), else
 * its read is a baseline. A pod whose container restarted since counts what
 * its new process did.
 */
export function accumulate(
  totals: { cohort: RevisionFigures; stable: RevisionFigures },
  memory: FiguresMemory,
  samples: readonly PodSample[],
  revisions: { cohort: string; stable: string },
  countFrom: string,
): Accumulated {
  let { cohort, stable } = totals;
  const next: FiguresMemory = {};
  const pods = { cohort: 0, stable: 0 };
  const restarts = { cohort: 0, stable: 0 };
  for (const s of samples) {
    const side =
      s.revision === revisions.cohort ? 'cohort' : s.revision === revisions.stable ? 'stable' : '';
    if (!side) continue;
    restarts[side] = Math.max(restarts[side], s.restarts);
    const fresh = Date.parse(s.createdAt) >= Date.parse(countFrom);
    const before = memory[s.pod] ?? (fresh ? { counters: zeroCounters(), restarts: 0 } : undefined);
    if (!s.counters) {
      // not answering yet: a new pod's counts start from zero whenever it answers
      if (before) next[s.pod] = before;
      continue;
    }
    pods[side]++;
    next[s.pod] = { counters: s.counters, restarts: s.restarts };
    if (!before) continue;
    // a restarted process counts from zero (as do counters found below the last read)
    const d =
      s.restarts > before.restarts
        ? s.counters
        : (minus(s.counters, before.counters) ?? s.counters);
    if (side === 'cohort') cohort = add(cohort, d);
    else stable = add(stable, d);
  }
  return {
    cohort: { ...cohort, pods: pods.cohort, restarts: Math.max(cohort.restarts, restarts.cohort) },
    stable: { ...stable, pods: pods.stable, restarts: Math.max(stable.restarts, restarts.stable) },
    memory: next,
  };
}

/** p95 in words: "≤0.05 s", ">120 s", or "–" without runs. */
export function latencyWords(f: RevisionFigures): string {
  const p = p95(f);
  return p === undefined ? '–' : Number.isFinite(p) ? `≤${p} s` : `>${LATENCY_BOUNDS.at(-2)} s`;
}

/**
 * Handler runs counted by the histogram, and those beyond the largest bucket
 * bound at or under `limit` (at bucket resolution: "p95 above the limit" is
 * "more than 5% of the runs beyond that bound").
 */
export function runsOver(
  f: RevisionFigures,
  limit: number,
): { runs: number; over: number; bound: number } {
  const b = f.latencyBuckets ?? [];
  const runs = b[b.length - 1] ?? 0;
  const i = LATENCY_BOUNDS.findLastIndex((bound) => bound <= limit);
  return {
    runs,
    over: i < 0 ? runs : runs - (b[i] ?? 0),
    bound: i < 0 ? 0 : (LATENCY_BOUNDS[i] as number),
  };
}

/** The bucket bound under which 95% of the handler runs fell; undefined without runs. */
export function p95(f: RevisionFigures): number | undefined {
  const b = f.latencyBuckets;
  const total = b?.[b.length - 1] ?? 0;
  if (!b || total === 0) return undefined;
  const i = b.findIndex((c) => c >= 0.95 * total);
  return LATENCY_BOUNDS[i];
}
