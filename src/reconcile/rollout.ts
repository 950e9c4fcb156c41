// Rollouts and rollbacks, pure: the compatibility gate, the fixed-order
// rollback (drain → restore → verify), and the analysis that triggers an
// automatic rollback. The reconciler observes, calls these, applies what they
// decide and records their state in status, so an operator restart resumes at
// the same step.
import type { JobWorkerStatus } from '../api/jobworker.js';
import type { ConditionInput } from './conditions.js';
import type { PlanEvent } from './events.js';

export type RolloutState = NonNullable<JobWorkerStatus['rollout']>;
export type AnalysisState = NonNullable<JobWorkerStatus['analysis']>;
export type LastRollback = NonNullable<JobWorkerStatus['lastRollback']>;
export type Trigger = RolloutState['trigger'];

/** What the rollout contributes to status (src/reconcile/status.ts). */
export interface RolloutStatus {
  rollout?: RolloutState;
  lastRollback?: LastRollback;
  analysis?: AnalysisState;
  abortedRevision?: string;
  /** a Cohort rollout in progress (./cohort.ts), and how the last one ended */
  cohort?: NonNullable<JobWorkerStatus['cohort']>;
  lastCohort?: NonNullable<JobWorkerStatus['lastCohort']>;
  conditions: ConditionInput[];
  /** overrides the Progressing condition computed from the Deployment */
  progressing?: ConditionInput;
  /** Degraded, when nothing else degrades the JobWorker */
  degraded?: ConditionInput;
  rollingBack: boolean;
}

export const ALLOW_KEY_RULE_CHANGE = 'jobfleet.dev/allow-key-rule-change';

export interface Contract {
  keyRule: string;
  schemaVersions: readonly number[];
}

export type GateResult =
  | { ok: true; overrideUsed?: string }
  | {
      ok: false;
      reason: 'IdempotencyKeyRuleChanged' | 'SchemaVersionIncompatible' | 'QueueTypeDiffers';
      message: string;
    };

export interface GateInput {
  kind: 'rollout' | 'rollback';
  runningRevision: string;
  running: Contract;
  candidateRevision: string;
  candidate: Contract;
  /** spec.contract.producerVersions, when declared */
  producerVersions?: readonly number[];
  /** versions seen in the queue recently (jobfleet_schema_version_seen_total), when known */
  observedVersions?: readonly number[];
  /** the allow-key-rule-change annotation's value, when set */
  override?: string;
  /** messages in the work queue and its retry queues; undefined when unknown */
  queuedMessages?: number;
}

const list = (v: readonly number[]) => `[${v.join(', ')}]`;
const sorted = (v: Iterable<number>) => [...new Set(v)].sort((a, b) => a - b);

/** May `candidate` start consuming while `running` (and what producers send) is what is queued? */
export function gate(i: GateInput): GateResult {
  const what =
    i.kind === 'rollback'
      ? `Rolling back to revision ${i.candidateRevision}`
      : `Revision ${i.candidateRevision}`;
  if (i.candidate.keyRule !== i.running.keyRule) {
    const change = `changes the idempotency-key rule from "${i.running.keyRule}" (revision ${i.runningRevision}) to "${i.candidate.keyRule}"`;
    const why =
      'old and new workers would give the same operation different keys, so it could run twice';
    if (!i.override)
      return {
        ok: false,
        reason: 'IdempotencyKeyRuleChanged',
        message: `${what} ${change}: ${why}. Restore spec.contract.idempotencyKey to "${i.running.keyRule}", or, once the queue and its retry queues are empty, annotate the JobWorker ${ALLOW_KEY_RULE_CHANGE}="<reason>".`,
      };
    if (i.queuedMessages === undefined || i.queuedMessages > 0)
      return {
        ok: false,
        reason: 'IdempotencyKeyRuleChanged',
        message: `${what} ${change}. The ${ALLOW_KEY_RULE_CHANGE} override applies only when the queue and its retry queues are empty; ${i.queuedMessages === undefined ? 'their depth is unknown (no queue signal)' : `${i.queuedMessages} messages are still queued`}. Let them drain, then the change proceeds.`,
      };
    return { ok: true, overrideUsed: i.override };
  }
  const required = sorted([
    ...(i.producerVersions ?? i.running.schemaVersions),
    ...(i.observedVersions ?? []),
  ]);
  const missing = required.filter((v) => !i.candidate.schemaVersions.includes(v));
  if (missing.length) {
    const sources = [
      i.producerVersions
        ? `producers declare ${list(sorted(i.producerVersions))}`
        : `the running revision ${i.runningRevision} accepts ${list(sorted(i.running.schemaVersions))}`,
      ...(i.observedVersions?.length
        ? [`the queue has seen ${list(sorted(i.observedVersions))}`]
        : []),
    ].join('; ');
    return {
      ok: false,
      reason: 'SchemaVersionIncompatible',
      message: `${what} accepts schema versions ${list(sorted(i.candidate.schemaVersions))}, but ${list(missing)} may still be queued (${sources}). Add ${list(missing)} to spec.contract.schemaVersions, or set spec.contract.producerVersions once producers no longer send ${list(missing)} and the queue holds none.`,
    };
  }
  return { ok: true };
}

