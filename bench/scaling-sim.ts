// Scaling simulator (issue 6): replays arrival traces through a FIFO queue
// model, driven by (a) jobfleet's decision module — the same decideReplicas
// the operator runs, (b) a KEDA-style depth scaler under HPA's default
// behaviour, and (c) an offline oracle. Reports % of time the oldest message
// exceeded the objective, replica-seconds and scale events; writes an SVG per
// trace.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { decideReplicas, type ScalingSpec, type ScalingState } from '../src/reconcile/scaling.js';

const here = path.dirname(fileURLToPath(import.meta.url));

export interface Trace {
  name: string;
  seconds: number;
  /** arrivals per second at time t */
  rate(t: number): number;
  /** the dependency's capacity (msg/s) beyond which it throttles; undefined = unlimited */
  dependencyCapacity?: number;
}

/** Per-replica service rate (msg/s), pod start delay (s), objective (s). */
export const MODEL = {
  perReplica: 10,
  startDelay: 15,
  objective: 30,
  prefetch: 8,
  maxReplicas: 80,
};

export const TRACES: Trace[] = [
  { name: 'step', seconds: 3600, rate: (t) => (t < 600 ? 20 : t < 2400 ? 150 : 40) },
  { name: 'spike', seconds: 3600, rate: (t) => (t >= 900 && t < 1020 ? 600 : 30) },
  {
    name: 'diurnal',
    seconds: 4 * 3600,
    rate: (t) => 120 + 100 * Math.sin((2 * Math.PI * t) / (4 * 3600)),
  },
  // A dependency that takes at most 120 msg/s (12 replicas' worth): a burst above it can only
  // wait its turn, and replicas beyond 12 buy nothing but throttled calls.
  {
    name: 'throttled',
    seconds: 3600,
    rate: (t) => (t % 900 >= 600 && t % 900 < 660 ? 200 : 70),
    dependencyCapacity: 120,
  },
];

interface Controller {
  name: string;
  /** called every second; returns the wanted replicas (applied after the start delay when rising) */
  decide(t: number, obs: Observation): number;
}

interface Observation {
  depth: number;
  oldestAge: number;
  arrivalRate: number;
  completionRate: number;
  throttleRate: number;
  replicas: number;
  ready: number;
}

export interface SimResult {
  controller: string;
  overObjectivePct: number;
  replicaSeconds: number;
  scaleEvents: number;
  /** calls the dependency refused (each one a retry later) */
  throttledCalls: number;
  series: Array<{ t: number; age: number; replicas: number }>;
}

function simulate(trace: Trace, controller: Controller): SimResult {
  const queue: Array<{ at: number; n: number }> = []; // FIFO buckets of arrivals
  let wanted = 1;
  let ready = 1; // replicas able to consume
  const starting: Array<{ at: number; n: number }> = [];
  let over = 0;
  let replicaSeconds = 0;
  let events = 0;
  let lastWanted = 1;
  const series: SimResult['series'] = [];
  const window: Array<{ arrived: number; done: number; throttled: number }> = [];
  let carry = 0;
  let throttledCalls = 0;

  for (let t = 0; t < trace.seconds; t++) {
    // arrivals (fractional rates accumulate)
    carry += trace.rate(t);
    const arrived = Math.floor(carry);
    carry -= arrived;
    if (arrived) queue.push({ at: t, n: arrived });
    // pods that finished starting
    while (starting.length && starting[0]!.at <= t) ready += starting.shift()!.n;
    // service
    let capacity = ready * MODEL.perReplica;
    let throttled = 0;
    if (trace.dependencyCapacity !== undefined && capacity > trace.dependencyCapacity) {
      // calls beyond the dependency's capacity are throttled and retried later
      const depthNow = queue.reduce((s, b) => s + b.n, 0);
      throttled = Math.max(0, Math.min(depthNow, capacity) - trace.dependencyCapacity);
      capacity = trace.dependencyCapacity;
      throttledCalls += throttled;
    }
    let done = 0;
    while (capacity > 0 && queue.length) {
      const head = queue[0]!;
      const take = Math.min(head.n, capacity);
      head.n -= take;
      capacity -= take;
      done += take;
      if (head.n === 0) queue.shift();
    }
    const depth = queue.reduce((s, b) => s + b.n, 0);
    const oldestAge = queue.length ? t - queue[0]!.at : 0;
    if (oldestAge > MODEL.objective) over++;
    replicaSeconds += ready + starting.reduce((s, x) => s + x.n, 0);
    window.push({ arrived, done, throttled });
    if (window.length > 5) window.shift();
    const rate = (k: 'arrived' | 'done' | 'throttled') =>
      window.reduce((s, w) => s + w[k], 0) / window.length;

    const next = controller.decide(t, {
      depth,
      oldestAge,
      arrivalRate: rate('arrived'),
      completionRate: rate('done'),
      throttleRate: rate('throttled'),
      replicas: ready + starting.reduce((s, x) => s + x.n, 0),
      ready,
    });
    if (next !== lastWanted) events++;
    lastWanted = next;
    const total = ready + starting.reduce((s, x) => s + x.n, 0);
    if (next > total) starting.push({ at: t + MODEL.startDelay, n: next - total });
    else if (next < total) {
      let drop = total - next;
      // cancel pods still starting first, then stop running ones (drain is instant here)
      while (drop > 0 && starting.length) {
        const last = starting[starting.length - 1]!;
        const k = Math.min(drop, last.n);
        last.n -= k;
        drop -= k;
        if (last.n === 0) starting.pop();
      }
      ready -= drop;
    }
    wanted = next;
    if (t % 10 === 0) series.push({ t, age: oldestAge, replicas: ready });
  }
  void wanted;
  return {
    controller: controller.name,
    overObjectivePct: (100 * over) / trace.seconds,
    replicaSeconds,
    scaleEvents: events,
    throttledCalls,
    series,
  };
}

