// The scaling decision, pure: desired replicas from the age of the oldest
// waiting message, capped by downstream capacity (with AIMD on throttling),
// bounded by min/max, scaled down only after the stabilization window.
// docs/scaling.md explains the formula; the simulator in bench/ replays
// traces through this same function.
import type { LIMITED_BY } from '../../api/jobworker.js';

export interface ScalingSpec {
  minReplicas: number;
  maxReplicas: number;
  targetOldestAgeSeconds: number;
  scaleDownStabilizationSeconds: number;
  prefetch: number;
  /** fleet-wide in-flight budget of the dependency */
  maxConcurrency?: number;
}

export type Signals =
  | {
      ok: true;
      /** age of the oldest waiting message (0 when the queue is empty) */
      oldestAgeSeconds: number;
      /** messages ready in the queue */
      depth: number;
      /** messages delivered but not yet acked */
      unacked?: number;
      /** messages/s arriving */
      arrivalRate: number;
      /** messages/s the fleet completes now */
      completionRate: number;
      /** throttled responses/s from the dependency (Prometheus); undefined when not measured */
      throttleRate?: number;
      /** replicas ready to consume (pods still starting complete nothing); defaults to the current count */
      readyReplicas?: number;
      /** msg/s one replica completes with its slots full, from the workers' own figures (./capacity.ts) */
      capacityPerReplica?: number;
      /** jobs/s the workers completed lately (what the dependency accepted), from the same figures */
      workerCompletedRate?: number;
    }
  | { ok: false; missing: string };

export interface ScalingState {
  /** (time, recommendation) within the stabilization window */
  recommendations: Array<{ at: number; replicas: number }>;
  /** per-replica throughput estimate (msg/s), learnt while the fleet is busy */
  perReplicaRate?: number;
  /** the AIMD cap from throttling; undefined = the static downstream cap */
  throttleCap?: number;
  lastCapChangeAt?: number;
}

export type LimitedBy = (typeof LIMITED_BY)[number];

export interface ScalingDecision {
  desired: number;
  limitedBy: LimitedBy;
  message: string;
  state: ScalingState;
  /** the uncapped need, for metrics and the simulator */
  need: number;
  /** the dependency throttles now (above the threshold) */
  throttling: boolean;
}

/**
 * Headroom over the computed need once the oldest message is past half the
 * objective: rates are noisy, and falling behind then costs the objective.
 * Below half, capacity matches the need exactly — a small queue is fine.
 */
const HEADROOM = 1.1;
/** How often AIMD may move the cap (s): one step per observation period, not per reconcile. */
const AIMD_PERIOD_S = 30;
/**
 * Once a reading finds the queue empty, the backlog and whatever burst made
 * it are over: scale down to the higher need of this reading and the one
 * before, not to the highest of the full stabilization window — when that is
 * a step of two replicas and a tenth of the fleet or more. Smaller steps are
 * what a noisy arrival rate looks like; they wait for the full window. (Bench:
 * the full window held a two-minute burst's replicas for five more minutes,
 * 1.5–2.8× the oracle's replica-seconds.)
 */
const QUIET_STEP = 0.1;
/** Multiplicative decrease of the cap while throttled. */
const DECREASE = 0.75;
/** Throttled responses per second that count as "the dependency is pushing back". */
const THROTTLE_THRESHOLD = 0.05;

export function staticDownstreamCap(spec: ScalingSpec): number | undefined {
  return spec.maxConcurrency === undefined
    ? undefined
    : Math.max(1, Math.floor(spec.maxConcurrency / spec.prefetch));
}

/**
 * Replicas needed: enough throughput μ to keep up with arrivals (μ ≥ λ) and
 * to serve the newest message of the current backlog before it reaches the
 * objective (μ ≥ B / h). FIFO means every older message is served sooner, so
 * these two bounds suffice. h is the objective T, or T/2 once the oldest
 * message is already past it (catch up faster when late). 10 % headroom once
 * the oldest message is past T/2.
 */
export function replicasNeeded(
  s: Extract<Signals, { ok: true }>,
  spec: ScalingSpec,
  perReplicaRate: number | undefined,
  current: number,
): number {
  const backlog = s.depth + (s.unacked ?? 0);
  if (backlog === 0 && s.arrivalRate === 0) return 0;
  const T = spec.targetOldestAgeSeconds;
  const horizon = s.oldestAgeSeconds > T ? T / 2 : T;
  const headroom = s.oldestAgeSeconds > T / 2 ? HEADROOM : 1;
  const throughput = Math.max(s.arrivalRate, s.depth / horizon) * headroom;
  // (the epsilon keeps float noise such as 110.00000000000001 from adding a replica)
  if (perReplicaRate && perReplicaRate > 0)
    return Math.max(1, Math.ceil(throughput / perReplicaRate - 1e-9));
  // No throughput measured yet: move proportionally to how far age is from the objective.
  if (current === 0) return 1;
  if (s.oldestAgeSeconds > T) return Math.ceil(current * Math.min(4, s.oldestAgeSeconds / T));
  return current;
}

