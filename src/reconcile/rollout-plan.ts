// The rollout half of a JobWorker reconcile, pure: from what was observed
// (the JobWorker, its Deployment, the status it wrote last) to which
// revision's template to apply, at what replicas, and what to record in
// status — through the gate, the automatic-rollback analysis and the
// fixed-order rollback of ./rollout.ts. A few observations cost a call and
// matter only in some states (a revision's pods, the schema versions seen in
// the queue, the queued total for an override): when it needs one it has not
// been given, it says so (`need`), and the caller reads it and plans again.
import { checksOf, parseSpec, type JobWorkerSpec, type JobWorkerStatus } from '../api/jobworker.js';
import type { KubeObject } from '../kube/client.js';
import type { ConditionInput } from './conditions.js';
import {
  TERMINATION_MARGIN_SECONDS,
  revisionOf,
  revisionRecordName,
  contractHash,
  deployedContract,
  templateHash,
} from './desired.js';
import { managerOf } from './managed-fields.js';
import {
  ANNOTATION_COHORT_COMMAND,
  cohortStep,
  DEFAULT_STEPS,
  parseCommand,
  type CohortOutput,
} from './cohort.js';
import type { FiguresMemory, PodSample } from './cohort-figures.js';
import { assignRevision, type HistoryEntry } from './revisions.js';
import {
  ALLOW_KEY_RULE_CHANGE,
  analyze,
  gate,
  iso,
  queueTypeGate,
  rollbackStep,
  type AnalysisState,
  type Contract,
  type RolloutStatus,
  type Trigger,
} from './rollout.js';

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
  /** the worker pods of a Cohort rollout, with their counters (./cohort-figures.ts) */
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
  events: Array<{ type: 'Normal' | 'Warning'; reason: string; message: string }>;
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

