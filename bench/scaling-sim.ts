// Scaling simulator: replays arrival traces (./scaling-traces.ts) through the
// per-message queue and fleet of ./scaling-model.ts, driven by (a) jobfleet's
// decision module — the same decideReplicas and estimateCapacity the operator
// runs, (b) a KEDA-style depth scaler under HPA's default behaviour, and
// (c) an offline oracle. The scalers see only what they would see live: the
// management API's queue statistics, sampled every 5 s and read at their own
// poll interval; the workers' counters as the operator reads them from each
// pod at its poll; the throttling rate as Prometheus' rate(...[1m]) over 15 s
// scrapes. Each trace runs for several seeds; the report gives medians and
// ranges.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { estimateCapacity, type CapacityMemory } from '../src/reconcile/scaling/capacity.js';
import {
  decideReplicas,
  type ScalingSpec,
  type ScalingState,
} from '../src/reconcile/scaling/replicas.js';
import { queueAge, type AgeMemory } from '../src/reconcile/scaling/queue-age.js';
import type { HeadReading } from '../src/reconcile/model/observation.js';
import {
  fluidFleet,
  messageFleet,
  MODEL,
  type Fleet,
  type Trace,
  type Truth,
} from './scaling-model.js';
import { median } from './stats.js';
import { TRACES } from './scaling-traces.js';

const here = path.dirname(fileURLToPath(import.meta.url));

export const JOBFLEET_CLASSIC = 'jobfleet (classic queue: head timestamp)';
export const JOBFLEET_QUORUM = 'jobfleet (quorum queue: measured)';
/** the age a quorum queue had before it was measured: no worker reports, the estimate alone */
export const JOBFLEET_ESTIMATED = 'jobfleet (quorum queue: estimate only)';

/** What a scaler can see at time `now` (s). */
interface View {
  now: number;
  /** the management API's last statistics sample (every 5 s) */
  queue: {
    depth: number;
    unacked: number;
    oldestAge: number;
    publishRate: number;
    ackRate: number;
  };
  /** the workers' counters, read from each pod when the scaler asks (the operator's own reads) */
  workers: { handlerSeconds: number; completed: number };
  /** refused calls/s over the last minute of scrapes (Prometheus' rate(...[1m])) */
  throttleRate: number;
  ready: number;
  /** each ready worker's view of the queue's head, read from the pods when the scaler asks */
  heads: () => HeadReading[];
}

interface Scaler {
  name: string;
  /** called every second; returns the replicas wanted */
  decide(v: View): number;
  /** the scaler's per-replica capacity estimate, if it makes one */
  capacity?(): number | undefined;
}

export interface SimResult {
  scaler: string;
  overObjectivePct: number;
  replicaSeconds: number;
  scaleEvents: number;
  throttledCalls: number;
  /** |estimate ÷ truth − 1| while the queue was empty, median (jobfleet only, constant-capacity traces) */
  capacityError?: number;
  series: Array<{ t: number; age: number; replicas: number }>;
}

