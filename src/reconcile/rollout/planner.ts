// The rollout half of a JobWorker reconcile, pure: from what was observed
// (the JobWorker, its Deployment, the status it wrote last) to which
// revision's template to apply, at what replicas, and what to record in
// status — through the gate, the automatic-rollback analysis and the
// fixed-order rollback of ./gate.ts. A few observations cost a call and
// matter only in some states (a revision's pods, the schema versions seen in
// the queue, the queued total for an override): when it needs one it has not
// been given, it says so (`need`), and the caller reads it and plans again.
import { type PlanEvent, type ConditionInput, iso } from '../model/index.js';
import {
  checksOf,
  parseSpec,
  type JobWorkerSpec,
  type JobWorkerStatus,
} from '../../api/jobworker.js';
import type { KubeObject } from '../../api/kube-object.js';
import type { ReasonOf } from '../../api/reasons.js';
import {
  TERMINATION_MARGIN_SECONDS,
  revisionOf,
  revisionRecordName,
  contractHash,
  deployedContract,
  deployedRevision,
  templateHash,
  managerOf,
} from '../children/index.js';
import {
  ANNOTATION_COHORT_COMMAND,
  cohortStep,
  DEFAULT_STEPS,
  parseCommand,
  type CohortOutput,
  type FiguresMemory,
  type PodSample,
} from '../cohort/index.js';
import { assignRevision, type HistoryEntry } from './revisions.js';
import {
  ALLOW_KEY_RULE_CHANGE,
  gate,
  queueTypeGate,
  type AnalysisState,
  type Contract,
  type GateResult,
  type LastRollback,
  type RolloutState,
  type RolloutStatus,
  type Trigger,
} from './gate.js';
import { analyze, rollbackStep, type StepOutput } from './rollback.js';

/** A pod restarting this often is crash-looping: an automatic rollback's trigger. */
export const CRASH_LOOP_RESTARTS = 3;

export interface PodFacts {
  /** the highest restart count among its containers */
  restarts: number;
}

/** An observation the plan needs in this state and was not given. */
export type RolloutNeed =
  | { kind: 'pods'; revision: string }
  | { kind: 'seenVersions' }
  | { kind: 'queued' }
  | { kind: 'revisionSpec'; revision: string }
  | { kind: 'cohortSamples' };

/** What the caller read because a plan asked (`need`); a key present with undefined: unreadable. */
export interface RolloutAnswers {
  /** pods of a revision that still exist (Terminating ones included) */
  pods?: Record<string, PodFacts[]>;
  /** schema versions seen in the queue recently (jobfleet_schema_version_seen_total) */
  seenVersions?: number[] | undefined;
  /** messages in the work queue and its retry queues */
  queued?: number | undefined;
  /** a revision's spec, from its ControllerRevision (undefined: there is none) */
  revisionSpecs?: Record<string, Record<string, unknown> | undefined>;
  /** the worker pods of a Cohort rollout, with their counters (../cohort/figures.ts) */
  cohortSamples?: PodSample[];
}

export interface RolloutInput {
  raw: KubeObject;
  spec: JobWorkerSpec;
  previous: JobWorkerStatus | undefined;
  deployment: KubeObject | undefined;
  now: Date;
  ageSeconds: number | undefined;
  answers: RolloutAnswers;
  /** the Cohort strategy's Deployment, when one exists */
  cohortDeployment?: KubeObject;
  /** the fleet's replicas, from the scaler */
  total: number;
  /** per cohort pod: its counters at the last read */
  cohortMemory?: FiguresMemory;
  /** the work queue's type as the broker reports it; undefined when not read */
  queueType?: string;
}

export interface RolloutPlan {
  history: HistoryEntry[];
  /** revisions dropped from history: their ControllerRevisions go too */
  evicted: string[];
  /** the revision the spec describes */
  specRevision: string;
  /** the revision being moved to (status.updateRevision) */
  targetRevision: string;
  /** the template to apply: this revision, from this spec; the live template when undefined */
  deployRevision: string;
  deploySpec: JobWorkerSpec | undefined;
  scaleToZero: boolean;
  /** the stable Deployment's replicas, when a Cohort rollout sets them */
  mainReplicas?: number;
  /** the cohort Deployment to apply: this revision (from `spec`; its live template when undefined), replicas and prefetch */
  cohort?: { revision: string; spec?: JobWorkerSpec; replicas: number; prefetch: number };
  /** the cohort Deployment exists and is no longer needed */
  removeCohort: boolean;
  cohortMemory?: FiguresMemory;
  status: RolloutStatus;
  requeueMs?: number;
  events: PlanEvent[];
  blocked: boolean;
}