/**
 * May a revision that declares `wanted` queues start on the work queue as
 * the broker has it? A queue's type cannot change: its workers would be
 * refused (QueueArgumentsDiffer) and consume nothing. Checked before any pod
 * changes, e.g. when an upgrade changes spec.broker.queueType's default
 * under a JobWorker that never set it. `actual` is undefined when the queue
 * is not read (no management URL) or does not exist yet: nothing to compare.
 */
export function queueTypeGate(i: {
  candidateRevision: string;
  queue: string;
  wanted: string;
  actual: string | undefined;
}): GateResult {
  if (!i.actual || i.actual === i.wanted) return { ok: true };
  return {
    ok: false,
    reason: 'QueueTypeDiffers',
    message: `Revision ${i.candidateRevision} declares ${i.wanted} queues, but queue "${i.queue}" is a ${i.actual} queue, and a queue's type cannot change: its workers would be refused. Set spec.broker.queueType: ${i.actual} to keep the queue, or move to a new ${i.wanted} queue (spec.broker.queue; docs/compatibility.md, "Choosing a queue type").`,
  };
}

// --- rollback, in a fixed order -----------------------------------------------

export interface StepInput {
  now: Date;
  state: RolloutState | undefined;
  /** the revision the Deployment's template carries now */
  deployedRevision: string | undefined;
  /** the revision that should run (already through the gate) */
  targetRevision: string;
  /** the target is an earlier revision than the deployed one: a rollback */
  isRollback: boolean;
  trigger: Trigger;
  triggerReason?: string;
  /** drain deadline + termination margin, seconds */
  drainSeconds: number;
  verifySeconds: number;
  objectiveSeconds: number;
  /** pods of `state.from` still present (Terminating counts); undefined when not read */
  oldPods: number | undefined;
  /** the Deployment runs `state.to` fully and ready */
  restored: boolean;
  ageSeconds: number | undefined;
}

export interface StepOutput {
  /** the template to apply, and whether replicas are forced to 0 (drain) */
  deploy: { revision: string; scaleToZero: boolean };
  state: RolloutState | undefined;
  /** set when a rollback finished */
  finished?: LastRollback;
  conditions: ConditionInput[];
  requeueMs?: number;
  event?: PlanEvent;
}

export const iso = (d: Date) => d.toISOString().replace(/\.\d{3}Z$/, 'Z');

/** One step of the fixed-order rollback: drain → restore → verify. */
export function rollbackStep(i: StepInput): StepOutput {
  const s = i.state;
  if (!s) return startStep(i);
  if (s.phase === 'Draining') return drainStep(i, s);
  if (s.phase === 'Restoring') return restoreStep(i, s);
  return verifyStep(i, s);
}

