// What one replica can do, from the workers' own figures (Little's law):
// pod counters differenced per pod, restarts, throttled runs, long jobs
// still running, an idle fleet keeping its estimate, Prometheus rates.
import { describe, expect, it } from 'vitest';
import {
  estimateCapacity,
  type CapacityMemory,
  type PodCounters,
} from '../../src/reconcile/capacity.js';

const pod = (name: string, o: Partial<PodCounters> = {}): PodCounters => ({
  pod: name,
  handlerSecondsSum: 0,
  handlerRuns: 0,
  completed: 0,
  inflight: 0,
  ...o,
});

/** Feeds readings every 10 s; returns the last result. */
function feed(readings: PodCounters[][], memory?: CapacityMemory, start = 0) {
  let mem = memory;
  let out: ReturnType<typeof estimateCapacity> | undefined;
  readings.forEach((pods, i) => {
    out = estimateCapacity({ source: 'WorkerMetrics', pods }, 8, mem, start + i * 10_000);
    mem = out.memory;
  });
  return out!;
}

describe('estimateCapacity', () => {
  it('is prefetch ÷ mean handler time, summed over pods, from differences only', () => {
    // two pods, each 40 runs of 0.4 s per 10 s with 1.6 in flight on average
    const at = (k: number) => [
      pod('a', {
        handlerSecondsSum: 16 * k,
        handlerRuns: 40 * k,
        completed: 40 * k,
        inflight: 1.6,
      }),
      pod('b', {
        handlerSecondsSum: 16 * k,
        handlerRuns: 40 * k,
        completed: 40 * k,
        inflight: 1.6,
      }),
    ];
    // counters that started long ago: the first reading only sets the baseline
    const first = feed([at(100)]);
    expect(first.estimate).toBeUndefined();
    const r = feed([at(101), at(102)], first.memory, 10_000);
    expect(r.estimate?.meanServiceSeconds).toBeCloseTo(0.4);
    expect(r.estimate?.perReplica).toBeCloseTo(20); // 8 slots ÷ 0.4 s
    expect(r.estimate?.completedRate).toBeCloseTo(8); // 80 per 10 s
    expect(r.estimate?.source).toBe('WorkerMetrics');
  });

  it('a restarted pod (its counters went back) starts over instead of giving a negative difference', () => {
    const r = feed([
      [pod('a', { handlerSecondsSum: 400, handlerRuns: 1000, completed: 1000, inflight: 2 })],
      [pod('a', { handlerSecondsSum: 1, handlerRuns: 2, completed: 2, inflight: 2 })],
      [pod('a', { handlerSecondsSum: 21, handlerRuns: 52, completed: 52, inflight: 2 })],
    ]);
    expect(r.estimate?.meanServiceSeconds).toBeCloseTo(0.4);
  });

  it('throttled runs complete nothing: busy slot-seconds per completed job wins over the quick runs', () => {
    // per 10 s: 8 slots always busy; 20 jobs completed taking 3.8 s each, 400 refused calls of 0.01 s
    const at = (k: number) => [
      pod('a', {
        handlerSecondsSum: (20 * 3.8 + 400 * 0.01) * k,
        handlerRuns: 420 * k,
        completed: 20 * k,
        inflight: 8,
      }),
    ];
    const r = feed([at(0), at(1), at(2)]);
    expect(r.estimate?.meanServiceSeconds).toBeCloseTo(4); // 80 slot-seconds ÷ 20 jobs, not 0.19 s per run
    expect(r.estimate?.perReplica).toBeCloseTo(2);
  });

  it('counts long jobs while they still run (a fresh fleet has only seen its short ones finish)', () => {
    // 8 slots busy throughout; the runs that finished took 0.1 s, but only 10 finished per 10 s
    const at = (k: number) => [
      pod('a', { handlerSecondsSum: 1 * k, handlerRuns: 10 * k, completed: 10 * k, inflight: 8 }),
    ];
    const r = feed([at(0), at(1), at(2), at(3)]);
    expect(r.estimate?.meanServiceSeconds).toBeCloseTo(8); // 80 slot-seconds per 10 jobs
  });

  it('says nothing from a handful of completions', () => {
    const r = feed([
      [pod('a')],
      [pod('a', { handlerSecondsSum: 5, handlerRuns: 10, completed: 10, inflight: 1 })],
    ]);
    expect(r.estimate).toBeUndefined();
  });

  it('an idle fleet keeps the estimate its last busy minutes gave', () => {
    const busy = (k: number) => [
      pod('a', { handlerSecondsSum: 20 * k, handlerRuns: 50 * k, completed: 50 * k, inflight: 2 }),
    ];
    const warm = feed([busy(0), busy(1), busy(2), [{ ...busy(3)[0]!, inflight: 0 }]]);
    expect(warm.estimate?.perReplica).toBeCloseTo(20);
    // an hour with nothing to do: the same counters, nothing in flight
    let mem = warm.memory;
    let r = warm;
    for (let i = 1; i <= 360; i++) {
      r = estimateCapacity(
        { source: 'WorkerMetrics', pods: [pod('a', { ...busy(3)[0], inflight: 0 })] },
        8,
        mem,
        30_000 + i * 10_000,
      );
      mem = r.memory;
    }
    expect(r.estimate?.perReplica).toBeCloseTo(20);
    expect(mem.samples.length).toBeLessThanOrEqual(31);
  });

  it('Prometheus counters move once per scrape: the completion rate is taken over half a minute, not the last poll', () => {
    // polled every 1 s, scraped every 15 s: 150 completions appear at once every 15th poll
    let mem: CapacityMemory | undefined;
    let r: ReturnType<typeof estimateCapacity> | undefined;
    for (let t = 0; t <= 60; t++) {
      const k = Math.floor(t / 15);
      r = estimateCapacity(
        {
          source: 'Prometheus',
          pods: [
            pod('10.0.0.1:9464', {
              handlerSecondsSum: 60 * k,
              handlerRuns: 150 * k,
              completed: 150 * k,
              inflight: 4,
            }),
          ],
        },
        8,
        mem,
        t * 1000,
      );
      mem = r.memory;
    }
    expect(r!.estimate?.source).toBe('Prometheus');
    expect(r!.estimate?.completedRate).toBeCloseTo(10); // 300 in the last 30 s, not 150 in 1 s
    expect(r!.estimate?.meanServiceSeconds).toBeCloseTo(0.4);
  });
});