function run(trace: Trace, fleet: Fleet, scaler: Scaler): SimResult {
  let current = 1;
  let over = 0;
  let replicaSeconds = 0;
  let events = 0;
  let throttledCalls = 0;
  let throttledCum = 0;
  const recent: Truth[] = [];
  const scrapes: Array<{ t: number; throttled: number }> = []; // Prometheus, every 15 s
  let queue: View['queue'] = { depth: 0, unacked: 0, oldestAge: 0, publishRate: 0, ackRate: 0 };
  let sampledAt = 0;
  const series: SimResult['series'] = [];
  const errors: number[] = [];
  const truthCapacity = MODEL.prefetch / trace.service.mean;
  for (let t = 0; t < trace.seconds; t++) {
    const truth = fleet.tick(t);
    const now = t + 1;
    if (truth.oldestWait > MODEL.objective) over++;
    replicaSeconds += truth.paid;
    throttledCalls += truth.throttled;
    throttledCum += truth.throttled;
    recent.push(truth);
    if (recent.length > 5) recent.shift();
    if (now % 5 === 0) {
      const mean = (k: 'arrived' | 'completed') => recent.reduce((s, x) => s + x[k], 0) / 5;
      queue = {
        depth: truth.depth,
        unacked: truth.inflight,
        oldestAge: truth.oldestAge,
        publishRate: mean('arrived'),
        ackRate: mean('completed'),
      };
      sampledAt = now;
    }
    if (now % 15 === 0 || scrapes.length === 0) scrapes.push({ t: now, throttled: throttledCum });
    while (scrapes.length > 1 && now - scrapes[0]!.t > 60) scrapes.shift();
    const last = scrapes.at(-1)!;
    const first = scrapes[0]!;
    const want = scaler.decide({
      now,
      queue: { ...queue, oldestAge: queue.depth > 0 ? queue.oldestAge + (now - sampledAt) : 0 },
      workers: {
        handlerSeconds: truth.handlerSeconds,
        completed: truth.completedTotal,
      },
      throttleRate: last.t > first.t ? (last.throttled - first.throttled) / (last.t - first.t) : 0,
      ready: truth.ready,
      heads: () => fleet.heads?.(now) ?? [],
    });
    if (want !== current) {
      events++;
      fleet.scale(want, now);
      current = want;
    }
    const estimate = scaler.capacity?.();
    if (estimate !== undefined && truth.depth === 0 && !trace.dependency)
      errors.push(Math.abs(estimate / truthCapacity - 1));
    if (t % 10 === 0) series.push({ t, age: truth.oldestWait, replicas: truth.paid });
  }
  return {
    scaler: scaler.name,
    overObjectivePct: (100 * over) / trace.seconds,
    replicaSeconds: Math.round(replicaSeconds),
    scaleEvents: events,
    throttledCalls,
    ...(errors.length && { capacityError: median(errors) }),
    series,
  };
}

/**
 * The operator's own decision: capacity from the workers' counters,
 * decideReplicas every 10 s. The age: a classic queue's head timestamp from
 * the statistics, or on a quorum queue (no head timestamp) queueAge's
 * measurement from what the workers saw, read from the pods at the poll.
 */
