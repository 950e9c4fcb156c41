// The scaling decision, pure: desired replicas from the age of the oldest
// waiting message, capped by downstream capacity (with AIMD on throttling),
// bounded by min/max, scaled down only after the stabilization window.
// docs/scaling.md explains the formula; the simulator in bench/ replays
// traces through this same function.
import type { LIMITED_BY } from '../api/jobworker.js';

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
  const window = spec.scaleDownStabilizationSeconds * 1000;
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
  // With no history (a new JobWorker, or an operator restart), what runs now
  // counts as a recommendation: nothing scales down before a full window.
  const history = prev.recommendations.length
    ? prev.recommendations
    : [{ at: nowMs, replicas: current }];
  const state: ScalingState = {
    ...prev,
    recommendations: history.filter((r) => nowMs - r.at <= window),
  };

  // Learn per-replica throughput only while the fleet is saturated (a backlog
  // is waiting); otherwise completions just mirror arrivals.
  const ready = signals.readyReplicas ?? current;
  if (ready > 0 && signals.depth > 0 && signals.completionRate > 0) {
    const sample = signals.completionRate / ready;
    state.perReplicaRate =
      state.perReplicaRate === undefined ? sample : 0.7 * state.perReplicaRate + 0.3 * sample;
  }

  // AIMD on the downstream cap. While the dependency throttles, the cap drops to
  // the replicas that carry what it accepted (the workers' completions ÷ one
  // replica's capacity); without those figures, to ×0.75. +1 per quiet period.
  // (Halving, as TCP does, overshoots: it drops the fleet well below what the
  // dependency does accept, and +1 per period takes minutes to climb back. A
  // blind ×0.75 undershoots too, and the burst's backlog then waits: bench.)
  const staticCap = staticDownstreamCap(spec);
  if (signals.throttleRate !== undefined && staticCap !== undefined) {
    const canMove =
      state.lastCapChangeAt === undefined || nowMs - state.lastCapChangeAt >= AIMD_PERIOD_S * 1000;
    const cap = state.throttleCap ?? staticCap;
    const measured =
      signals.workerCompletedRate !== undefined && signals.capacityPerReplica !== undefined;
    if (signals.throttleRate > THROTTLE_THRESHOLD && canMove) {
      const before = Math.min(cap, Math.max(current, 1));
      if (!measured) {
        state.throttleCap = Math.max(1, Math.floor(before * DECREASE));
        state.lastCapChangeAt = nowMs;
      } else if (ready >= current) {
        // Measured only once every replica consumes (pods still starting complete nothing);
        // at or above `before`, the throttling the minute-long rate still shows is over.
        const carried = Math.round(signals.workerCompletedRate! / signals.capacityPerReplica!);
        if (carried < before) {
          state.throttleCap = Math.max(1, carried);
          state.lastCapChangeAt = nowMs;
        }
      }
    } else if (
      signals.throttleRate <= THROTTLE_THRESHOLD &&
      state.throttleCap !== undefined &&
      canMove
    ) {
      state.throttleCap = cap + 1 >= staticCap ? undefined : cap + 1;
      state.lastCapChangeAt = nowMs;
    }
  }
  const downstreamCap = state.throttleCap ?? staticCap;

  // Capacity from the workers' own figures when they report them; while a
  // backlog is late, what the fleet actually completes cross-checks it (a mean
  // handler time taken from few, heavy-tailed samples runs short: bench).
  const late =
    signals.depth > 0 &&
    signals.oldestAgeSeconds > spec.targetOldestAgeSeconds / 4 &&
    ready >= current;
  const perReplica =
    signals.capacityPerReplica === undefined
      ? state.perReplicaRate
      : late && state.perReplicaRate !== undefined
        ? Math.min(signals.capacityPerReplica, state.perReplicaRate)
        : signals.capacityPerReplica;
  const need = replicasNeeded(signals, spec, perReplica, current);
  // The recommendation (the need within min/max) is what the window remembers…
  const recommendation = Math.min(spec.maxReplicas, Math.max(spec.minReplicas, need));
  state.recommendations = [...state.recommendations, { at: nowMs, replicas: recommendation }];
  let desired = recommendation;
  let limitedBy: LimitedBy =
    need > spec.maxReplicas ? 'maxReplicas' : need < spec.minReplicas ? 'minReplicas' : 'age';
  // …so that it goes up at once but down only to the highest recommendation of the window.
  if (desired < current) {
    const quietTarget = Math.max(...state.recommendations.slice(-2).map((r) => r.replicas));
    // A small step down is what noise looks like: it waits for the full window.
    const highest =
      signals.depth === 0 && current - quietTarget >= Math.max(2, Math.ceil(QUIET_STEP * current))
        ? quietTarget
        : Math.max(...state.recommendations.map((r) => r.replicas));
    // …never above maxReplicas: a lowered maximum applies at once (as the HPA's does).
    const held = Math.min(current, highest, spec.maxReplicas);
    if (held > desired) {
      desired = held;
      limitedBy = 'stabilization';
    }
  }
  // The downstream cap applies at once, window or not: its point is to relieve a dependency now.
  if (downstreamCap !== undefined && desired > downstreamCap && downstreamCap >= spec.minReplicas) {
    desired = downstreamCap;
    limitedBy = 'downstream';
  }

  const age = `oldest message ${Math.round(signals.oldestAgeSeconds)} s ${signals.oldestAgeSeconds > spec.targetOldestAgeSeconds ? '>' : '≤'} ${spec.targetOldestAgeSeconds} s objective`;
  const messages: Record<LimitedBy, string> = {
    age: `${desired} replicas keep the ${age} (${signals.depth} waiting, ${fmt(signals.arrivalRate)}/s arriving).`,
    downstream:
      state.throttleCap !== undefined
        ? `Capped at ${desired} replicas: the dependency is throttling (${fmt(signals.throttleRate ?? 0)}/s), so the cap was lowered from ${staticCap}; ${age}.`
        : `Capped by downstream capacity ${spec.maxConcurrency} / prefetch ${spec.prefetch} = ${desired} replicas; ${age}.`,
    maxReplicas: `Capped at maxReplicas ${spec.maxReplicas} (${need} wanted); ${age}. Raise spec.scaling.maxReplicas if the dependency allows.`,
    minReplicas: `Held at minReplicas ${spec.minReplicas}; ${age}.`,
    stabilization: `Holding ${desired} replicas for the ${spec.scaleDownStabilizationSeconds} s scale-down window (${recommendation} would do now); ${age}.`,
    signalMissing: '',
  };
  const throttling = (signals.throttleRate ?? 0) > THROTTLE_THRESHOLD;
  return { desired, limitedBy, message: messages[limitedBy], state, need, throttling };
}

function fmt(n: number): string {
  return n >= 10 ? String(Math.round(n)) : n.toFixed(1);
}