export function planRollout(i: RolloutInput): RolloutPlan | { need: RolloutNeed } {
  const { raw, spec, previous, now } = i;
  const a = i.answers;
  const events: RolloutPlan['events'] = [];
  const jw = { ...raw, spec } as unknown as Parameters<typeof templateHash>[0];
  const assigned = assignRevision(
    previous?.history ?? [],
    {
      templateHash: templateHash(jw),
      image: spec.image,
      contractHash: contractHash(spec),
      keyRule: spec.contract.idempotencyKey,
      schemaVersions: spec.contract.schemaVersions,
    },
    now,
    spec.rollout.historyLimit,
    [
      revisionOf(i.deployment),
      previous?.currentRevision,
      previous?.updateRevision,
      previous?.rollout?.from,
      previous?.rollout?.to,
    ],
  );
  const history = assigned.history;
  const specRevision = assigned.revision;
  const entry = (rev: string) => history.find((h) => h.revision === rev);
  const deployed = revisionOf(i.deployment);
  let state = previous?.rollout;
  // A revision rolled back automatically stays off until the spec changes.
  let aborted = previous?.abortedRevision === specRevision ? previous.abortedRevision : undefined;

  // An aborted revision's stand-in is what its rollback restored, or what runs
  // (a cohort's abort leaves the stable revision running; an older rollback is not this one).
  let target =
    state?.to ??
    (aborted
      ? previous?.lastRollback?.from === aborted
        ? previous.lastRollback.to
        : deployed
      : specRevision);
  target ??= specRevision;
  let trigger: Trigger = 'SpecReverted';
  let triggerReason: string | undefined;

  // Automatic rollback: watch a new revision for rising age (or crash loops).
  let analysis: AnalysisState | undefined;
  let watched: AnalysisState | undefined;
  const stable =
    previous?.analysis?.revision === target
      ? previous.analysis.stable
      : previous?.currentRevision !== target
        ? previous?.currentRevision
        : undefined;
  const cohortStrategy = spec.rollout.strategy === 'Cohort';
  if (
    !state &&
    !aborted &&
    !cohortStrategy &&
    !previous?.cohort &&
    target === specRevision &&
    stable &&
    Number(target) > Number(stable)
  ) {
    const pods = a.pods?.[target];
    if (!pods) return { need: { kind: 'pods', revision: target } };
    const crashLooping = pods.some((p) => p.restarts >= CRASH_LOOP_RESTARTS);
    // An analysis not yet anchored (restarted on resume from a pause) waits
    // for a consumer: the age rising while pods start is not the revision's.
    const ready = Number(
      (i.deployment?.status as { readyReplicas?: number } | undefined)?.readyReplicas ?? 0,
    );
    const unanchored =
      previous?.analysis?.revision === target &&
      previous.analysis.ageAtStart === undefined &&
      ready === 0;
    const analysis_ = analyze({
      now,
      state: previous?.analysis,
      autoRollback: spec.rollout.autoRollback,
      analysisSeconds: spec.rollout.analysisSeconds,
      objectiveSeconds: spec.scaling.targetOldestAgeSeconds,
      revision: target,
      stable,
      ageSeconds: unanchored ? undefined : i.ageSeconds,
      crashLooping,
    });
    analysis = analysis_.state;
    if (analysis_.rollback) {
      // Kept in case the gate refuses the way back: the analysis then goes on
      // saying so (a lasting RolloutBlocked) instead of ending with the refusal.
      watched =
        previous?.analysis?.revision === target
          ? previous.analysis
          : {
              revision: target,
              stable,
              startedAt: iso(now),
              ...(i.ageSeconds !== undefined && { ageAtStart: i.ageSeconds }),
            };
      aborted = target;
      target = analysis_.rollback.to;
      trigger = 'AutoRollback';
      triggerReason = analysis_.rollback.reason;
    }
  }

  // The gate: nothing incompatible starts consuming, forward or back.
  let blocked = false;
  let gateRefusal: string | undefined;
  let keyRuleOverridden = false;
  const conditions: ConditionInput[] = [];
  // A Deployment deleted by hand is recreated at the revision that ran, not
  // at whatever the spec says now: the gate compares against that one.
  const runningRevision = deployed ?? previous?.currentRevision;
  if (!state && runningRevision && target !== runningRevision) {
    // What runs is read from the live Deployment, not from our own records.
    const running = deployedContract(i.deployment) ?? contractOf(entry(runningRevision));
    const candidate = contractOf(entry(target));
    if (!running || !candidate) {
      // A gate that cannot compare must not pass: nothing changes until it can.
      blocked = true;
      const message = `Revision ${target} cannot be checked against revision ${runningRevision}: the ${running ? `contract of revision ${target}` : `contract revision ${runningRevision} runs`} is unknown (not in the Deployment's pod template nor in status.history). The running revision stays; re-apply its spec, or set the change again so that a new revision records its contract.`;
      conditions.push({
        type: 'RolloutBlocked',
        status: 'True',
        reason: 'ContractUnknown',
        message,
      });
      events.push({ type: 'Warning', reason: 'RolloutBlocked', message });
      gateRefusal = message;
      target = runningRevision;
      analysis = undefined;
    } else {
      const override = raw.metadata.annotations?.[ALLOW_KEY_RULE_CHANGE];
      if (!('seenVersions' in a)) return { need: { kind: 'seenVersions' } };
      const keyRuleChanges = running.keyRule !== candidate.keyRule;
      if (override && keyRuleChanges && !('queued' in a)) return { need: { kind: 'queued' } };
      // Only the spec's own revision is checked: an earlier one ran on this queue.
      const typeGate =
        target === specRevision
          ? queueTypeGate({
              candidateRevision: target,
              queue: spec.broker.queue,
              wanted: spec.broker.queueType,
              actual: i.queueType,
            })
          : { ok: true as const };
      const g = !typeGate.ok
        ? typeGate
        : gate({
            kind: Number(target) < Number(runningRevision) ? 'rollback' : 'rollout',
            runningRevision,
            running,
            candidateRevision: target,
            candidate,
            producerVersions: spec.contract.producerVersions,
            observedVersions: a.seenVersions,
            override,
            queuedMessages: override && keyRuleChanges ? a.queued : undefined,
          });
      if (!g.ok) {
        blocked = true;
        const message =
          trigger === 'AutoRollback'
            ? `The automatic rollback to revision ${target} (${triggerReason}) is refused: ${g.message} Revision ${runningRevision} keeps running; fix it forward.`
            : g.message;
        conditions.push({ type: 'RolloutBlocked', status: 'True', reason: g.reason, message });
        events.push({ type: 'Warning', reason: 'RolloutBlocked', message });
        gateRefusal = message;
        target = runningRevision;
        aborted = previous?.abortedRevision === specRevision ? aborted : undefined;
        analysis = trigger === 'AutoRollback' ? watched : undefined;
      } else if (g.overrideUsed) {
        keyRuleOverridden = true;
        const who = managerOf(raw, ['metadata', 'annotations', ALLOW_KEY_RULE_CHANGE]);
        events.push({
          type: 'Warning',
          reason: 'KeyRuleChangeAllowed',
          message: `The idempotency-key rule changes from "${running.keyRule}" to "${candidate.keyRule}" with the queues empty, allowed by ${who ?? 'an unknown manager'}: "${g.overrideUsed}".`,
        });
      }
    }
  }

  // The Cohort strategy (./cohort.ts): a change going forward starts as a
  // cohort beside the revision that runs — not a key-rule change the override
  // let through, which would run both rules side by side for a whole step
  // (that takes the Fleet path). One in progress goes on, or, no longer
  // wanted (the spec moved, the strategy changed, the gate now refuses it),
  // is drained.
  const forward =
    !state &&
    !blocked &&
    !keyRuleOverridden &&
    !!deployed &&
    target === specRevision &&
    target !== deployed &&
    Number(target) > Number(deployed);
  if (!state && deployed && (previous?.cohort || (cohortStrategy && forward))) {
    const c = cohortPlan(i, {
      ...(!(cohortStrategy && forward) && {
        unwanted: gateRefusal
          ? { check: 'Blocked' as const, reason: gateRefusal }
          : {
              check: 'SpecChanged' as const,
              reason: !cohortStrategy
                ? 'the rollout strategy is no longer Cohort'
                : `the spec now asks for revision ${specRevision}`,
            },
      }),
      target,
      deployed,
      specRevision,
    });
    if ('need' in c) return c;
    return {
      ...c,
      history,
      evicted: assigned.evicted,
      specRevision,
      events: [...events, ...c.events],
      blocked,
      status: {
        ...c.status,
        lastRollback: previous?.lastRollback,
        conditions: [...conditions, ...c.status.conditions],
      },
    };
  }

  const isRollback =
    !state && !!deployed && target !== deployed && Number(target) < Number(deployed);
  let oldPods: number | undefined;
  if (state?.phase === 'Draining') {
    const pods = a.pods?.[state.from];
    if (!pods) return { need: { kind: 'pods', revision: state.from } };
    oldPods = pods.length;
  }
  const step = rollbackStep({
    now,
    state,
    deployedRevision: deployed,
    targetRevision: target,
    isRollback,
    trigger,
    triggerReason,
    drainSeconds: spec.shutdown.drainDeadlineSeconds + TERMINATION_MARGIN_SECONDS,
    verifySeconds: spec.rollout.verifySeconds,
    objectiveSeconds: spec.scaling.targetOldestAgeSeconds,
    oldPods,
    restored: state?.phase === 'Restoring' ? rolledOutAt(i.deployment, state.to) : false,
    ageSeconds: i.ageSeconds,
  });
  if (step.event) events.push(step.event);
  conditions.push(...step.conditions);
  state = step.state;
  if (state) analysis = undefined;

  const lastRollback =
    step.finished ??
    (previous?.lastRollback && previous.lastRollback.to === target && !state
      ? previous.lastRollback
      : undefined);
  let progressing: ConditionInput | undefined;
  let degraded: ConditionInput | undefined;
  if (state) {
    progressing = {
      type: 'Progressing',
      status: 'True',
      reason: 'RollingBack',
      message: `Rolling back from revision ${state.from} to ${state.to}: ${state.phase.toLowerCase()}.`,
    };
  } else if (lastRollback && rolledOutAt(i.deployment, lastRollback.to)) {
    progressing = {
      type: 'Progressing',
      status: 'False',
      reason: 'RollbackComplete',
      message: lastRollback.message,
    };
    if (lastRollback.result === 'NotRecovering')
      degraded = {
        type: 'Degraded',
        status: 'True',
        reason: 'RollbackNotRecovering',
        message: lastRollback.message,
      };
  }
  const lastCohort = previous?.lastCohort;
  degraded ??= cohortAborted(lastCohort, aborted);
  if (aborted && !state && step.finished?.trigger === 'AutoRollback')
    events.push({
      type: 'Warning',
      reason: 'RevisionAborted',
      message: `Revision ${aborted} stays off after its automatic rollback: change the spec (a new revision) to roll forward again.`,
    });

  // The template to apply: the spec's own; the live one, untouched, when the
  // revision to run is the one running; else the revision's recorded spec. A
  // revision whose spec is not recorded is never started from another spec.
  const deployRevision = step.deploy.revision;
  let deploySpec: JobWorkerSpec | undefined = spec;
  if (deployRevision !== specRevision) {
    if (deployRevision === deployed) deploySpec = undefined;
    else {
      const recorded = recordedSpec(deployRevision, history, a);
      if (recorded && 'need' in recorded) return recorded;
      deploySpec = recorded;
      if (!recorded && !blocked) {
        blocked = true;
        const message = `Revision ${deployRevision}'s spec is not recorded (no ControllerRevision ${revisionRecordName(raw.metadata.name, deployRevision)} of this JobWorker with its contract), so it cannot be started; ${deployed ? `revision ${deployed} keeps running` : 'nothing is started'}. Re-apply revision ${deployRevision}'s spec to go back to it.`;
        conditions.push({
          type: 'RolloutBlocked',
          status: 'True',
          reason: 'RevisionSpecUnknown',
          message,
        });
        events.push({ type: 'Warning', reason: 'RolloutBlocked', message });
      }
    }
  }
  return {
    history,
    evicted: assigned.evicted,
    specRevision,
    targetRevision: state?.to ?? target,
    deployRevision,
    deploySpec,
    scaleToZero: step.deploy.scaleToZero,
    status: {
      rollout: state,
      lastRollback,
      analysis,
      abortedRevision: aborted,
      lastCohort,
      conditions,
      progressing,
      degraded,
      rollingBack: !!state,
    },
    // a cohort Deployment without a cohort (a delete that failed, a status lost): gone
    removeCohort: !!i.cohortDeployment,
    requeueMs: step.requeueMs ?? (analysis ? 5000 : undefined),
    events,
    blocked,
  };
}