function contractOf(e: HistoryEntry | undefined): Contract | undefined {
  if (!e) return undefined;
  if (e.keyRule && e.schemaVersions)
    return { keyRule: e.keyRule, schemaVersions: e.schemaVersions };
  const p = e.spec ? parseSpec(e.spec) : undefined;
  return p?.ok
    ? { keyRule: p.spec.contract.idempotencyKey, schemaVersions: p.spec.contract.schemaVersions }
    : undefined;
}

/**
 * The spec of a revision other than the spec's own: from an entry written by
 * an earlier version, else from its ControllerRevision (asked for once).
 * Undefined when neither has it, or when what is recorded does not carry the
 * contract history says the revision has (a record left by another object of
 * the same name): such a spec is never deployed under the revision's label.
 */
export function recordedSpec(
  revision: string,
  history: readonly HistoryEntry[] | undefined,
  answers: RolloutAnswers,
): JobWorkerSpec | undefined | { need: RolloutNeed } {
  const entry = history?.find((h) => h.revision === revision);
  const asked = !!answers.revisionSpecs && revision in answers.revisionSpecs;
  if (!entry?.spec && !asked) return { need: { kind: 'revisionSpec', revision } };
  const raw = entry?.spec ?? answers.revisionSpecs?.[revision];
  const p = raw ? parseSpec(raw) : undefined;
  if (!p?.ok) return undefined;
  const c = p.spec.contract;
  const sameContract =
    !entry?.keyRule ||
    (c.idempotencyKey === entry.keyRule &&
      [...c.schemaVersions].sort().join() === [...(entry.schemaVersions ?? [])].sort().join());
  return sameContract ? p.spec : undefined;
}

/** The Deployment runs `revision` on every replica it wants, all ready. */
function rolledOutAt(d: KubeObject | undefined, revision: string): boolean {
  if (!d || revisionOf(d) !== revision) return false;
  const want = (d.spec as { replicas?: number }).replicas ?? 0;
  const st = (d.status ?? {}) as Record<string, number | undefined>;
  return (
    (st.observedGeneration ?? 0) >= (d.metadata.generation ?? 0) &&
    (st.updatedReplicas ?? 0) >= want &&
    (st.readyReplicas ?? 0) >= want &&
    (st.replicas ?? 0) === want
  );
}

/** Every pod the Deployment has runs `revision` (ready or not): no older one is left. */
function onlyRevision(d: KubeObject | undefined, revision: string): boolean {
  if (!d || revisionOf(d) !== revision) return false;
  const st = (d.status ?? {}) as Record<string, number | undefined>;
  return (
    (st.observedGeneration ?? 0) >= (d.metadata.generation ?? 0) &&
    (st.updatedReplicas ?? 0) >= (st.replicas ?? 0)
  );
}

/**
 * A rollout reconcile as phases, each a function of explicit records:
 * revisions → aim (the automatic-rollback analysis) → gate → strategy (a
 * Cohort rollout, or the fixed-order rollback step) → outcome → template.
 * A phase that needs an observation it was not given returns `need`.
 */