/** jobfleet: the operator's decision module, polled every 10 s. */
function jobfleet(trace: Trace): Controller {
  const spec: ScalingSpec = {
    minReplicas: 1,
    maxReplicas: MODEL.maxReplicas,
    targetOldestAgeSeconds: MODEL.objective,
    scaleDownStabilizationSeconds: 300,
    prefetch: MODEL.prefetch,
    // the dependency's budget expressed as in-flight calls: capacity ÷ per-replica rate × prefetch
    maxConcurrency:
      trace.dependencyCapacity !== undefined
        ? Math.ceil(trace.dependencyCapacity / MODEL.perReplica) * MODEL.prefetch * 2
        : undefined,
  };
  let state: ScalingState = { recommendations: [] };
  let current = 1;
  return {
    name: 'jobfleet (age)',
    decide(t, o) {
      if (t % 10 !== 0) return current;
      const d = decideReplicas(
        spec,
        o.replicas,
        {
          ok: true,
          oldestAgeSeconds: o.oldestAge,
          depth: o.depth,
          arrivalRate: o.arrivalRate,
          completionRate: o.completionRate,
          throttleRate: trace.dependencyCapacity !== undefined ? o.throttleRate : undefined,
          readyReplicas: o.ready,
        },
        state,
        t * 1000,
      );
      state = d.state;
      current = d.desired;
      return current;
    },
  };
}

/**
 * KEDA's RabbitMQ scaler in QueueLength mode (target 20 messages per
 * replica, polled every 30 s) feeding the HPA with its default behaviour:
 * scale up by max(100 %, 4 pods) per 15 s with no window, scale down after a
 * 300 s window by at most 100 % per 15 s.
 */
function kedaDepth(): Controller {
  const target = 20;
  let current = 1;
  let lastMetric = 0;
  const history: Array<{ t: number; r: number }> = [];
  let lastChange = -15;
  return {
    name: 'KEDA-style depth',
    decide(t, o) {
      if (t % 30 === 0) lastMetric = o.depth;
      if (t % 15 !== 0) return current;
      const desired = Math.min(MODEL.maxReplicas, Math.max(1, Math.ceil(lastMetric / target)));
      history.push({ t, r: desired });
      while (history.length && history[0]!.t < t - 300) history.shift();
      if (t - lastChange < 15) return current;
      let next = current;
      if (desired > current) next = Math.min(desired, Math.max(current * 2, current + 4));
      else if (desired < current) next = Math.max(Math.max(...history.map((h) => h.r)), 1);
      next = Math.min(next, current > next ? current : MODEL.maxReplicas);
      if (next !== current) lastChange = t;
      current = next;
      return current;
    },
  };
}

/**
 * The offline oracle: knows every arrival, starts pods instantly, and serves
 * each message at the last second its age allows — the fewest replica-seconds
 * that meet the objective (a lower bound no online scaler reaches).
 */
