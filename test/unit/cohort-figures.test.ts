// A cohort step's figures: what one worker's /metrics says (read from the
// worker runtime's own registry, in the real exposition format), and the
// window's totals built from reads of many pods over time — counted once,
// whatever pods come, restart, or the operator forgets.
import { describe, expect, it } from 'vitest';
import {
  accumulate,
  latencyWords,
  LATENCY_BOUNDS,
  noFigures,
  runsOver,
  type PodCounters,
  type PodSample,
} from '../../src/reconcile/cohort/figures.js';
import { parseRevisionCounters } from '../../src/signals/worker-metrics.js';
import { workerMetrics } from '../../worker/metrics.js';

describe("a worker's counters, from its /metrics", () => {
  it('counts outcomes, conflicts as handled duplicates (not retries), dead letters by class, and latency', async () => {
    const m = workerMetrics();
    m.jobs.inc({ type: 'ship', outcome: 'completed' }, 7);
    m.jobs.inc({ type: 'ship', outcome: 'duplicate' }, 2);
    m.jobs.inc({ type: 'bill', outcome: 'dead_lettered' }, 3);
    m.jobs.inc({ type: 'ship', outcome: 'retried' }, 4);
    m.claimConflicts.inc(5);
    m.retries.inc({ type: 'ship', reason: 'error' }, 4);
    m.retries.inc({ type: 'ship', reason: 'claim_conflict' }, 5);
    m.deadLetters.inc({ type: 'bill', failure_class: 'permanent' }, 2);
    m.deadLetters.inc({ type: 'bill', failure_class: 'key_mismatch' }, 1);
    m.handlerDuration.observe({ type: 'ship' }, 0.03);
    m.handlerDuration.observe({ type: 'bill' }, 3);
    const c = parseRevisionCounters(await m.registry.metrics());
    expect(c).toMatchObject({
      handled: 7 + 2 + 3 + 4 + 5,
      completed: 7,
      deadLettered: 3,
      retried: 4,
      duplicates: 2 + 5,
      deadLettersByClass: { permanent: 2, key_mismatch: 1 },
    });
    // cumulative per bound: 0.03 s falls at ≤0.05, 3 s at ≤5
    expect(c.latency[LATENCY_BOUNDS.indexOf(0.025)]).toBe(0);
    expect(c.latency[LATENCY_BOUNDS.indexOf(0.05)]).toBe(1);
    expect(c.latency[LATENCY_BOUNDS.indexOf(5)]).toBe(2);
    expect(c.latency.at(-1)).toBe(2);
    expect(latencyWords({ ...noFigures(), latencyBuckets: c.latency })).toBe('≤5 s');
  });
});

const counters = (handled: number, deadLettered = 0): PodCounters => ({
  handled,
  completed: handled - deadLettered,
  deadLettered,
  retried: 0,
  duplicates: 0,
  deadLettersByClass: deadLettered ? { permanent: deadLettered } : {},
  latency: LATENCY_BOUNDS.map(() => handled),
});

const T0 = '2026-12-01T10:00:00Z';
const at = (s: number) => new Date(Date.parse(T0) + s * 1000).toISOString();
const sample = (
  pod: string,
  revision: string,
  createdAt: number,
  c?: PodCounters,
  restarts = 0,
): PodSample => ({ pod, revision, createdAt: at(createdAt), restarts, ...(c && { counters: c }) });
const revisions = { cohort: '2', stable: '1' };

/** Reads in turn, each counting from the read before it, as cohort.ts calls it. */
function reads(all: PodSample[][], memory = {}) {
  let totals = { cohort: noFigures(), stable: noFigures() };
  let mem = memory;
  let from = at(0);
  all.forEach((samples, i) => {
    const r = accumulate(totals, mem, samples, revisions, from);
    totals = { cohort: r.cohort, stable: r.stable };
    mem = r.memory;
    from = at((i + 1) * 10);
  });
  return { totals, memory: mem };
}

describe("a step's figures, from reads of many pods", () => {
  it('counts a stable pod from its first read (its history is not the window’s), a cohort pod in full', () => {
    const { totals } = reads([
      [sample('s1', '1', -3600, counters(10_000)), sample('c1', '2', 5, counters(40, 4))],
      [sample('s1', '1', -3600, counters(10_100)), sample('c1', '2', 5, counters(90, 9))],
    ]);
    expect(totals.stable).toMatchObject({ handled: 100, pods: 1 });
    expect(totals.cohort).toMatchObject({
      handled: 90,
      deadLettered: 9,
      deadLettersByClass: { permanent: 9 },
      pods: 1,
    });
  });

  it('counts a restarted process from zero: its new counters are all new', () => {
    const { totals } = reads([
      [sample('c1', '2', 5, counters(50))],
      [sample('c1', '2', 5, counters(20), 1)],
      [sample('c1', '2', 5, counters(30), 1)],
    ]);
    expect(totals.cohort).toMatchObject({ handled: 50 + 20 + 10, restarts: 1 });
  });

  it('after the operator forgets (a restart), counts nothing twice: known pods are baselines again', () => {
    const first = reads([
      [sample('c1', '2', 5, counters(50))],
      [sample('c1', '2', 5, counters(80))],
    ]);
    expect(first.totals.cohort.handled).toBe(80);
    // memory lost: the next read, at 20 s, of a pod created at 5 s is a baseline
    const again = accumulate(
      first.totals,
      {},
      [sample('c1', '2', 5, counters(95))],
      revisions,
      at(20),
    );
    expect(again.cohort.handled).toBe(80);
    // …and a pod created since the last read counts in full
    const created = accumulate(
      first.totals,
      {},
      [sample('c2', '2', 25, counters(7))],
      revisions,
      at(20),
    );
    expect(created.cohort.handled).toBe(87);
  });

  it('counts a new pod in full once it answers, even when its first reads did not', () => {
    const { totals } = reads([
      [sample('c1', '2', 5)], // created in the window, not answering yet
      [sample('c1', '2', 5)],
      [sample('c1', '2', 5, counters(12))],
    ]);
    expect(totals.cohort.handled).toBe(12);
  });

  it('leaves out pods of other revisions', () => {
    const { totals } = reads([[sample('o1', '7', 5, counters(9))]]);
    expect(totals.cohort.handled + totals.stable.handled).toBe(0);
  });
});

describe('runsOver', () => {
  // 100 runs: 90 at ≤0.05 s, 6 more by 0.25 s, 4 over 5 s
  const buckets = LATENCY_BOUNDS.map((b) => (b < 0.05 ? 0 : b < 0.25 ? 90 : b < 10 ? 96 : 100));
  const f = { ...noFigures(), latencyBuckets: buckets };

  it('counts the runs beyond the largest bucket bound at or under the limit', () => {
    expect(runsOver(f, 0.1)).toEqual({ runs: 100, over: 10, bound: 0.1 });
    // a limit between bounds is judged at the bound under it, as p95 is
    expect(runsOver(f, 0.3)).toEqual({ runs: 100, over: 4, bound: 0.25 });
    expect(runsOver(f, Infinity)).toEqual({ runs: 100, over: 0, bound: Infinity });
  });

  it('with no runs, none are over', () => {
    expect(runsOver(noFigures(), 0.1)).toMatchObject({ runs: 0, over: 0 });
  });
});
