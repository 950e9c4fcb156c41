// What one replica can do, from the workers' own counters (Little's law):
// differenced per pod, restarts, throttled runs, an idle fleet keeping its
// estimate, Prometheus counters that move once per scrape.
import { describe, expect, it } from 'vitest';
import { estimateCapacity, type CapacityMemory } from '../../src/reconcile/scaling/capacity.js';
import type { CapacityCounters } from '../../src/reconcile/model/observation.js';

const pod = (name: string, handlerSecondsSum: number, completed: number): CapacityCounters => ({
  pod: name,
  handlerSecondsSum,
  completed,
});

/** Feeds readings every `everyMs`; returns the last result. */
function feed(
  readings: CapacityCounters[][],
  memory?: CapacityMemory,
  start = 0,
  everyMs = 10_000,
) {
  let mem = memory;
  let out: ReturnType<typeof estimateCapacity> | undefined;
  readings.forEach((pods, i) => {
    out = estimateCapacity({ source: 'WorkerMetrics', pods }, 8, mem, start + i * everyMs);
    mem = out.memory;
  });
  return out!;
}

describe('estimateCapacity', () => {
  it('is prefetch ÷ handler seconds per completed job, summed over pods, from differences only', () => {
    // two pods, each 40 jobs of 0.4 s per 10 s
    const at = (k: number) => [pod('a', 16 * k, 40 * k), pod('b', 16 * k, 40 * k)];
    // counters that started long ago: the first reading only sets the baseline
    const first = feed([at(100)]);
    expect(first.estimate).toBeUndefined();
    const r = feed([at(101), at(102)], first.memory, 10_000);
    expect(r.estimate?.meanServiceSeconds).toBeCloseTo(0.4);
    expect(r.estimate?.perReplica).toBeCloseTo(20); // 8 slots ÷ 0.4 s
    expect(r.estimate?.completedRate).toBeCloseTo(8); // 160 in the 20 s since the first reading
    expect(r.estimate?.source).toBe('WorkerMetrics');
  });

  it('a restarted pod (its counters went back) starts over instead of giving a negative difference', () => {
    const r = feed([[pod('a', 400, 1000)], [pod('a', 1, 2)], [pod('a', 61, 152)]]);
    expect(r.estimate?.meanServiceSeconds).toBeCloseTo(0.4);
  });

  it('throttled runs complete nothing: their time counts, and no job', () => {
    // per 10 s: 20 jobs completed taking 3.8 s each, 400 refused calls of 0.01 s
    const at = (k: number) => [pod('a', (20 * 3.8 + 400 * 0.01) * k, 20 * k)];
    const r = feed(Array.from({ length: 7 }, (_, k) => at(k)));
    expect(r.estimate?.meanServiceSeconds).toBeCloseTo(4); // 80 handler-seconds ÷ 20 jobs
    expect(r.estimate?.perReplica).toBeCloseTo(2);
  });

  it('says nothing from fewer than a hundred completions (their mean is too noisy)', () => {
    // lognormal σ 1 times: the mean of n has a standard error of 131 %/√n — 29 % at 20, 13 % at 100
    expect(feed([[pod('a', 0, 0)], [pod('a', 39.6, 99)]]).estimate).toBeUndefined();
    expect(feed([[pod('a', 0, 0)], [pod('a', 40, 100)]]).estimate?.perReplica).toBeCloseTo(20);
  });

  it('an idle fleet keeps the estimate its last busy minutes gave', () => {
    const busy = (k: number) => [pod('a', 20 * k, 50 * k)];
    const warm = feed([busy(0), busy(1), busy(2)]);
    expect(warm.estimate?.perReplica).toBeCloseTo(20);
    // an hour with nothing to do: the same counters
    const idle = feed(
      Array.from({ length: 360 }, () => busy(2)),
      warm.memory,
      30_000,
    );
    expect(idle.estimate?.perReplica).toBeCloseTo(20);
    expect(idle.memory.samples.length).toBeLessThanOrEqual(31);
  });

  it('Prometheus counters move once per scrape: the completion rate is taken over half a minute, not the last poll', () => {
    // polled every 1 s, scraped every 15 s: 150 completions appear at once every 15th poll
    const readings = Array.from({ length: 61 }, (_, t) => {
      const k = Math.floor(t / 15);
      return [pod('10.0.0.1:9464', 60 * k, 150 * k)];
    });
    let mem: CapacityMemory | undefined;
    let r: ReturnType<typeof estimateCapacity> | undefined;
    readings.forEach((pods, t) => {
      r = estimateCapacity({ source: 'Prometheus', pods }, 8, mem, t * 1000);
      mem = r.memory;
    });
    expect(r!.estimate?.source).toBe('Prometheus');
    expect(r!.estimate?.completedRate).toBeCloseTo(10); // 300 in the last 30 s, not 150 in 1 s
    expect(r!.estimate?.meanServiceSeconds).toBeCloseTo(0.4);
  });

  it('without a new reading, the estimate stands and no completion rate is claimed', () => {
    const warm = feed([[pod('a', 0, 0)], [pod('a', 20, 50)], [pod('a', 40, 100)]]);
    const r = estimateCapacity(undefined, 8, warm.memory, 40_000);
    expect(r.estimate?.perReplica).toBeCloseTo(20);
    expect(r.estimate?.completedRate).toBeUndefined();
  });
});
