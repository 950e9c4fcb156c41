// Rollbacks, pure: the fixed-order rollback (drain → restore → verify), and
// the analysis of a new revision that triggers an automatic one. Their state
// lives in status (./gate.ts declares it), so an operator restart resumes at
// the same step.
import { type ConditionInput, type PlanEvent, iso } from '../model/index.js';
import { ageRising, RISE_SUSTAIN_MS } from '../scaling/index.js';
import type { AnalysisState, LastRollback, RolloutState, Trigger } from './gate.js';

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