export function planRollout(i: RolloutInput): RolloutPlan | { need: RolloutNeed } {
  const revs = revisionsPhase(i);
  const aim = aimPhase(i, revs);
  if ('need' in aim) return aim;
  const gated = gatePhase(i, revs, aim);
  if ('need' in gated) return gated;
  const cohort = cohortTurn(i, revs, gated);
  if (cohort) return cohortPhase(i, revs, gated, cohort);
  const stepped = stepPhase(i, revs, gated);
  if ('need' in stepped) return stepped;
  const outcome = outcomePhase(i, gated, stepped);
  const template = templatePhase(i, revs, gated.blocked, stepped.step.deploy.revision);
  if ('need' in template) return template;
  return {
    history: revs.history,
    evicted: revs.evicted,
    specRevision: revs.specRevision,
    targetRevision: stepped.state?.to ?? gated.aim.target,
    deployRevision: template.deployRevision,
    deploySpec: template.deploySpec,
    scaleToZero: stepped.step.deploy.scaleToZero,
    status: {
      rollout: stepped.state,
      lastRollback: outcome.lastRollback,
      analysis: stepped.analysis,
      abortedRevision: gated.aim.aborted,
      lastCohort: i.previous?.lastCohort,
      conditions: [...gated.conditions, ...stepped.step.conditions, ...template.conditions],
      progressing: outcome.progressing,
      degraded: outcome.degraded,
      rollingBack: !!stepped.state,
    },
    // a cohort Deployment without a cohort (a delete that failed, a status lost): gone
    removeCohort: !!i.cohortDeployment,
    requeueMs: stepped.step.requeueMs ?? (stepped.analysis ? 5000 : undefined),
    events: [
      ...gated.events,
      ...(stepped.step.event ? [stepped.step.event] : []),
      ...outcome.events,
      ...template.events,
    ],
    blocked: gated.blocked || template.blocked,
  };
}

/** Phase 1: the revision the spec describes, numbered into history. */
interface Revisions {
  history: HistoryEntry[];
  evicted: string[];
  specRevision: string;
  /** the revision the Deployment's template carries */
  deployed: string | undefined;
}

function revisionsPhase(i: RolloutInput): Revisions {
  const { raw, spec, previous } = i;
  const jw = { ...raw, spec } as unknown as Parameters<typeof templateHash>[0];
  // No status yet (a new JobWorker's first is held, or an operator stopped before writing
  // it): the revision its Deployment runs is the history an edit is numbered after.
  const seeded = previous?.history ?? [deployedRevision(i.deployment)].filter((h) => !!h);
  const assigned = assignRevision(
    seeded,
    {
      templateHash: templateHash(jw),
      image: spec.image,
      contractHash: contractHash(spec),
      keyRule: spec.contract.idempotencyKey,
      schemaVersions: spec.contract.schemaVersions,
    },
    i.now,
    spec.rollout.historyLimit,
    [
      revisionOf(i.deployment),
      previous?.currentRevision,
      previous?.updateRevision,
      previous?.rollout?.from,
      previous?.rollout?.to,
    ],
  );
  return {
    history: assigned.history,
    evicted: assigned.evicted,
    specRevision: assigned.revision,
    deployed: revisionOf(i.deployment),
  };
}

/** Phase 2: which revision to move to, and why; an automatic rollback's analysis may turn it back. */
interface Aim {
  target: string;
  trigger: Trigger;
  triggerReason?: string;
  /** a revision rolled back automatically: it stays off until the spec changes */
  aborted?: string;
  /** the analysis watching the target, kept in status */
  analysis?: AnalysisState;
  /** the analysis that triggered a rollback: it goes on if the gate refuses the way back */
  watched?: AnalysisState;
}