export function decideReplicas(
  spec: ScalingSpec,
  current: number,
  signals: Signals,
  prev: ScalingState,
  nowMs: number,
): ScalingDecision {
  if (!signals.ok) {
    return {
      desired: current,
      limitedBy: 'signalMissing',
      message: `Holding ${current} replicas: ${signals.missing}.`,
      state: prev,
      need: current,
      throttling: false,
    };
  }
  const window = spec.scaleDownStabilizationSeconds * 1000;
  // With no history (a new JobWorker, or an operator restart), what runs now
  // counts as a recommendation: nothing scales down before a full window.
  const history = prev.recommendations.length
    ? prev.recommendations
    : [{ at: nowMs, replicas: current }];
  const ready = signals.readyReplicas ?? current;
  const learnt: ScalingState = {
    ...prev,
    recommendations: history.filter((r) => nowMs - r.at <= window),
    perReplicaRate: learnPerReplicaRate(prev.perReplicaRate, signals, ready),
    ...throttleCap(spec, signals, prev, current, ready, nowMs),
  };
  const downstreamCap = learnt.throttleCap ?? staticDownstreamCap(spec);
  const perReplica = perReplicaCapacity(spec, signals, learnt.perReplicaRate, ready, current);
  const need = replicasNeeded(signals, spec, perReplica, current);
  // The recommendation (the need within min/max) is what the window remembers…
  const recommendation = Math.min(spec.maxReplicas, Math.max(spec.minReplicas, need));
  const state: ScalingState = {
    ...learnt,
    recommendations: [...learnt.recommendations, { at: nowMs, replicas: recommendation }],
  };
  const limit = (desired: number, limitedBy: LimitedBy) => ({ desired, limitedBy });
  const stable = stabilized(spec, signals, state, current, recommendation);
  // The downstream cap applies at once, window or not: its point is to relieve a dependency now.
  const { desired, limitedBy } =
    downstreamCap !== undefined &&
    stable.desired > downstreamCap &&
    downstreamCap >= spec.minReplicas
      ? limit(downstreamCap, 'downstream')
      : stable.held
        ? limit(stable.desired, 'stabilization')
        : limit(
            recommendation,
            need > spec.maxReplicas
              ? 'maxReplicas'
              : need < spec.minReplicas
                ? 'minReplicas'
                : 'age',
          );
  const message = decisionMessage(spec, signals, state, {
    desired,
    limitedBy,
    need,
    recommendation,
  });
  const throttling = (signals.throttleRate ?? 0) > THROTTLE_THRESHOLD;
  return { desired, limitedBy, message, state, need, throttling };
}

type OkSignals = Extract<Signals, { ok: true }>;

/**
 * Per-replica throughput, learnt only while the fleet is saturated (a backlog
 * is waiting); otherwise completions just mirror arrivals.
 */
function learnPerReplicaRate(
  rate: number | undefined,
  signals: OkSignals,
  ready: number,
): number | undefined {
  if (ready <= 0 || signals.depth <= 0 || signals.completionRate <= 0) return rate;
  const sample = signals.completionRate / ready;
  return rate === undefined ? sample : 0.7 * rate + 0.3 * sample;
}

/**
 * AIMD on the downstream cap. While the dependency throttles, the cap drops to
 * the replicas that carry what it accepted (the workers' completions ÷ one
 * replica's capacity); without those figures, to ×0.75. +1 per quiet period.
 * (Halving, as TCP does, overshoots: it drops the fleet well below what the
 * dependency does accept, and +1 per period takes minutes to climb back. A
 * blind ×0.75 undershoots too, and the burst's backlog then waits: bench.)
 */
