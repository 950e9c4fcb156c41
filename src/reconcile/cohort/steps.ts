// The Cohort strategy, pure: a new revision runs as a small worker cohort
// beside the stable revision (both consume the same queue, so its share of
// the traffic is its share of consumers × prefetch), grows step by step while
// each step's analysis passes — the cohort's figures against the stable
// revision's over the same window — and is promoted at the end; a failed
// check aborts it, the cohort drained first while the stable revision keeps
// consuming. The fleet's total stays the scaler's (capped by the downstream
// budget): the cohort is a share of it, never extra load. Its state is in
// status.cohort, so an operator restart resumes at the same step.
import { type PlanEvent, type ConditionInput, iso } from '../model/index.js';
import type {
  CohortChecks,
  CohortStep,
  JobWorkerStatus,
  RevisionFigures,
} from '../../api/jobworker.js';
import {
  accumulate,
  LATENCY_BOUNDS,
  latencyWords,
  noFigures,
  p95,
  runsOver,
  type FiguresMemory,
  type PodSample,
} from './figures.js';
import { ageRising, RISE_SUSTAIN_MS } from '../scaling/index.js';

export type CohortState = NonNullable<JobWorkerStatus['cohort']>;
export type LastCohort = NonNullable<JobWorkerStatus['lastCohort']>;

/** `kubectl jobworker promote|abort` writes this annotation: one command, for one revision. */
export const ANNOTATION_COHORT_COMMAND = 'jobfleet.dev/cohort-command';

export interface CohortCommand {
  action: 'promote' | 'abort';
  revision: string;
  /** promote: the step it skips (a command given for an earlier step does nothing) */
  step?: number;
  by: string;
  reason: string;
}

export function parseCommand(value: string | undefined): CohortCommand | undefined {
  if (!value) return undefined;
  try {
    const c = JSON.parse(value) as Partial<CohortCommand>;
    return (c.action === 'promote' || c.action === 'abort') && typeof c.revision === 'string'
      ? {
          action: c.action,
          revision: c.revision,
          ...(typeof c.step === 'number' && { step: c.step }),
          by: typeof c.by === 'string' ? c.by : 'an unknown user',
          reason: typeof c.reason === 'string' ? c.reason : 'no reason given',
        }
      : undefined;
  } catch {
    return undefined;
  }
}

/** When spec.rollout.steps is not set. */
export const DEFAULT_STEPS: CohortStep[] = [
  { cohort: { replicas: 1 } },
  { cohort: { percent: 50 } },
  { cohort: { percent: 100 } },
];

export const COHORT_CHECKS = [
  'Age',
  'Restarts',
  'DeadLetters',
  'Retries',
  'Duplicates',
  'Latency',
] as const;
export type CohortCheck =
  | (typeof COHORT_CHECKS)[number]
  | 'Throughput'
  | 'Manual'
  | 'SpecChanged'
  | 'Blocked'
  | 'Unrecorded';

/**
 * Duplicates the stable revision must itself have suppressed in the window,
 * and the cohort should have at its rate, before a collapse is judged: a
 * handful on the stable side (a redelivered batch after a pod left) says
 * nothing about the cohort's keys.
 */
const COLLAPSE_EXPECTED = 10;

/** The cohort's replicas at a step of a fleet of `total`: never more than the fleet. */
export function cohortReplicas(step: CohortStep, total: number): number {
  if (total <= 0) return 0;
  const c = step.cohort;
  const want = c.replicas ?? Math.ceil((total * (c.percent ?? 100)) / 100);
  return Math.min(total, Math.max(1, want));
}