function aimPhase(i: RolloutInput, revs: Revisions): Aim | { need: RolloutNeed } {
  const { spec, previous } = i;
  const { specRevision, deployed } = revs;
  const state = previous?.rollout;
  const aborted = previous?.abortedRevision === specRevision ? previous.abortedRevision : undefined;
  // An aborted revision's stand-in is what its rollback restored, or what runs
  // (a cohort's abort leaves the stable revision running; an older rollback is not this one).
  const target =
    state?.to ??
    (aborted
      ? previous?.lastRollback?.from === aborted
        ? previous.lastRollback.to
        : deployed
      : specRevision) ??
    specRevision;
  const aim: Aim = { target, trigger: 'SpecReverted', aborted };
  const stable =
    previous?.analysis?.revision === target
      ? previous.analysis.stable
      : previous?.currentRevision !== target
        ? previous?.currentRevision
        : undefined;
  const watching =
    !state &&
    !aborted &&
    spec.rollout.strategy !== 'Cohort' &&
    !previous?.cohort &&
    target === specRevision &&
    stable &&
    Number(target) > Number(stable);
  if (!watching) return aim;
  const pods = i.answers.pods?.[target];
  if (!pods) return { need: { kind: 'pods', revision: target } };
  // An analysis not yet anchored (restarted on resume from a pause) waits
  // for a consumer: the age rising while pods start is not the revision's.
  const ready = Number(
    (i.deployment?.status as { readyReplicas?: number } | undefined)?.readyReplicas ?? 0,
  );
  const unanchored =
    previous?.analysis?.revision === target &&
    previous.analysis.ageAtStart === undefined &&
    ready === 0;
  const result = analyze({
    now: i.now,
    state: previous?.analysis,
    autoRollback: spec.rollout.autoRollback,
    analysisSeconds: spec.rollout.analysisSeconds,
    objectiveSeconds: spec.scaling.targetOldestAgeSeconds,
    revision: target,
    stable,
    ageSeconds: unanchored ? undefined : i.ageSeconds,
    crashLooping: pods.some((p) => p.restarts >= CRASH_LOOP_RESTARTS),
  });
  if (!result.rollback) return { ...aim, analysis: result.state };
  return {
    target: result.rollback.to,
    trigger: 'AutoRollback',
    triggerReason: result.rollback.reason,
    aborted: target,
    analysis: result.state,
    // Kept in case the gate refuses the way back: the analysis then goes on
    // saying so (a lasting RolloutBlocked) instead of ending with the refusal.
    watched:
      previous?.analysis?.revision === target
        ? previous.analysis
        : {
            revision: target,
            stable,
            startedAt: iso(i.now),
            ...(i.ageSeconds !== undefined && { ageAtStart: i.ageSeconds }),
          },
  };
}

/** Phase 3: the gate — nothing incompatible starts consuming, forward or back. */
interface Gated {
  /** the aim, held at the running revision when the gate refuses */
  aim: Aim;
  blocked: boolean;
  /** the refusal's message, when blocked */
  refusal?: string;
  /** a key-rule change the override let through (it never runs as a cohort) */
  keyRuleOverridden: boolean;
  conditions: ConditionInput[];
  events: PlanEvent[];
}

function gatePhase(i: RolloutInput, revs: Revisions, aim: Aim): Gated | { need: RolloutNeed } {
  const { raw, previous } = i;
  const a = i.answers;
  const open: Gated = { aim, blocked: false, keyRuleOverridden: false, conditions: [], events: [] };
  // A Deployment deleted by hand is recreated at the revision that ran, not
  // at whatever the spec says now: the gate compares against that one.
  const runningRevision = revs.deployed ?? previous?.currentRevision;
  if (previous?.rollout || !runningRevision || aim.target === runningRevision) return open;
  const entry = (rev: string) => revs.history.find((h) => h.revision === rev);
  const refuse = (
    reason: ReasonOf<'RolloutBlocked'>,
    message: string,
    held: Partial<Aim>,
  ): Gated => ({
    aim: { ...aim, target: runningRevision, ...held },
    blocked: true,
    refusal: message,
    keyRuleOverridden: false,
    conditions: [{ type: 'RolloutBlocked', status: 'True', reason, message }],
    events: [{ type: 'Warning', reason: 'RolloutBlocked', message }],
  });
  // What runs is read from the live Deployment, not from our own records.
  const running = deployedContract(i.deployment) ?? contractOf(entry(runningRevision));
  const candidate = contractOf(entry(aim.target));
  if (!running || !candidate)
    // A gate that cannot compare must not pass: nothing changes until it can.
    return refuse(
      'ContractUnknown',
      `Revision ${aim.target} cannot be checked against revision ${runningRevision}: the ${running ? `contract of revision ${aim.target}` : `contract revision ${runningRevision} runs`} is unknown (not in the Deployment's pod template nor in status.history). The running revision stays; re-apply its spec, or set the change again so that a new revision records its contract.`,
      { analysis: undefined },
    );
  const override = raw.metadata.annotations?.[ALLOW_KEY_RULE_CHANGE];
  if (!('seenVersions' in a)) return { need: { kind: 'seenVersions' } };
  const keyRuleChanges = running.keyRule !== candidate.keyRule;
  if (override && keyRuleChanges && !('queued' in a)) return { need: { kind: 'queued' } };
  const g = compatible(i, revs, aim.target, runningRevision, running, candidate);
  if (!g.ok) {
    const auto = aim.trigger === 'AutoRollback';
    return refuse(
      g.reason,
      auto
        ? `The automatic rollback to revision ${aim.target} (${aim.triggerReason}) is refused: ${g.message} Revision ${runningRevision} keeps running; fix it forward.`
        : g.message,
      {
        aborted: previous?.abortedRevision === revs.specRevision ? aim.aborted : undefined,
        analysis: auto ? aim.watched : undefined,
      },
    );
  }
  if (!g.overrideUsed) return open;
  const who = managerOf(raw, ['metadata', 'annotations', ALLOW_KEY_RULE_CHANGE]);
  return {
    ...open,
    keyRuleOverridden: true,
    events: [
      {
        type: 'Warning',
        reason: 'KeyRuleChangeAllowed',
        message: `The idempotency-key rule changes from "${running.keyRule}" to "${candidate.keyRule}" with the queues empty, allowed by ${who ?? 'an unknown manager'}: "${g.overrideUsed}".`,
      },
    ],
  };
}