function throttleCap(
  spec: ScalingSpec,
  signals: OkSignals,
  prev: ScalingState,
  current: number,
  ready: number,
  nowMs: number,
): Pick<ScalingState, 'throttleCap' | 'lastCapChangeAt'> {
  const kept = { throttleCap: prev.throttleCap, lastCapChangeAt: prev.lastCapChangeAt };
  const staticCap = staticDownstreamCap(spec);
  if (signals.throttleRate === undefined || staticCap === undefined) return kept;
  const canMove =
    prev.lastCapChangeAt === undefined || nowMs - prev.lastCapChangeAt >= AIMD_PERIOD_S * 1000;
  if (!canMove) return kept;
  const cap = prev.throttleCap ?? staticCap;
  if (signals.throttleRate <= THROTTLE_THRESHOLD)
    return prev.throttleCap === undefined
      ? kept
      : { throttleCap: cap + 1 >= staticCap ? undefined : cap + 1, lastCapChangeAt: nowMs };
  const before = Math.min(cap, Math.max(current, 1));
  if (signals.workerCompletedRate === undefined || signals.capacityPerReplica === undefined)
    return { throttleCap: Math.max(1, Math.floor(before * DECREASE)), lastCapChangeAt: nowMs };
  // Measured only once every replica consumes (pods still starting complete nothing);
  // at or above `before`, the throttling the minute-long rate still shows is over.
  if (ready < current) return kept;
  const carried = Math.round(signals.workerCompletedRate / signals.capacityPerReplica);
  return carried < before ? { throttleCap: Math.max(1, carried), lastCapChangeAt: nowMs } : kept;
}

/**
 * Capacity from the workers' own figures when they report them; while a
 * backlog is late, what the fleet actually completes cross-checks it (a mean
 * handler time taken from few, heavy-tailed samples runs short: bench).
 */
function perReplicaCapacity(
  spec: ScalingSpec,
  signals: OkSignals,
  learnt: number | undefined,
  ready: number,
  current: number,
): number | undefined {
  if (signals.capacityPerReplica === undefined) return learnt;
  const late =
    signals.depth > 0 &&
    signals.oldestAgeSeconds > spec.targetOldestAgeSeconds / 4 &&
    ready >= current;
  return late && learnt !== undefined
    ? Math.min(signals.capacityPerReplica, learnt)
    : signals.capacityPerReplica;
}

/**
 * Up at once, down only to the highest recommendation of the window (a
 * small step down is what noise looks like: it waits for the full window),
 * never above maxReplicas (a lowered maximum applies at once, as the HPA's does).
 */
function stabilized(
  spec: ScalingSpec,
  signals: OkSignals,
  state: ScalingState,
  current: number,
  recommendation: number,
): { desired: number; held: boolean } {
  if (recommendation >= current) return { desired: recommendation, held: false };
  const quietTarget = Math.max(...state.recommendations.slice(-2).map((r) => r.replicas));
  const highest =
    signals.depth === 0 && current - quietTarget >= Math.max(2, Math.ceil(QUIET_STEP * current))
      ? quietTarget
      : Math.max(...state.recommendations.map((r) => r.replicas));
  const held = Math.min(current, highest, spec.maxReplicas);
  return held > recommendation
    ? { desired: held, held: true }
    : { desired: recommendation, held: false };
}

function decisionMessage(
  spec: ScalingSpec,
  signals: OkSignals,
  state: ScalingState,
  d: { desired: number; limitedBy: LimitedBy; need: number; recommendation: number },
): string {
  const { desired, need, recommendation } = d;
  const age = `oldest message ${Math.round(signals.oldestAgeSeconds)} s ${signals.oldestAgeSeconds > spec.targetOldestAgeSeconds ? '>' : '≤'} ${spec.targetOldestAgeSeconds} s objective`;
  switch (d.limitedBy) {
    case 'age':
      return `${desired} replicas keep the ${age} (${signals.depth} waiting, ${fmt(signals.arrivalRate)}/s arriving).`;
    case 'downstream':
      return state.throttleCap !== undefined
        ? `Capped at ${desired} replicas: the dependency is throttling (${fmt(signals.throttleRate ?? 0)}/s), so the cap was lowered from ${staticDownstreamCap(spec)}; ${age}.`
        : `Capped by downstream capacity ${spec.maxConcurrency} / prefetch ${spec.prefetch} = ${desired} replicas; ${age}.`;
    case 'maxReplicas':
      return `Capped at maxReplicas ${spec.maxReplicas} (${need} wanted); ${age}. Raise spec.scaling.maxReplicas if the dependency allows.`;
    case 'minReplicas':
      return `Held at minReplicas ${spec.minReplicas}; ${age}.`;
    case 'stabilization':
      return `Holding ${desired} replicas for the ${spec.scaleDownStabilizationSeconds} s scale-down window (${recommendation} would do now); ${age}.`;
    default:
      return '';
  }
}

function fmt(n: number): string {
  return n >= 10 ? String(Math.round(n)) : n.toFixed(1);
}