/** No rollback in progress: one starts when the target is an earlier revision than the one deployed. */
function startStep(i: StepInput): StepOutput {
  if (!i.isRollback || !i.deployedRevision || i.deployedRevision === i.targetRevision)
    return {
      deploy: { revision: i.targetRevision, scaleToZero: false },
      state: undefined,
      conditions: [],
    };
  const deadline = new Date(i.now.getTime() + i.drainSeconds * 1000);
  const state: RolloutState = {
    phase: 'Draining',
    trigger: i.trigger,
    from: i.deployedRevision,
    to: i.targetRevision,
    ...(i.triggerReason ? { reason: i.triggerReason } : {}),
    startedAt: iso(i.now),
    stepStartedAt: iso(i.now),
    drainDeadline: iso(deadline),
  };
  return {
    deploy: { revision: i.deployedRevision, scaleToZero: true },
    state,
    conditions: [drainingCondition(state)],
    requeueMs: 1000,
    event: {
      type: i.trigger === 'AutoRollback' ? 'Warning' : 'Normal',
      of: 'Deployment',
      reason: 'RollbackStarted',
      message: `Rolling back from revision ${state.from} to ${state.to}${i.triggerReason ? ` (${i.triggerReason})` : ''}: draining revision ${state.from} first, deadline ${state.drainDeadline}.`,
    },
  };
}

/** Draining: the old revision at 0 until its pods are gone or the deadline passes. */
function drainStep(i: StepInput, s: RolloutState): StepOutput {
  const deadlinePassed = i.now.getTime() >= Date.parse(s.drainDeadline);
  if (i.oldPods !== 0 && !deadlinePassed)
    return {
      deploy: { revision: s.from, scaleToZero: true },
      state: s,
      conditions: [drainingCondition(s, i.oldPods)],
      requeueMs: 1000,
    };
  const state: RolloutState = {
    ...s,
    phase: 'Restoring',
    stepStartedAt: iso(i.now),
    drainEndedAt: iso(i.now),
    drainEndedBy: i.oldPods === 0 ? 'PodsGone' : 'Deadline',
  };
  const gone = state.drainEndedBy === 'PodsGone';
  return {
    deploy: { revision: s.to, scaleToZero: false },
    state,
    conditions: [
      notDraining(
        `Revision ${s.from} drained (${gone ? 'its pods are gone' : `the deadline passed with ${i.oldPods ?? '?'} pods left`}); restoring revision ${s.to}.`,
      ),
    ],
    requeueMs: 1000,
    event: {
      type: gone ? 'Normal' : 'Warning',
      of: 'Deployment',
      reason: 'Drained',
      message: `Revision ${s.from} ${gone ? 'stopped consuming: its pods are gone' : `reached its drain deadline with ${i.oldPods ?? '?'} pods left`}; starting revision ${s.to}.`,
    },
  };
}

/** Restoring: the previous revision rolls out; once it runs, the verification window starts. */
function restoreStep(i: StepInput, s: RolloutState): StepOutput {
  const deploy = { revision: s.to, scaleToZero: false };
  if (!i.restored) return { deploy, state: s, conditions: [], requeueMs: 2000 };
  const state: RolloutState = {
    ...s,
    phase: 'Verifying',
    stepStartedAt: iso(i.now),
    ...(i.ageSeconds !== undefined ? { ageAtRestore: Math.round(i.ageSeconds) } : {}),
    verifyUntil: iso(new Date(i.now.getTime() + i.verifySeconds * 1000)),
  };
  return { deploy, state, conditions: [], requeueMs: 2000 };
}

/** Verifying: queue age must start falling (or be within the objective) in the window. */
function verifyStep(i: StepInput, s: RolloutState): StepOutput {
  const age = i.ageSeconds;
  const falling =
    age !== undefined &&
    (age <= i.objectiveSeconds || (s.ageAtRestore !== undefined && age < s.ageAtRestore));
  if (age === undefined || falling)
    return finish(
      s,
      i.now,
      'Complete',
      age === undefined
        ? `Rolled back from revision ${s.from} to ${s.to}; queue age not verified (no queue signal).`
        : `Rolled back from revision ${s.from} to ${s.to}; queue age ${s.ageAtRestore !== undefined ? `went from ${Math.round(s.ageAtRestore)} s to ` : 'is '}${Math.round(age)} s (objective ${i.objectiveSeconds} s).`,
    );
  if (i.now.getTime() >= Date.parse(s.verifyUntil ?? s.stepStartedAt))
    return finish(
      s,
      i.now,
      'NotRecovering',
      `Rolled back from revision ${s.from} to ${s.to}, but queue age did not fall within ${i.verifySeconds} s: ${s.ageAtRestore !== undefined ? `${Math.round(s.ageAtRestore)} s at restore, ` : ''}${Math.round(age)} s now (objective ${i.objectiveSeconds} s). Look at the downstream and at revision ${s.to}'s workers.`,
    );
  return {
    deploy: { revision: s.to, scaleToZero: false },
    state: s,
    conditions: [],
    requeueMs: 2000,
  };
}