/**
 * The queue's type (for the spec's own revision: an earlier one ran on this
 * queue), then the contract (./gate.ts's gate).
 */
function compatible(
  i: RolloutInput,
  revs: Revisions,
  target: string,
  runningRevision: string,
  running: Contract,
  candidate: Contract,
): GateResult {
  const { spec } = i;
  const typeGate =
    target === revs.specRevision
      ? queueTypeGate({
          candidateRevision: target,
          queue: spec.broker.queue,
          wanted: spec.broker.queueType,
          actual: i.queueType,
        })
      : { ok: true as const };
  if (!typeGate.ok) return typeGate;
  const override = i.raw.metadata.annotations?.[ALLOW_KEY_RULE_CHANGE];
  return gate({
    kind: Number(target) < Number(runningRevision) ? 'rollback' : 'rollout',
    runningRevision,
    running,
    candidateRevision: target,
    candidate,
    producerVersions: spec.contract.producerVersions,
    observedVersions: i.answers.seenVersions,
    override,
    queuedMessages:
      override && running.keyRule !== candidate.keyRule ? i.answers.queued : undefined,
  });
}

/**
 * The Cohort strategy (../cohort/steps.ts) takes this reconcile: a change going
 * forward starts as a cohort beside the revision that runs — not a key-rule
 * change the override let through, which would run both rules side by side
 * for a whole step (that takes the Fleet path) — and one in progress goes on
 * (or, no longer wanted, is drained). Undefined: the Fleet path.
 */
function cohortTurn(
  i: RolloutInput,
  revs: Revisions,
  g: Gated,
): { deployed: string; wanted: boolean } | undefined {
  const deployed = revs.deployed;
  if (i.previous?.rollout || !deployed) return undefined;
  const { target } = g.aim;
  const wanted =
    i.spec.rollout.strategy === 'Cohort' &&
    !g.blocked &&
    !g.keyRuleOverridden &&
    target === revs.specRevision &&
    target !== deployed &&
    Number(target) > Number(deployed);
  return wanted || i.previous?.cohort ? { deployed, wanted } : undefined;
}

/** A cohort in progress goes on; one no longer wanted (the spec moved, the strategy changed, the gate refuses it) is drained. */
function cohortPhase(
  i: RolloutInput,
  revs: Revisions,
  g: Gated,
  turn: { deployed: string; wanted: boolean },
): RolloutPlan | { need: RolloutNeed } {
  const c = cohortPlan(i, {
    ...(!turn.wanted && {
      unwanted: g.refusal
        ? { check: 'Blocked' as const, reason: g.refusal }
        : {
            check: 'SpecChanged' as const,
            reason:
              i.spec.rollout.strategy !== 'Cohort'
                ? 'the rollout strategy is no longer Cohort'
                : `the spec now asks for revision ${revs.specRevision}`,
          },
    }),
    target: g.aim.target,
    deployed: turn.deployed,
    specRevision: revs.specRevision,
  });
  if ('need' in c) return c;
  return {
    ...c,
    history: revs.history,
    evicted: revs.evicted,
    specRevision: revs.specRevision,
    events: [...g.events, ...c.events],
    blocked: g.blocked,
    status: {
      ...c.status,
      lastRollback: i.previous?.lastRollback,
      conditions: [...g.conditions, ...c.status.conditions],
    },
  };
}