function jobfleet(trace: Trace, age: 'classic' | 'quorum' | 'estimated' = 'classic'): Scaler {
  const perReplica = MODEL.prefetch / trace.service.mean;
  const spec: ScalingSpec = {
    minReplicas: 1,
    maxReplicas: MODEL.maxReplicas,
    targetOldestAgeSeconds: MODEL.objective,
    scaleDownStabilizationSeconds: 300,
    prefetch: MODEL.prefetch,
    // the dependency's budget as in-flight calls, set generously (twice its capacity's worth):
    // throttling, not this figure, has to find the real limit
    maxConcurrency:
      trace.dependency?.capacity !== undefined
        ? Math.ceil(trace.dependency.capacity / perReplica) * MODEL.prefetch * 2
        : undefined,
  };
  let state: ScalingState = { recommendations: [] };
  let capacity: CapacityMemory | undefined;
  let estimate: number | undefined;
  let current = 1;
  let ageMemory: AgeMemory = {};
  const oldestAge = (v: View): number => {
    if (age === 'classic') return v.queue.oldestAge;
    const r = queueAge(
      {
        type: 'quorum',
        messagesReady: v.queue.depth,
        messagesUnacked: v.queue.unacked,
        consumers: v.ready,
        publishRate: v.queue.publishRate,
        ackRate: v.queue.ackRate,
      },
      v.now * 1000,
      ageMemory,
      age === 'quorum' ? v.heads() : [],
    );
    ageMemory = r.memory;
    return r.age.signals.oldestAgeSeconds;
  };
  return {
    name: { classic: JOBFLEET_CLASSIC, quorum: JOBFLEET_QUORUM, estimated: JOBFLEET_ESTIMATED }[
      age
    ],
    capacity: () => estimate,
    decide(v) {
      if (v.now % 10 !== 0) return current;
      const c = estimateCapacity(
        {
          source: 'WorkerMetrics',
          pods: [
            {
              pod: 'fleet',
              handlerSecondsSum: v.workers.handlerSeconds,
              completed: v.workers.completed,
            },
          ],
        },
        MODEL.prefetch,
        capacity,
        v.now * 1000,
      );
      capacity = c.memory;
      estimate = c.estimate?.perReplica;
      const completedRate = c.estimate?.completedRate;
      const d = decideReplicas(
        spec,
        current,
        {
          ok: true,
          oldestAgeSeconds: oldestAge(v),
          depth: v.queue.depth,
          unacked: v.queue.unacked,
          arrivalRate: v.queue.publishRate,
          completionRate: v.queue.ackRate,
          throttleRate: trace.dependency?.capacity !== undefined ? v.throttleRate : undefined,
          readyReplicas: v.ready,
          ...(estimate !== undefined && { capacityPerReplica: estimate }),
          ...(completedRate !== undefined && { workerCompletedRate: completedRate }),
        },
        state,
        v.now * 1000,
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
function kedaDepth(): Scaler {
  const target = 20;
  let current = 1;
  let lastMetric = 0;
  const history: Array<{ t: number; r: number }> = [];
  let lastChange = -15;
  return {
    name: 'KEDA-style depth',
    decide(v) {
      const t = v.now;
      if (t % 30 === 0) lastMetric = v.queue.depth;
      if (t % 15 !== 0) return current;
      const desired = Math.min(MODEL.maxReplicas, Math.max(1, Math.ceil(lastMetric / target)));
      history.push({ t, r: desired });
      while (history.length && history[0]!.t < t - 300) history.shift();
      if (t - lastChange < 15) return current;
      let next = current;
      if (desired > current) next = Math.min(desired, Math.max(current * 2, current + 4));
      else if (desired < current) next = Math.max(Math.max(...history.map((h) => h.r)), 1);
      if (next !== current) lastChange = t;
      current = next;
      return current;
    },
  };
}

/**
 * The offline oracle: knows every arrival, starts pods instantly, and serves
 * each message at the last second its age allows, at the mean service time —
 * the fewest replica-seconds that meet the objective (a lower bound no online
 * scaler reaches; it pays nothing for pods starting or draining, nor for
 * handler-time noise).
 */
function oracle(trace: Trace, arrivals: number[]): SimResult {
  const perReplica = MODEL.prefetch / trace.service.mean;
  const cap = trace.dependency?.capacity ?? Infinity;
  const knee = trace.dependency?.knee;
  // Replicas that serve `rate` msg/s; with a latency that rises with in-flight calls I,
  // I = rate × mean × (1 + I/knee) → I = rate × mean / (1 − rate × mean / knee).
  const replicasFor = (rate: number): number => {
    if (rate <= 0) return 0;
    if (!knee) return Math.ceil(rate / perReplica - 1e-9);
    const load = rate * trace.service.mean;
    if (load >= knee) return MODEL.maxReplicas;
    return Math.min(MODEL.maxReplicas, Math.ceil(load / (1 - load / knee) / MODEL.prefetch - 1e-9));
  };
  const most = MODEL.maxReplicas * perReplica;
  const due: number[] = [];
  let cum = 0;
  for (const a of arrivals) due.push((cum += a));
  let served = 0;
  let replicaSeconds = 0;
  let events = 0;
  let last = 0;
  let over = 0;
  const series: SimResult['series'] = [];
  for (let t = 0; t < arrivals.length; t++) {
    const mustBy = t - MODEL.objective >= 0 ? (due[t - MODEL.objective] ?? 0) : 0;
    const need = Math.max(0, mustBy - served);
    const rate = Math.min(need, cap, most);
    if (need > rate) over++;
    const replicas = replicasFor(rate);
    served += rate;
    replicaSeconds += replicas;
    if (replicas !== last) events++;
    last = replicas;
    if (t % 10 === 0) series.push({ t, age: 0, replicas });
  }
  return {
    scaler: 'oracle (offline)',
    overObjectivePct: (100 * over) / arrivals.length,
    replicaSeconds,
    scaleEvents: events,
    throttledCalls: 0,
    series,
  };
}

export { median };

export interface TraceSummary {
  trace: string;
  about: string;
  rows: Array<{
    scaler: string;
    overPct: number[];
    vsOracle: number[];
    events: number[];
    throttled: number[];
    capacityError: number[];
  }>;
}

export interface Validation {
  trace: string;
  message: { replicaSeconds: number; overPct: number; maxAge: number };
  fluid: { replicaSeconds: number; overPct: number; maxAge: number };
}

/** Every trace × seeds 1..n: jobfleet, the depth scaler and the oracle on the same arrivals. */
export function runScalingSim(seeds: number): { traces: TraceSummary[]; validation: Validation[] } {
  const traces = TRACES.map((make) => {
    const byScaler = new Map<string, TraceSummary['rows'][number]>();
    let about = '';
    let name = '';
    for (let seed = 1; seed <= seeds; seed++) {
      const trace = make(seed);
      name = trace.name;
      about = trace.about;
      const fleetA = messageFleet(trace, seed);
      const ours = run(trace, fleetA, jobfleet(trace));
      const measured = run(trace, messageFleet(trace, seed), jobfleet(trace, 'quorum'));
      const estimated = run(trace, messageFleet(trace, seed), jobfleet(trace, 'estimated'));
      const keda = run(trace, messageFleet(trace, seed), kedaDepth());
      const best = oracle(trace, fleetA.arrivals);
      for (const r of [ours, measured, estimated, keda, best]) {
        const row = byScaler.get(r.scaler) ?? {
          scaler: r.scaler,
          overPct: [],
          vsOracle: [],
          events: [],
          throttled: [],
          capacityError: [],
        };
        row.overPct.push(r.overObjectivePct);
        row.vsOracle.push(r.replicaSeconds / best.replicaSeconds);
        row.events.push(r.scaleEvents);
        row.throttled.push(r.throttledCalls);
        if (r.capacityError !== undefined) row.capacityError.push(r.capacityError);
        byScaler.set(r.scaler, row);
      }
      if (seed === 1)
        writeFileSync(
          path.join(here, `scaling-${slug(trace.name)}.svg`),
          svg(trace, [ours, keda, best]),
        );
    }
    return { trace: name, about, rows: [...byScaler.values()] };
  });
  return { traces, validation: validate() };
}

/**
 * The per-message model against the fluid one where they must agree: even
 * arrivals, every message taking exactly the mean, no dependency.
 */
function validate(): Validation[] {
  return TRACES.slice(0, 3).map((make) => {
    const base = make(1);
    const trace: Trace = { ...base, service: { mean: base.service.mean, sigma: 0 } };
    const summarize = (fleet: Fleet) => {
      const r = run(trace, fleet, jobfleet(trace));
      return {
        replicaSeconds: r.replicaSeconds,
        overPct: r.overObjectivePct,
        maxAge: Math.max(...r.series.map((s) => s.age)),
      };
    };
    return {
      trace: trace.name,
      message: summarize(messageFleet(trace, 1, true)),
      fluid: summarize(fluidFleet(trace)),
    };
  });
}

function slug(name: string): string {
  return name.replace(/[^a-z0-9]+/g, '-');
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
    [JOBFLEET_CLASSIC]: '#1f77b4',
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
    const color = colors[r.scaler] ?? '#000';
    if (r.scaler !== 'oracle (offline)')
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
    parts.push(`<text x="${pad + i * 170}" y="${H - 8}" fill="${color}">■ ${r.scaler}</text>`);
  });
  parts.push('</svg>');
  return parts.join('\n');
}