/** The rollback's last step: the restored revision stays, and the outcome is recorded. */
function finish(
  s: RolloutState,
  now: Date,
  result: LastRollback['result'],
  message: string,
): StepOutput {
  return {
    deploy: { revision: s.to, scaleToZero: false },
    state: undefined,
    finished: {
      from: s.from,
      to: s.to,
      trigger: s.trigger,
      result,
      ...(s.drainEndedBy ? { drainEndedBy: s.drainEndedBy } : {}),
      message,
      finishedAt: iso(now),
    },
    conditions: [],
    event:
      result === 'Complete'
        ? { type: 'Normal', reason: 'RollbackComplete', message }
        : { type: 'Warning', reason: 'RollbackNotRecovering', message },
  };
}

function drainingCondition(s: RolloutState, pods?: number): ConditionInput {
  return {
    type: 'Draining',
    status: 'True',
    reason: 'RollbackDrain',
    message: `Draining revision ${s.from} before revision ${s.to} starts${pods !== undefined ? `: ${pods} pods left` : ''}; deadline ${s.drainDeadline}.`,
  };
}

function notDraining(message: string): ConditionInput {
  return { type: 'Draining', status: 'False', reason: 'Drained', message };
}

// --- automatic rollback: analysis of a new revision ---------------------------

export interface AnalysisInput {
  now: Date;
  state: AnalysisState | undefined;
  autoRollback: boolean;
  analysisSeconds: number;
  objectiveSeconds: number;
  /** the revision deployed by a roll forward, and the stable one before it */
  revision: string;
  stable: string | undefined;
  ageSeconds: number | undefined;
  /** pods of `revision` restarting repeatedly */
  crashLooping: boolean;
}

/** Sustained this long above the objective (and above where it started), age is rising, not a blip. */
export const RISE_SUSTAIN_MS = 10_000;

/**
 * Queue age past the objective and above where it started by more than one
 * reading's resolution: the broker's message timestamps are whole seconds,
 * so a fleet already over its objective that holds steady (6 s, then 6.4 s)
 * is not rising, and a revision is not rolled back for it.
 */
export function ageRising(
  age: number | undefined,
  objectiveSeconds: number,
  atStart = 0,
): age is number {
  return age !== undefined && age > objectiveSeconds && age > atStart + 1;
}

export function analyze(i: AnalysisInput): {
  state: AnalysisState | undefined;
  rollback?: { to: string; reason: string };
} {
  if (!i.autoRollback || !i.stable || i.stable === i.revision) return { state: undefined };
  const now = i.now;
  const known = i.state && i.state.revision === i.revision ? i.state : undefined;
  const st: AnalysisState = known
    ? // anchored at the first age read, when there was none at the start
      known.ageAtStart === undefined && i.ageSeconds !== undefined
      ? { ...known, ageAtStart: i.ageSeconds }
      : known
    : {
        revision: i.revision,
        stable: i.stable,
        startedAt: iso(now),
        ...(i.ageSeconds !== undefined ? { ageAtStart: i.ageSeconds } : {}),
      };
  if (now.getTime() - Date.parse(st.startedAt) > i.analysisSeconds * 1000)
    return { state: undefined };
  if (i.crashLooping)
    return {
      state: undefined,
      rollback: { to: st.stable, reason: `revision ${st.revision} crash-loops` },
    };
  const age = i.ageSeconds;
  if (!ageRising(age, i.objectiveSeconds, st.ageAtStart)) {
    return { state: { ...st, overObjectiveSince: undefined } };
  }
  const since = st.overObjectiveSince ?? iso(now);
  if (now.getTime() - Date.parse(since) >= RISE_SUSTAIN_MS)
    return {
      state: undefined,
      rollback: {
        to: st.stable,
        reason: `queue age rose from ${Math.round(st.ageAtStart ?? 0)} s to ${Math.round(age)} s, past the ${i.objectiveSeconds} s objective, within ${i.analysisSeconds} s of revision ${st.revision}`,
      },
    };
  return { state: { ...st, overObjectiveSince: since } };
}