/** Phase 4 (the Fleet path): the fixed-order rollback's step (./gate.ts). */
interface Stepped {
  step: StepOutput;
  /** the rollback in progress after this step */
  state: RolloutState | undefined;
  /** the analysis, which a rollback in progress ends */
  analysis: AnalysisState | undefined;
}

function stepPhase(i: RolloutInput, revs: Revisions, g: Gated): Stepped | { need: RolloutNeed } {
  const { spec } = i;
  const state = i.previous?.rollout;
  const { target } = g.aim;
  const { deployed } = revs;
  let oldPods: number | undefined;
  if (state?.phase === 'Draining') {
    const pods = i.answers.pods?.[state.from];
    if (!pods) return { need: { kind: 'pods', revision: state.from } };
    oldPods = pods.length;
  }
  const step = rollbackStep({
    now: i.now,
    state,
    deployedRevision: deployed,
    targetRevision: target,
    isRollback: !state && !!deployed && target !== deployed && Number(target) < Number(deployed),
    trigger: g.aim.trigger,
    triggerReason: g.aim.triggerReason,
    drainSeconds: spec.shutdown.drainDeadlineSeconds + TERMINATION_MARGIN_SECONDS,
    verifySeconds: spec.rollout.verifySeconds,
    objectiveSeconds: spec.scaling.targetOldestAgeSeconds,
    oldPods,
    restored: state?.phase === 'Restoring' ? rolledOutAt(i.deployment, state.to) : false,
    ageSeconds: i.ageSeconds,
  });
  return { step, state: step.state, analysis: step.state ? undefined : g.aim.analysis };
}

/** Phase 5: how the last rollback ended, and what Progressing and Degraded say of it. */
interface Outcome {
  lastRollback?: LastRollback;
  progressing?: ConditionInput;
  degraded?: ConditionInput;
  events: PlanEvent[];
}

function outcomePhase(i: RolloutInput, g: Gated, s: Stepped): Outcome {
  const previous = i.previous;
  const { aborted, target } = g.aim;
  const lastRollback =
    s.step.finished ??
    (previous?.lastRollback && previous.lastRollback.to === target && !s.state
      ? previous.lastRollback
      : undefined);
  const events: PlanEvent[] =
    aborted && !s.state && s.step.finished?.trigger === 'AutoRollback'
      ? [
          {
            type: 'Warning',
            reason: 'RevisionAborted',
            message: `Revision ${aborted} stays off after its automatic rollback: change the spec (a new revision) to roll forward again.`,
          },
        ]
      : [];
  const cohortDegraded = cohortAborted(previous?.lastCohort, aborted);
  if (s.state)
    return {
      lastRollback,
      progressing: {
        type: 'Progressing',
        status: 'True',
        reason: 'RollingBack',
        message: `Rolling back from revision ${s.state.from} to ${s.state.to}: ${s.state.phase.toLowerCase()}.`,
      },
      degraded: cohortDegraded,
      events,
    };
  // Once said, it stays said while only the replica count moves (a scale-up's pods not yet ready).
  const said = previous?.conditions?.some(
    (c) => c.type === 'Progressing' && c.reason === 'RollbackComplete',
  );
  const complete =
    !!lastRollback &&
    (rolledOutAt(i.deployment, lastRollback.to) ||
      (said && onlyRevision(i.deployment, lastRollback.to)));
  if (!lastRollback || !complete) return { lastRollback, degraded: cohortDegraded, events };
  return {
    lastRollback,
    progressing: {
      type: 'Progressing',
      status: 'False',
      reason: 'RollbackComplete',
      message: lastRollback.message,
    },
    degraded:
      lastRollback.result === 'NotRecovering'
        ? {
            type: 'Degraded',
            status: 'True',
            reason: 'RollbackNotRecovering',
            message: lastRollback.message,
          }
        : cohortDegraded,
    events,
  };
}

