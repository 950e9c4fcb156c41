// The arrival traces the scaling simulator replays. The first four are the
// ones the decision was first tuned on; the rest were designed afterwards to
// catch what those four miss: bursts that come and go within a scale-down
// window, random on/off load, a ramp that ends in a cliff, heavy-tailed
// handler times, and a dependency that slows down as more calls reach it.
import { prng } from '../test/ground/prng.js';
import type { Trace } from './scaling-model.js';

/** Mean handler time: 8 slots ÷ 0.8 s = 10 messages/s per replica. */
const MEAN = 0.8;
const typical = { mean: MEAN, sigma: 0.5 };

export const TRACES: Array<(seed: number) => Trace> = [
  () => ({
    name: 'step',
    about: '20 → 150 → 40 msg/s',
    seconds: 3600,
    rate: (t) => (t < 600 ? 20 : t < 2400 ? 150 : 40),
    service: typical,
  }),
  () => ({
    name: 'spike',
    about: '30 msg/s with one 2-minute spike to 600',
    seconds: 3600,
    rate: (t) => (t >= 900 && t < 1020 ? 600 : 30),
    service: typical,
  }),
  () => ({
    name: 'diurnal',
    about: '120 ± 100 msg/s over 4 hours',
    seconds: 4 * 3600,
    rate: (t) => 120 + 100 * Math.sin((2 * Math.PI * t) / (4 * 3600)),
    service: typical,
  }),
  // The dependency takes at most 120 calls/s (12 replicas' worth): a burst above it can
  // only wait its turn, and replicas beyond 12 buy nothing but refused calls.
  () => ({
    name: 'throttled',
    about: '70 msg/s, 1-minute bursts to 200 every 15 min; dependency takes 120/s',
    seconds: 3600,
    rate: (t) => (t % 900 >= 600 && t % 900 < 660 ? 200 : 70),
    service: typical,
    dependency: { capacity: 120 },
  }),
  () => ({
    name: 'bursty',
    about: '2-minute bursts of 200 msg/s every 10 min over 20',
    seconds: 3600,
    rate: (t) => (t % 600 < 120 ? 200 : 20),
    service: typical,
  }),
  (seed) => {
    // on for 30–150 s at 80–240 msg/s, off for 60–600 s at 5; drawn per seed
    const r = prng(seed * 31 + 17);
    const rates: number[] = [];
    while (rates.length < 3600) {
      const on = 80 + 160 * r();
      for (let k = Math.round(30 + 120 * r()); k > 0; k--) rates.push(on);
      for (let k = Math.round(60 + 540 * r()); k > 0; k--) rates.push(5);
    }
    return {
      name: 'random on/off',
      about: 'random bursts: on 30–150 s at 80–240 msg/s, off 60–600 s at 5',
      seconds: 3600,
      rate: (t) => rates[t]!,
      service: typical,
    };
  },
  () => ({
    name: 'ramp-cliff',
    about: '10 → 250 msg/s over 30 min, then 10',
    seconds: 3600,
    rate: (t) => (t < 1800 ? 10 + (240 * t) / 1800 : 10),
    service: typical,
  }),
  () => ({
    name: 'heavy tail',
    about: '100 → 160 msg/s, lognormal handler time σ 2',
    seconds: 3600,
    rate: (t) => (t < 1800 ? 100 : 160),
    service: { mean: MEAN, sigma: 2 },
  }),
  // Each call takes longer the more calls are in flight (× 1 + inflight/600):
  // 40 msg/s needs ~5 replicas, 120 msg/s ~15, as each replica gets slower.
  () => ({
    name: 'slows with load',
    about: '40 → 120 → 60 msg/s; dependency latency × (1 + in-flight calls / 600)',
    seconds: 3600,
    rate: (t) => (t < 1200 ? 40 : t < 2400 ? 120 : 60),
    service: typical,
    dependency: { knee: 600 },
  }),
];