function oracle(trace: Trace): SimResult {
  const arrivals: number[] = [];
  let carry = 0;
  for (let t = 0; t < trace.seconds; t++) {
    carry += trace.rate(t);
    arrivals.push(Math.floor(carry));
    carry -= Math.floor(carry);
  }
  const cap = trace.dependencyCapacity ?? Infinity;
  let served = 0;
  let cum = 0;
  let replicaSeconds = 0;
  let events = 0;
  let last = 0;
  const series: SimResult['series'] = [];
  const due: number[] = []; // cumulative arrivals that must be served by t
  for (let t = 0; t < trace.seconds; t++) {
    cum += arrivals[t] ?? 0;
    due.push(cum);
  }
  let over = 0;
  for (let t = 0; t < trace.seconds; t++) {
    const mustBy = t - MODEL.objective >= 0 ? (due[t - MODEL.objective] ?? 0) : 0;
    const need = Math.max(0, mustBy - served);
    const rate = Math.min(need, cap, MODEL.maxReplicas * MODEL.perReplica);
    if (need > rate) over++;
    const replicas = Math.ceil(rate / MODEL.perReplica);
    served += Math.min(rate, replicas * MODEL.perReplica);
    replicaSeconds += replicas;
    if (replicas !== last) events++;
    last = replicas;
    if (t % 10 === 0) series.push({ t, age: 0, replicas });
  }
  return {
    controller: 'oracle (offline)',
    overObjectivePct: (100 * over) / trace.seconds,
    replicaSeconds,
    scaleEvents: events,
    throttledCalls: 0,
    series,
  };
}

function svg(trace: Trace, results: SimResult[]): string {
  const W = 720;
  const H = 300;
  const pad = 40;
  const maxAge = Math.max(
    MODEL.objective * 2,
    ...results.flatMap((r) => r.series.map((s) => s.age)),
  );
  const maxRep = Math.max(...results.flatMap((r) => r.series.map((s) => s.replicas)), 1);
  const x = (t: number) => pad + ((W - 2 * pad) * t) / trace.seconds;
  const yAge = (a: number) => H / 2 - 10 - ((H / 2 - 30) * a) / maxAge;
  const yRep = (r: number) => H - pad + 10 - ((H / 2 - 30) * r) / maxRep;
  const colors: Record<string, string> = {
    'jobfleet (age)': '#1f77b4',
    'KEDA-style depth': '#d62728',
    'oracle (offline)': '#2ca02c',
  };
  const line = (pts: string, color: string) =>
    `<polyline fill="none" stroke="${color}" stroke-width="1.5" points="${pts}"/>`;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${pad}" y="14" font-weight="bold">${trace.name}: oldest-message age (top, objective dashed) and replicas (bottom)</text>`,
    `<line x1="${pad}" x2="${W - pad}" y1="${yAge(MODEL.objective)}" y2="${yAge(MODEL.objective)}" stroke="#999" stroke-dasharray="4 3"/>`,
    `<text x="${W - pad + 2}" y="${yAge(MODEL.objective) + 4}">${MODEL.objective} s</text>`,
    `<text x="4" y="${yAge(maxAge) + 8}">${Math.round(maxAge)} s</text>`,
    `<text x="4" y="${yRep(maxRep) + 8}">${maxRep}</text>`,
  ];
  results.forEach((r, i) => {
    const color = colors[r.controller] ?? '#000';
    if (r.controller !== 'oracle (offline)')
      parts.push(
        line(
          r.series.map((s) => `${x(s.t).toFixed(1)},${yAge(s.age).toFixed(1)}`).join(' '),
          color,
        ),
      );
    parts.push(
      line(
        r.series.map((s) => `${x(s.t).toFixed(1)},${yRep(s.replicas).toFixed(1)}`).join(' '),
        color,
      ),
    );
    parts.push(`<text x="${pad + i * 170}" y="${H - 8}" fill="${color}">■ ${r.controller}</text>`);
  });
  parts.push('</svg>');
  return parts.join('\n');
}

export function runScalingSim(): Array<{ trace: string; results: SimResult[] }> {
  return TRACES.map((trace) => {
    const results = [simulate(trace, jobfleet(trace)), simulate(trace, kedaDepth()), oracle(trace)];
    writeFileSync(path.join(here, `scaling-${trace.name}.svg`), svg(trace, results));
    return { trace: trace.name, results };
  });
}