/**
 * Phase 6: the template to apply: the spec's own; the live one, untouched,
 * when the revision to run is the one running; else the revision's recorded
 * spec. A revision whose spec is not recorded is never started from another spec.
 */
interface Template {
  deployRevision: string;
  deploySpec: JobWorkerSpec | undefined;
  blocked: boolean;
  conditions: ConditionInput[];
  events: PlanEvent[];
}

function templatePhase(
  i: RolloutInput,
  revs: Revisions,
  alreadyBlocked: boolean,
  deployRevision: string,
): Template | { need: RolloutNeed } {
  const none = { blocked: false, conditions: [], events: [] };
  if (deployRevision === revs.specRevision) return { deployRevision, deploySpec: i.spec, ...none };
  if (deployRevision === revs.deployed) return { deployRevision, deploySpec: undefined, ...none };
  const recorded = recordedSpec(deployRevision, revs.history, i.answers);
  if (recorded && 'need' in recorded) return recorded;
  if (recorded || alreadyBlocked) return { deployRevision, deploySpec: recorded, ...none };
  const message = `Revision ${deployRevision}'s spec is not recorded (no ControllerRevision ${revisionRecordName(i.raw.metadata.name, deployRevision)} of this JobWorker with its contract), so it cannot be started; ${revs.deployed ? `revision ${revs.deployed} keeps running` : 'nothing is started'}. Re-apply revision ${deployRevision}'s spec to go back to it.`;
  return {
    deployRevision,
    deploySpec: undefined,
    blocked: true,
    conditions: [
      { type: 'RolloutBlocked', status: 'True', reason: 'RevisionSpecUnknown', message },
    ],
    events: [{ type: 'Warning', reason: 'RolloutBlocked', message }],
  };
}

type CohortPlan = Omit<RolloutPlan, 'history' | 'evicted' | 'specRevision' | 'blocked'>;

interface CohortTarget {
  unwanted?: { check: 'SpecChanged' | 'Blocked'; reason: string };
  target: string;
  deployed: string;
  specRevision: string;
}

/** What a cohort's phase needs read: its pods while it drains, its samples while it is judged, the spec it promotes. */
interface CohortReads {
  cohortPods: number | undefined;
  cohortRevision: string;
  promotedSpec: JobWorkerSpec | undefined;
}

const deploymentStatus = (d: KubeObject | undefined) =>
  (d?.status ?? {}) as { readyReplicas?: number; replicas?: number };

function cohortReads(i: RolloutInput, o: CohortTarget): CohortReads | { need: RolloutNeed } {
  const a = i.answers;
  const running = i.previous?.cohort;
  let cohortPods: number | undefined;
  if (running?.phase === 'Aborting') {
    const pods = a.pods?.[running.revision];
    if (!pods) return { need: { kind: 'pods', revision: running.revision } };
    cohortPods = pods.length;
  } else if (running?.phase === 'Promoting')
    cohortPods = deploymentStatus(i.cohortDeployment).replicas ?? 0;
  const analyzing = running && (running.phase === 'Analyzing' || running.phase === 'Waiting');
  if (analyzing && !a.cohortSamples) return { need: { kind: 'cohortSamples' } };
  // The stable Deployment moves to the cohort's revision at the end: from the
  // spec, or (the spec has moved on) from that revision's recorded spec.
  const cohortRevision = running?.revision ?? o.target;
  if (cohortRevision === o.specRevision || running?.phase !== 'Promoting')
    return { cohortPods, cohortRevision, promotedSpec: i.spec };
  const recorded = recordedSpec(cohortRevision, i.previous?.history, a);
  if (recorded && 'need' in recorded) return recorded;
  return { cohortPods, cohortRevision, promotedSpec: recorded };
}