type CohortPlan = Omit<RolloutPlan, 'history' | 'evicted' | 'specRevision' | 'blocked'>;

/** A Cohort rollout's reconcile: the reads its phase needs, then ./cohort.ts decides. */
function cohortPlan(
  i: RolloutInput,
  o: {
    unwanted?: { check: 'SpecChanged' | 'Blocked'; reason: string };
    target: string;
    deployed: string;
    specRevision: string;
  },
): CohortPlan | { need: RolloutNeed } {
  const { spec, previous, answers: a } = i;
  const running = previous?.cohort;
  const status = (d: KubeObject | undefined) =>
    (d?.status ?? {}) as { readyReplicas?: number; replicas?: number };
  let cohortPods: number | undefined;
  if (running?.phase === 'Aborting') {
    const pods = a.pods?.[running.revision];
    if (!pods) return { need: { kind: 'pods', revision: running.revision } };
    cohortPods = pods.length;
  } else if (running?.phase === 'Promoting') cohortPods = status(i.cohortDeployment).replicas ?? 0;
  const analyzing = running && (running.phase === 'Analyzing' || running.phase === 'Waiting');
  if (analyzing && !a.cohortSamples) return { need: { kind: 'cohortSamples' } };
  // The stable Deployment moves to the cohort's revision at the end: from the
  // spec, or (the spec has moved on) from that revision's recorded spec.
  const cohortRevision = running?.revision ?? o.target;
  let promotedSpec: JobWorkerSpec | undefined = spec;
  if (cohortRevision !== o.specRevision && running?.phase === 'Promoting') {
    const recorded = recordedSpec(cohortRevision, i.previous?.history, a);
    if (recorded && 'need' in recorded) return recorded;
    promotedSpec = recorded;
  }
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
    samples: a.cohortSamples,
    memory: i.cohortMemory,
    ageSeconds: i.ageSeconds,
    command: parseCommand(i.raw.metadata.annotations?.[ANNOTATION_COHORT_COMMAND]),
  });
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