export interface CohortInput {
  now: Date;
  state: CohortState | undefined;
  /** the revision the spec wants (through the gate), and the one the stable Deployment runs */
  revision: string;
  stable: string;
  /** why the cohort's revision is no longer wanted (changed again, reverted, refused by the gate) */
  unwanted?: { check: 'SpecChanged' | 'Blocked'; reason: string };
  /** the revision's spec is at hand for the stable Deployment: it can be promoted */
  canPromote: boolean;
  steps: readonly CohortStep[];
  checks: CohortChecks;
  /** spec.rollout.analysisSeconds: a step's window when it sets none */
  analysisSeconds: number;
  objectiveSeconds: number;
  prefetch: number;
  /** drain deadline + termination margin, seconds */
  drainSeconds: number;
  /** the fleet's replicas, from the scaler */
  total: number;
  /** cohort pods ready (the cohort Deployment's status) */
  cohortReady: number;
  /** Aborting: pods of the cohort's revision still present, Terminating ones included */
  cohortPods?: number;
  /** Promoting: the stable Deployment's ready pods, whatever their revision */
  stableReady?: number;
  /** Promoting: the stable Deployment's pods all run the revision (its old ones are gone) */
  promoted?: boolean;
  /** the workers' pods and counters (Analyzing and Waiting) */
  samples?: readonly PodSample[];
  memory: FiguresMemory | undefined;
  ageSeconds: number | undefined;
  command: CohortCommand | undefined;
}