/** A Cohort rollout's reconcile: the reads its phase needs, then ../cohort/steps.ts decides. */
function cohortPlan(i: RolloutInput, o: CohortTarget): CohortPlan | { need: RolloutNeed } {
  const reads = cohortReads(i, o);
  if ('need' in reads) return reads;
  const { spec, previous } = i;
  const running = previous?.cohort;
  const status = deploymentStatus;
  const { cohortPods, promotedSpec } = reads;
  const out: CohortOutput = cohortStep({
    now: i.now,
    state: running,
    revision: o.target,
    stable: running?.stable ?? o.deployed,
    ...(o.unwanted && { unwanted: o.unwanted }),
    canPromote: promotedSpec !== undefined,
    steps: spec.rollout.steps ?? DEFAULT_STEPS,
    checks: checksOf(spec),
    analysisSeconds: spec.rollout.analysisSeconds,
    objectiveSeconds: spec.scaling.targetOldestAgeSeconds,
    prefetch: spec.broker.prefetch,
    drainSeconds: spec.shutdown.drainDeadlineSeconds + TERMINATION_MARGIN_SECONDS,
    total: i.total,
    cohortReady: status(i.cohortDeployment).readyReplicas ?? 0,
    cohortPods,
    stableReady: status(i.deployment).readyReplicas ?? 0,
    promoted: running ? onlyRevision(i.deployment, running.revision) : false,
    samples: i.answers.cohortSamples,
    memory: i.cohortMemory,
    ageSeconds: i.ageSeconds,
    command: parseCommand(i.raw.metadata.annotations?.[ANNOTATION_COHORT_COMMAND]),
  });
  return cohortPlanOf(i, o, reads, out);
}

/** What the cohort's step decided, as the rollout's plan. */
function cohortPlanOf(
  i: RolloutInput,
  o: CohortTarget,
  reads: CohortReads,
  out: CohortOutput,
): CohortPlan {
  const { spec, previous } = i;
  const { cohortRevision, promotedSpec } = reads;
  const s = out.state;
  const f = out.finished;
  const promoted = out.stable.promoted && promotedSpec !== undefined;
  // Aborted by a check (or by hand), the revision stays off until the spec
  // changes; one the spec or the gate no longer wants needs no such mark.
  const aborted =
    f?.result === 'Aborted' && !['SpecChanged', 'Blocked', 'Unrecorded'].includes(f.check ?? '')
      ? f.revision
      : undefined;
  return {
    targetRevision: s ? s.revision : f?.result === 'Promoted' ? f.revision : o.deployed,
    deployRevision: promoted ? cohortRevision : o.deployed,
    deploySpec: promoted ? promotedSpec : undefined,
    scaleToZero: false,
    mainReplicas: out.stable.replicas,
    ...(out.cohort &&
      s && {
        cohort: {
          revision: s.revision,
          // The step's template while it grows; the live one while it drains
          // or gives way (a template change would roll its pods, with a surge).
          ...(s.revision === o.specRevision &&
            (s.phase === 'Analyzing' || s.phase === 'Waiting') && { spec }),
          replicas: out.cohort.replicas,
          prefetch: out.cohort.prefetch,
        },
      }),
    removeCohort: !out.cohort && !!i.cohortDeployment,
    ...(out.memory && { cohortMemory: out.memory }),
    status: {
      abortedRevision: aborted,
      cohort: s,
      lastCohort: f ?? previous?.lastCohort,
      conditions: [],
      progressing: out.progressing,
      // in the very status that records the abort, not one reconcile later;
      // not when the spec moved on meanwhile (it no longer asks for that revision)
      degraded: aborted === o.specRevision ? cohortAborted(f, aborted) : undefined,
      rollingBack: false,
    },
    requeueMs: out.requeueMs,
    events: out.events,
  };
}

/** A cohort aborted by a check: the revision stays off, and says why, until the spec changes. */
function cohortAborted(
  last: JobWorkerStatus['lastCohort'],
  aborted: string | undefined,
): ConditionInput | undefined {
  if (!aborted || last?.result !== 'Aborted' || last.revision !== aborted) return undefined;
  if (last.check === 'Manual') return undefined;
  return {
    type: 'Degraded',
    status: 'True',
    reason: 'CohortAborted',
    message: `${last.message} Change the spec (a new revision) to roll forward again.`,
  };
}