export interface CohortOutput {
  state: CohortState | undefined;
  finished?: LastCohort;
  /** the cohort Deployment's replicas and prefetch; undefined: remove it */
  cohort?: { replicas: number; prefetch: number };
  /** the stable Deployment: its replicas, and whether it now runs the new revision */
  stable: { replicas: number; promoted: boolean };
  memory?: FiguresMemory;
  events: PlanEvent[];
  progressing: ConditionInput;
  requeueMs: number;
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** The prefetch of cohort replicas at a step: the step's, never above the spec's. */
const prefetchAt = (step: CohortStep, prefetch: number) =>
  Math.min(prefetch, step.cohort.prefetch ?? prefetch);
const prefetchOf = (i: CohortInput, s: CohortState) =>
  prefetchAt(i.steps[s.step - 1] ?? i.steps[i.steps.length - 1]!, i.prefetch);

export function cohortStep(i: CohortInput): CohortOutput {
  const events: CohortOutput['events'] = [];
  const s = settled(i, events);
  if (s.phase === 'Aborting') return abortingStep(i, s, events);
  if (s.phase === 'Promoting') return promotingStep(i, s, events);
  return analyzingStep(i, s, events);
}

/**
 * The cohort this reconcile works on. A revision other than the one the
 * cohort runs is wanted, or the gate now refuses it: the cohort goes, drained
 * first. A promotion under way finishes first (the stable Deployment already
 * moves to the cohort's revision) unless that revision's spec is not at
 * hand; the change follows. No cohort yet: one starts at step 1 (called so
 * only for a revision to start: src/reconcile/rollout/planner.ts).
 */
function settled(i: CohortInput, events: CohortOutput['events']): CohortState {
  const s = i.state;
  const analyzing = s?.phase === 'Analyzing' || s?.phase === 'Waiting';
  if (s && analyzing && (i.unwanted || s.revision !== i.revision))
    return aborting(
      s,
      i.now,
      i.drainSeconds,
      i.unwanted?.check ?? 'SpecChanged',
      i.unwanted?.reason ?? `the spec now asks for revision ${i.revision}`,
      events,
    );
  if (s?.phase === 'Promoting' && !i.canPromote)
    return aborting(
      s,
      i.now,
      i.drainSeconds,
      'Unrecorded',
      `revision ${s.revision}'s spec is not recorded (its ControllerRevision is gone), so the stable Deployment cannot move to it`,
      events,
    );
  if (s) return s;
  const started = startStep(i, 1, i.now);
  events.push({
    type: 'Normal',
    reason: 'CohortStarted',
    message: `Revision ${i.revision} starts as a cohort of ${plural(started.replicas, 'replica')} (prefetch ${prefetchAt(i.steps[0]!, i.prefetch)}) beside revision ${i.stable} (${plural(started.stableReplicas, 'replica')}): step 1 of ${i.steps.length}.`,
  });
  return started;
}

/**
 * Analyzing or Waiting: the step's replicas follow the fleet's total, and the
 * stable revision gives way only as cohort pods become ready: no gap. The
 * figures accumulate; a failed check aborts; a step passed (or skipped by
 * hand) moves on.
 */
function analyzingStep(
  i: CohortInput,
  current: CohortState,
  events: CohortOutput['events'],
): CohortOutput {
  const n = i.steps.length;
  const step = i.steps[current.step - 1] ?? i.steps[n - 1]!;
  const replicas = cohortReplicas(step, i.total);
  const sized = {
    ...current,
    replicas,
    stableReplicas: i.total - Math.min(replicas, i.cohortReady),
  };
  const acc = accumulate(
    { cohort: sized.figures?.cohort ?? noFigures(), stable: sized.figures?.stable ?? noFigures() },
    i.memory ?? {},
    i.samples ?? [],
    { cohort: sized.revision, stable: sized.stable },
    sized.figures?.at ?? sized.stepStartedAt,
  );
  const figured: CohortState = {
    ...sized,
    figures: {
      since: sized.figures?.since ?? sized.stepStartedAt,
      at: iso(i.now),
      cohort: acc.cohort,
      stable: acc.stable,
    },
  };
  const abort = (st: CohortState, check: CohortCheck, reason: string) =>
    abortingStep(i, aborting(st, i.now, i.drainSeconds, check, reason, events), events, acc.memory);
  const cmd = i.command?.revision === figured.revision ? i.command : undefined;
  if (cmd?.action === 'abort')
    return abort(figured, 'Manual', `aborted by ${cmd.by}: ${cmd.reason}`);
  // The window starts once the cohort's pods are ready: a step is watched whole.
  const windowMs = (step.analysisSeconds ?? i.analysisSeconds) * 1000;
  const s =
    !figured.analysisUntil && replicas > 0 && i.cohortReady >= replicas
      ? { ...figured, analysisUntil: iso(new Date(i.now.getTime() + windowMs)) }
      : figured;
  const over = s.analysisUntil !== undefined && i.now.getTime() >= Date.parse(s.analysisUntil);
  const failed = judge(i, s, over);
  if (failed) return abort(s, failed.check, failed.reason);
  const judged = { ...s, overObjectiveSince: risingSince(i, s) };
  const skipped = cmd?.action === 'promote' && (cmd.step === undefined || cmd.step === s.step);
  if (skipped || (over && acc.cohort.handled >= i.checks.minJobs))
    return passedStep(i, judged, events, skipped ? cmd : undefined);
  return running(i, waiting(i, judged, over, acc), events, acc.memory);
}

/** A step passed (or skipped by hand): the next step starts, or after the last, the promotion. */
function passedStep(
  i: CohortInput,
  s: CohortState,
  events: CohortOutput['events'],
  skippedBy?: CohortCommand,
): CohortOutput {
  const n = i.steps.length;
  const passed = skippedBy
    ? `skipped by ${skippedBy.by}: ${skippedBy.reason}`
    : `passed: ${summary(s.figures!.cohort, s.figures!.stable)}`;
  events.push({
    type: skippedBy ? 'Warning' : 'Normal',
    reason: skippedBy ? 'CohortStepSkipped' : 'CohortStepPassed',
    message: `Revision ${s.revision}, step ${s.step} of ${n} (${plural(s.replicas, 'replica')}) ${passed}.`,
  });
  if (s.step >= n) {
    const promoting: CohortState = {
      ...s,
      phase: 'Promoting',
      stepStartedAt: iso(i.now),
      message: `Every step passed: the stable Deployment moves to revision ${s.revision}.`,
    };
    events.push({
      type: 'Normal',
      reason: 'CohortPromoting',
      message: `Revision ${s.revision} passed its ${plural(n, 'step')}: the stable Deployment rolls to it, and the cohort leaves as its pods become ready.`,
    });
    return promotingStep(i, promoting, events, {});
  }
  const stableNow = s.figures!.stable;
  const baseline = stableNow.handled >= i.checks.minJobs ? stableNow : s.baseline;
  const next: CohortState = { ...startStep(i, s.step + 1, i.now), ...(baseline && { baseline }) };
  events.push({
    type: 'Normal',
    reason: 'CohortStep',
    message: `Revision ${s.revision} grows to ${plural(next.replicas, 'replica')} of ${i.total}: step ${next.step} of ${n}.`,
  });
  return running(i, next, events, {});
}

/** Still analyzing, or waiting for enough deliveries to judge: what the step says meanwhile. */
function waiting(
  i: CohortInput,
  s: CohortState,
  over: boolean,
  acc: { cohort: RevisionFigures; stable: RevisionFigures },
): CohortState {
  const n = i.steps.length;
  const left = s.analysisUntil
    ? Math.max(0, Math.ceil((Date.parse(s.analysisUntil) - i.now.getTime()) / 1000))
    : undefined;
  return {
    ...s,
    phase: over ? 'Waiting' : 'Analyzing',
    message: !s.analysisUntil
      ? `Step ${s.step} of ${n}: waiting for the cohort's ${plural(s.replicas, 'pod')} to be ready (${i.cohortReady} ready).`
      : over
        ? `Step ${s.step} of ${n}: the window is over, but the cohort has handled ${acc.cohort.handled} of the ${i.checks.minJobs} deliveries needed to judge it; waiting (kubectl jobworker promote skips the step).`
        : `Step ${s.step} of ${n}: ${left} s left; ${summary(acc.cohort, acc.stable)}.`,
  };
}

function startStep(i: CohortInput, step: number, now: Date): CohortState {
  const replicas = cohortReplicas(i.steps[step - 1]!, i.total);
  return {
    revision: i.revision,
    stable: i.stable,
    phase: 'Analyzing',
    step,
    steps: i.steps.length,
    replicas,
    stableReplicas: i.total - Math.min(replicas, i.cohortReady),
    stepStartedAt: iso(now),
    ...(i.ageSeconds !== undefined && { ageAtStart: i.ageSeconds }),
  };
}

function running(
  i: CohortInput,
  s: CohortState,
  events: CohortOutput['events'],
  memory: FiguresMemory,
): CohortOutput {
  return {
    state: s,
    cohort: { replicas: s.replicas, prefetch: prefetchOf(i, s) },
    stable: { replicas: s.stableReplicas, promoted: false },
    memory,
    events,
    progressing: {
      type: 'Progressing',
      status: 'True',
      reason: 'CohortStep',
      message:
        `Revision ${s.revision} runs as a cohort of ${plural(s.replicas, 'replica')} beside revision ${s.stable} (${s.stableReplicas}). ${s.message ?? ''}`.trim(),
    },
    requeueMs: 2000,
  };
}

/** Past the objective and above where the step started (ageRising): since when (sustained, it aborts). */
function risingSince(i: CohortInput, s: CohortState): string | undefined {
  return ageRising(i.ageSeconds, i.objectiveSeconds, s.ageAtStart)
    ? (s.overObjectiveSince ?? iso(i.now))
    : undefined;
}

const ratio = (part: number, f: RevisionFigures) => (f.handled > 0 ? part / f.handled : 0);
const pct = (x: number) => `${(100 * x).toFixed(x < 0.01 && x > 0 ? 2 : 1)}%`;

function summary(c: RevisionFigures, st: RevisionFigures): string {
  const lat = latencyWords;
  return `cohort ${c.handled} handled (dead-lettered ${pct(ratio(c.deadLettered, c))}, retried ${pct(ratio(c.retried, c))}, duplicates ${pct(ratio(c.duplicates, c))}, p95 ${lat(c)}) vs stable ${st.handled} (${pct(ratio(st.deadLettered, st))}, ${pct(ratio(st.retried, st))}, ${pct(ratio(st.duplicates, st))}, ${lat(st)})`;
}

type Failure = { check: CohortCheck; reason: string };

/** The first failing check, with the figures that failed it; undefined: all pass so far. */
function judge(i: CohortInput, s: CohortState, over: boolean): Failure | undefined {
  return restartsCheck(i, s) ?? ageCheck(i, s) ?? comparedChecks(i, s, over);
}

function restartsCheck(i: CohortInput, s: CohortState): Failure | undefined {
  const c = s.figures!.cohort;
  if (c.restarts < i.checks.maxRestarts) return undefined;
  return {
    check: 'Restarts',
    reason: `a cohort pod of revision ${s.revision} restarted ${c.restarts} times (limit ${i.checks.maxRestarts}): it crash-loops`,
  };
}

function ageCheck(i: CohortInput, s: CohortState): Failure | undefined {
  const since = risingSince(i, s);
  if (!since || i.now.getTime() - Date.parse(since) < RISE_SUSTAIN_MS) return undefined;
  return {
    check: 'Age',
    reason: `queue age rose from ${Math.round(s.ageAtStart ?? 0)} s to ${Math.round(i.ageSeconds!)} s, past the ${i.objectiveSeconds} s objective`,
  };
}

/**
 * The checks that compare the cohort with the stable revision. A stable side
 * with too little (a 100% step) is replaced by what it did in an earlier
 * step; with neither (a fleet of one, a first step at 100%) there is nothing
 * to compare with, and only age and restarts are judged.
 */
function comparedChecks(i: CohortInput, s: CohortState, over: boolean): Failure | undefined {
  const c = s.figures!.cohort;
  const st = s.figures!.stable;
  const k = i.checks;
  const base = st.handled >= k.minJobs ? st : s.baseline;
  if (!base) return undefined;
  if (c.handled < k.minJobs) return throughputCheck(i, s, base, over);
  // Judged all through the window (an early abort needs five standard
  // errors: looking again and again must not turn noise into an abort), and
  // at its end with three.
  const significance = over ? 3 : 5;
  return (
    rateChecks(k, c, base, significance) ??
    collapseCheck(c, base) ??
    latencyCheck(k, c, base, significance)
  );
}

/**
 * A cohort too slow to reach minJobs by the window's end, where the stable
 * revision's pace per delivery slot would have got it well past — while
 * messages waited for it. On an empty queue a cohort that handled little had
 * little to handle: it waits for more, as any step short of minJobs does.
 */
function throughputCheck(
  i: CohortInput,
  s: CohortState,
  base: RevisionFigures,
  over: boolean,
): Failure | undefined {
  if (i.ageSeconds === 0) return undefined;
  const c = s.figures!.cohort;
  const pace = base.handled / Math.max(1, base.pods * i.prefetch);
  const expected = pace * c.pods * prefetchOf(i, s);
  return over && expected >= 2 * i.checks.minJobs && c.handled < expected / 4
    ? {
        check: 'Throughput',
        reason: `the cohort handled ${c.handled} deliveries in the window where, at the stable revision's pace per delivery slot, it would have handled about ${Math.round(expected)}`,
      }
    : undefined;
}

/** Dead letters, duplicates and retries per handled delivery, each against its limit. */
function rateChecks(
  k: CohortInput['checks'],
  c: RevisionFigures,
  base: RevisionFigures,
  significance: number,
): Failure | undefined {
  const worse = (
    check: CohortCheck,
    what: string,
    cPart: number,
    sPart: number,
    limit: number,
    detail = '',
  ): Failure | undefined => {
    const cr = ratio(cPart, c);
    const sr = ratio(sPart, base);
    // Not a chance difference: beyond the limit by `significance` standard
    // errors of the two rates (counts per delivery, Poisson), so that a small
    // cohort's few jobs do not abort a good revision.
    const pooled = (cPart + sPart) / (c.handled + base.handled);
    const se = Math.sqrt(pooled * (1 / c.handled + 1 / base.handled));
    return cr - sr > limit + significance * se
      ? {
          check,
          reason: `${what}: cohort ${pct(cr)} (${cPart} of ${c.handled}) vs stable ${pct(sr)} (${sPart} of ${base.handled}), more than ${pct(limit)} above${detail}`,
        }
      : undefined;
  };
  const classes = Object.entries(c.deadLettersByClass ?? {})
    .sort((a, b) => b[1] - a[1])
    .map(([cl, v]) => `${cl} ${v}`)
    .join(', ');
  return (
    worse(
      'DeadLetters',
      'dead-lettered per handled delivery',
      c.deadLettered,
      base.deadLettered,
      k.maxDeadLetterRatioIncrease,
      classes ? `; by failure class: ${classes}` : '',
    ) ??
    worse(
      'Duplicates',
      'duplicates suppressed and claim conflicts per handled delivery',
      c.duplicates,
      base.duplicates,
      k.maxDuplicateRatioIncrease,
    ) ??
    worse(
      'Retries',
      'retries per handled delivery',
      c.retried,
      base.retried,
      k.maxRetryRatioIncrease,
    )
  );
}

/**
 * Suppression collapsed: the stable revision suppresses duplicates that the
 * cohort runs again (its claims are not where the stable revision's are, or
 * its keys no longer match theirs). Judged once the cohort should have
 * suppressed enough to tell.
 */
function collapseCheck(c: RevisionFigures, base: RevisionFigures): Failure | undefined {
  const sDup = ratio(base.duplicates, base);
  const cDup = ratio(c.duplicates, c);
  if (
    base.duplicates < COLLAPSE_EXPECTED ||
    sDup * c.handled < COLLAPSE_EXPECTED ||
    cDup >= sDup / 4
  )
    return undefined;
  return {
    check: 'Duplicates',
    reason: `duplicate suppression collapsed: cohort ${pct(cDup)} (${c.duplicates} of ${c.handled}) of its deliveries suppressed as duplicates or claim conflicts vs stable ${pct(sDup)} (${base.duplicates} of ${base.handled}); the cohort runs again what the stable revision suppresses`,
  };
}

function latencyCheck(
  k: CohortInput['checks'],
  c: RevisionFigures,
  base: RevisionFigures,
  significance: number,
): Failure | undefined {
  const sp = p95(base);
  if (sp === undefined) return undefined;
  // Bucket bounds are coarse: the bucket above the stable's is always allowed.
  const above = LATENCY_BOUNDS[LATENCY_BOUNDS.indexOf(sp) + 1] ?? Infinity;
  const limit = Math.max(sp * k.maxLatencyP95Ratio, Number.isFinite(above) ? above : 0);
  // p95 above the limit: more than 5% of the cohort's runs took longer. Not
  // by chance, as for the rates: beyond 5% by `significance` standard
  // errors (binomial), so that a new pod's few cold-start runs among its
  // first jobs do not abort a good revision. A cohort without runs has none over.
  const { runs, over: slow, bound } = runsOver(c, limit);
  if (slow - 0.05 * runs <= significance * Math.sqrt(runs * 0.05 * 0.95)) return undefined;
  return {
    check: 'Latency',
    reason: `handler latency p95: cohort ${latencyWords(c)} vs stable ${latencyWords(base)}, more than ${k.maxLatencyP95Ratio}× (limit ${limit} s; ${slow} of the cohort's ${runs} runs took over ${bound} s)`,
  };
}

function aborting(
  s: CohortState,
  now: Date,
  drainSeconds: number,
  check: CohortCheck,
  reason: string,
  events: CohortOutput['events'],
): CohortState {
  reason = reason.replace(/\.$/, '');
  const a: CohortState = {
    ...s,
    phase: 'Aborting',
    check,
    reason,
    stepStartedAt: iso(now),
    drainDeadline: iso(new Date(now.getTime() + drainSeconds * 1000)),
    replicas: 0,
    message: `Aborting: draining the cohort first (deadline ${iso(new Date(now.getTime() + drainSeconds * 1000))}); revision ${s.stable} keeps consuming.`,
  };
  delete a.analysisUntil;
  delete a.overObjectiveSince;
  events.push({
    type: 'Warning',
    reason: 'CohortAborted',
    message: `Revision ${s.revision} aborted at step ${s.step} of ${s.steps} (${check}): ${reason}. Its cohort drains first; revision ${s.stable} keeps consuming.`,
  });
  return a;
}

function abortingStep(
  i: CohortInput,
  s: CohortState,
  events: CohortOutput['events'],
  memory: FiguresMemory = {},
): CohortOutput {
  const gone = i.cohortPods === 0;
  const deadline = i.now.getTime() >= Date.parse(s.drainDeadline ?? s.stepStartedAt);
  if (gone || deadline) {
    const message = `Revision ${s.revision} was aborted at step ${s.step} of ${s.steps} (${s.check}): ${s.reason}. Its cohort was drained (${gone ? 'its pods are gone' : `the deadline passed with ${i.cohortPods ?? '?'} pods left`}); revision ${s.stable} runs the fleet.`;
    const finished: LastCohort = {
      revision: s.revision,
      stable: s.stable,
      result: 'Aborted',
      ...(s.check && { check: s.check }),
      message,
      finishedAt: iso(i.now),
    };
    events.push({ type: gone ? 'Normal' : 'Warning', reason: 'CohortDrained', message });
    return {
      state: undefined,
      finished,
      stable: { replicas: i.total, promoted: false },
      events,
      progressing: {
        type: 'Progressing',
        status: 'False',
        reason: 'CohortAborted',
        message,
      },
      requeueMs: 5000,
    };
  }
  return {
    state: s,
    cohort: { replicas: 0, prefetch: i.prefetch },
    stable: { replicas: i.total, promoted: false },
    memory,
    events,
    progressing: {
      type: 'Progressing',
      status: 'True',
      reason: 'CohortAborting',
      message: `Revision ${s.revision} aborted (${s.check}): ${s.reason}. Draining its cohort first${i.cohortPods !== undefined ? `: ${plural(i.cohortPods, 'pod')} left` : ''}; deadline ${s.drainDeadline}.`,
    },
    requeueMs: 1000,
  };
}

function promotingStep(
  i: CohortInput,
  s: CohortState,
  events: CohortOutput['events'],
  memory: FiguresMemory = {},
): CohortOutput {
  // First the stable Deployment's own pods roll to the revision (a rolling
  // update of its share alone: none at a 100% step); then it grows to the
  // whole fleet and the cohort gives way as its pods become ready, so that
  // consumers never exceed the fleet's total, nor fall below it.
  const ready = i.stableReady ?? 0;
  const replicas = i.promoted ? Math.max(0, i.total - ready) : s.replicas;
  const stableReplicas = i.promoted ? i.total : s.stableReplicas;
  if (i.promoted && ready >= i.total && (i.cohortPods ?? replicas) === 0) {
    const message = `Revision ${s.revision} was promoted through ${plural(s.steps, 'step')}: it runs the whole fleet (${plural(i.total, 'replica')}); revision ${s.stable} is gone.`;
    events.push({ type: 'Normal', reason: 'CohortPromoted', message });
    return {
      state: undefined,
      finished: {
        revision: s.revision,
        stable: s.stable,
        result: 'Promoted',
        message,
        finishedAt: iso(i.now),
      },
      stable: { replicas: i.total, promoted: true },
      events,
      progressing: { type: 'Progressing', status: 'False', reason: 'CohortPromoted', message },
      requeueMs: 5000,
    };
  }
  const state = { ...s, replicas, stableReplicas };
  return {
    state,
    cohort: { replicas, prefetch: s.replicas === replicas ? prefetchOf(i, s) : i.prefetch },
    stable: { replicas: stableReplicas, promoted: true },
    memory,
    events,
    progressing: {
      type: 'Progressing',
      status: 'True',
      reason: 'CohortPromoting',
      message: `Revision ${s.revision} passed every step: the stable Deployment ${i.promoted ? `runs it (${ready} of ${i.total} ready)` : `rolls its ${plural(s.stableReplicas, 'replica')} to it`}; the cohort has ${plural(replicas, 'replica')} left.`,
    },
    requeueMs: 2000,
  };
}
