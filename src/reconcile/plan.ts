// One JobWorker reconcile's decisions, pure, composed from its concerns
// (./scaling/, ./rollout/, ./cohort/, ./children/, ./status/): from an
// Observation (what the controller read), the scaler's memory and the time,
// to the writes to make (./children/writes.ts), the full status, the events a
// change deserves, the gauges, and when to look again. Like planRollout, it asks (`need`) for the few reads that
// matter only in some states, and is called again with the answer.
import type { JobWorker, JobWorkerStatus } from '../api/jobworker.js';
import type { KubeObject } from '../api/kube-object.js';
import {
  iso,
  OUTBOX_READ_MS,
  type ConditionInput,
  type Observation,
  type PlanEvent,
} from './model/index.js';
import { brokerEvents, brokerVerdict, type BrokerVerdict } from './broker/index.js';
import type { FiguresMemory } from './cohort/index.js';
import {
  cohortDeploymentName,
  desiredCohortDeployment,
  desiredDeployment,
  desiredMetricsService,
  desiredPdb,
  desiredRevisionRecord,
  revisionOf,
  revisionRecordName,
  writesOf,
  type FleetWrites,
  type Write,
} from './children/index.js';
import {
  chooseRemovals,
  decideReplicas,
  estimateCapacity,
  queueAge,
  type AgeMemory,
  type CapacityEstimate,
  type CapacityMemory,
  type PodLoad,
  type Removal,
  type ScalingOutcome,
  type ScalingSpec,
  type ScalingState,
  type Signals,
} from './scaling/index.js';
import {
  pauseSwitch,
  planRollout,
  wasPaused,
  type RolloutAnswers,
  type RolloutNeed,
  type RolloutPlan,
} from './rollout/index.js';
import {
  computeStatus,
  deadLetterDueInMs,
  firstStatusHoldMs,
  observeDeployment,
  workersDueInMs,
  workersNeedChecking,
  workersReadyCondition,
  workersShortSince,
  type WorkerReport,
} from './status/index.js';

/** What a reconcile remembers of a JobWorker between reconciles (lost on restart, and that is fine). */
export interface ScalingMemory {
  scaling: ScalingState;
  age: AgeMemory;
  capacity?: CapacityMemory;
  /** a Cohort rollout's last read of each pod's counters (./cohort/figures.ts) */
  cohort?: FiguresMemory;
}

export type { PlanEvent } from './model/index.js';

export interface Plan {
  /** what to write, in order (./children/writes.ts); none while the spec or its Secrets are broken */
  writes: Write[];
  status: JobWorkerStatus;
  /** emitted once the status that carries the change is written */
  events: PlanEvent[];
  /** only when this reconcile creates the Deployment */
  createdEvent?: PlanEvent;
  /** about the spec as written (a deprecated field): sent whether or not the status changes */
  notices?: PlanEvent[];
  /** deliveries the pods chosen for removal hold: counted by the operator's metric */
  scaleDownHeld?: number;
  memory?: ScalingMemory;
  /** the generation a deprecation was announced for (kept, not to announce it again) */
  deprecationWarned?: number;
  scaling?: ScalingOutcome;
  desiredReplicas: number;
  rolloutBlocked?: boolean;
  /** findings of each broker reason, for the gauge; absent when the broker was not checked */
  brokerUnsafe?: BrokerVerdict['counts'];
  requeueAfterMs?: number;
  /** a new JobWorker's first status waits this long still for it to turn Available (./status/first-status.ts): not written now */
  statusHeldMs?: number;
}

export interface PlanInput {
  obs: Observation;
  /** undefined for a JobWorker this process has not scaled yet */
  memory: ScalingMemory | undefined;
  now: Date;
  /** how often the queue is read while scaling on its age */
  pollMs: number;
  /** how often the broker's settings are read (BrokerSettingsSafe), default a minute */
  brokerSettingsReadMs?: number;
  /** the generation this process last announced a deprecated field for */
  deprecationWarned?: number;
  /** the leader-election Lease of the operator planning, recorded in status for `kubectl jobworker status` */
  operatorLease?: { namespace: string; name: string };
  /** when this process first held this JobWorker's first status (ms; ./status/first-status.ts) */
  firstStatusHeldAt?: number;
  answers: PlanAnswers;
}

/** A read the plan needs in this state: the rollout's, or the unready workers' reports. */
export type PlanNeed = RolloutNeed | { kind: 'workers' } | { kind: 'podLoad' };
export type PlanAnswers = RolloutAnswers & {
  /** what the unready pods say (./status/workers.ts); a key present with undefined: unreadable */
  workers?: WorkerReport[] | undefined;
  /** what each pod holds, before a scale-down (./scaling/scale-down.ts); undefined: unreadable */
  podLoad?: PodLoad[] | undefined;
};

/** Every need answered at most once: a plan asks for a few things, never in a loop. */
export const MAX_PLAN_ROUNDS = 8;

/**
 * The plan, once each read it asks for is answered: `answer` fills `answers`
 * for the need (the reconciler reads the cluster and the queue; the sequence
 * tests read their simulated world). The one loop of plan and read.
 */
export function planToCompletion(
  input: Omit<PlanInput, 'answers'>,
  answer: (need: PlanNeed, answers: PlanAnswers) => void,
): Plan {
  const rounds = planRounds(input);
  for (let r = rounds.next(); ; r = rounds.next()) {
    if (r.done) return r.value;
    answer(r.value.need, r.value.answers);
  }
}

/** planToCompletion, for answers that take I/O. */
export async function planToCompletionAsync(
  input: Omit<PlanInput, 'answers'>,
  answer: (need: PlanNeed, answers: PlanAnswers) => Promise<void>,
): Promise<Plan> {
  const rounds = planRounds(input);
  for (let r = rounds.next(); ; r = rounds.next()) {
    if (r.done) return r.value;
    await answer(r.value.need, r.value.answers);
  }
}

function* planRounds(
  input: Omit<PlanInput, 'answers'>,
): Generator<{ need: PlanNeed; answers: PlanAnswers }, Plan, void> {
  const answers: PlanAnswers = {};
  for (let round = 0; round < MAX_PLAN_ROUNDS; round++) {
    const p = planJobWorker({ ...input, answers });
    if (!('need' in p)) return p;
    yield { need: p.need, answers };
  }
  throw new Error('the planner kept asking for observations (a bug): giving up this reconcile');
}

function planJobWorker(i: PlanInput): Plan | { need: PlanNeed } {
  const { obs, now } = i;
  const r = replicasPhase(i);
  const fleet =
    r.paused && obs.spec && obs.deployment
      ? pausedFleet(obs, obs.spec, obs.deployment, r)
      : r.healthy && obs.spec
        ? rolloutFleet(i, obs.spec, r)
        : idleFleet(r);
  if ('need' in fleet) return fleet;
  const w = workersPhase(i, r, fleet.appliedReplicas, creating(obs, fleet));
  if ('need' in w) return w;
  const { rollout, removal } = fleet;
  const pause = obs.spec && pauseSwitch(obs.raw);
  const broker = brokerVerdict(obs.brokerSettings, obs.spec);
  const status = computeStatus({
    generation: obs.raw.metadata.generation ?? 0,
    previous: r.previous,
    problems: obs.problems,
    desiredReplicas: r.desiredReplicas,
    deployment: w.observed,
    updateRevision: rollout?.targetRevision ?? r.previous?.updateRevision,
    history: rollout?.history ?? r.previous?.history ?? [],
    now,
    scaling: r.scaling,
    paused: r.paused && pause ? pause : undefined,
    workers: w.condition,
    deadLetters: obs.deadLetters,
    ...(obs.outbox && { outbox: obs.outbox }),
    ...(broker && { broker: broker.condition }),
    rollout: rollout?.status,
    appliedReplicas: fleet.appliedReplicas,
    target: { name: obs.raw.metadata.name, namespace: obs.raw.metadata.namespace },
    ...(i.operatorLease && { operatorLease: i.operatorLease }),
    ...(rollout?.cohort &&
      obs.cohortDeployment && { cohort: observeDeployment(obs.cohortDeployment) }),
    ...(removal &&
      r.live !== undefined && {
        scaleDown: {
          from: r.live,
          to: fleet.appliedReplicas,
          heldDeliveries: removal.heldDeliveries,
        },
      }),
  });
  const deprecation = deprecationEvents(obs, i.deprecationWarned);
  const held = firstStatusHoldMs(obs, status, now, i.firstStatusHeldAt);
  return {
    writes: writesOf(obs, { ...fleet, ...(removal && { podCosts: removal.writes }) }),
    status,
    events: [
      ...fleet.events,
      ...problemEvents(obs),
      ...w.events,
      ...pauseEvents(obs, r),
      ...brokerEvents(r.previous?.conditions, broker?.condition),
    ],
    ...(deprecation.length && { notices: deprecation }),
    ...(fleet.createdEvent && { createdEvent: fleet.createdEvent }),
    ...(removal && { scaleDownHeld: removal.heldDeliveries }),
    ...(r.scaled && { memory: nextMemory(i.memory, r, fleet.cohortMemory) }),
    ...(deprecation.length && { deprecationWarned: obs.raw.metadata.generation }),
    ...(r.scaling && { scaling: r.scaling }),
    // as status says it: 0 while paused
    desiredReplicas: status.desiredReplicas ?? r.desiredReplicas,
    ...(rollout && { rolloutBlocked: rollout.blocked }),
    ...(broker?.counts && { brokerUnsafe: broker.counts }),
    ...(held !== undefined && { statusHeldMs: held }),
    ...requeue(i, status, rollout, r.scaling !== undefined, held),
  };
}

/** Phase 1: the replicas the scaler wants, and what it keeps to restore at. */
interface Replicas {
  previous: JobWorkerStatus | undefined;
  /** the Deployment's replicas now */
  live: number | undefined;
  paused: boolean;
  pausedBefore: boolean;
  /** the autoscaler's own count before this reconcile */
  current: number;
  /** the spec is valid and its Secrets are in place */
  healthy: boolean;
  scaled?: { outcome: ScalingOutcome; memory: ScalingMemory };
  scaling?: ScalingOutcome;
  desiredReplicas: number;
}

function replicasPhase(i: PlanInput): Replicas {
  const { raw, spec, problems, deployment } = i.obs;
  const previous = raw.status as JobWorkerStatus | undefined;
  const live = (deployment?.spec as { replicas?: number } | undefined)?.replicas;
  const paused = spec?.paused === true;
  const pausedBefore = wasPaused(previous);
  // While a rollback drains or the fleet is paused, the Deployment sits at 0,
  // and beside a cohort it holds only the stable share: the autoscaler keeps
  // its own count, to restore at.
  const current = Number(
    (((previous?.rollout || pausedBefore || paused) && live === 0) || previous?.cohort
      ? // paused, status says 0 and keeps the count in resumeReplicas (older operators: in desiredReplicas)
        (previous?.resumeReplicas ?? previous?.desiredReplicas)
      : live) ??
      previous?.desiredReplicas ??
      0,
  );
  const healthy = spec !== undefined && problems.length === 0;
  const scaled =
    healthy && i.obs.queue ? scale(i.obs, spec, current, i.memory, i.now.getTime()) : undefined;
  // Paused, scaling holds: the age is still read and reported, nothing acts on it.
  const scaling =
    paused && scaled
      ? {
          ...scaled.outcome,
          desired: current,
          limitedBy: 'paused' as const,
          message: `Paused: 0 replicas held, ${current} restored on resume (the scaler would run ${scaled.outcome.desired}). ${scaled.outcome.message}`,
        }
      : scaled?.outcome;
  return {
    previous,
    live,
    paused,
    pausedBefore,
    current,
    healthy,
    ...(scaled && { scaled }),
    ...(scaling && { scaling }),
    desiredReplicas: scaling?.desired ?? current,
  };
}

/** Phase 2: the fleet's objects and what changes about them. */
interface Fleet {
  rollout?: RolloutPlan;
  /** replicas the Deployment is given */
  appliedReplicas: number;
  children: KubeObject[];
  records: KubeObject[];
  prune: string[];
  remove: FleetWrites['remove'];
  events: PlanEvent[];
  createdEvent?: PlanEvent;
  removal?: Removal;
  cohortMemory?: FiguresMemory;
}

/** A broken spec or a missing Secret holds what runs: nothing is applied. */
function idleFleet(r: Replicas): Fleet {
  return {
    appliedReplicas: r.desiredReplicas,
    children: [],
    records: [],
    prune: [],
    remove: [],
    events: [],
  };
}

/**
 * Paused, rollouts hold: the pod template that ran stays, as it is, at 0 —
 * whatever the spec says now, and whether or not its Secrets are in place.
 * A cohort stops too, as it is; its step resumes with the fleet.
 */
function pausedFleet(
  obs: Observation,
  spec: NonNullable<Observation['spec']>,
  deployment: KubeObject,
  r: Replicas,
): Fleet {
  const jw = { ...obs.raw, spec } as unknown as JobWorker;
  const cohort = r.previous?.cohort;
  return {
    ...idleFleet(r),
    appliedReplicas: 0,
    children: [
      liveTemplateDeployment(jw, deployment, 0),
      desiredMetricsService(jw),
      desiredPdb(jw),
      ...(obs.cohortDeployment && cohort
        ? [
            cohortDeployment(
              jw,
              { revision: cohort.revision, replicas: 0, prefetch: spec.broker.prefetch },
              obs.cohortDeployment,
            ),
          ]
        : []),
    ],
  };
}

/** The rollout's plan (./rollout/planner.ts) made into the objects to apply, and the events it deserves. */
function rolloutFleet(
  i: PlanInput,
  spec: NonNullable<Observation['spec']>,
  r: Replicas,
): Fleet | { need: PlanNeed } {
  const { obs, now } = i;
  const { raw, deployment } = obs;
  const plan = planRollout({
    raw,
    spec,
    previous:
      r.pausedBefore && !r.paused
        ? resumed(r.previous, r.scaling, spec.rollout.verifySeconds, now)
        : r.previous,
    deployment,
    now,
    // the queue's own age: a stalled producer-side relay is not the revision's doing
    ageSeconds: r.scaling?.signalOk && !r.paused ? r.scaling.queueAgeSeconds : undefined,
    answers: i.answers,
    ...(obs.cohortDeployment && { cohortDeployment: obs.cohortDeployment }),
    total: r.desiredReplicas,
    ...(i.memory?.cohort && { cohortMemory: i.memory.cohort }),
    ...(obs.queue?.ok && { queueType: obs.queue.stats.type }),
  });
  if ('need' in plan) return plan;
  const appliedReplicas =
    plan.scaleToZero || r.paused ? 0 : (plan.mainReplicas ?? r.desiredReplicas);
  const removal = scaleDownRemoval(i, spec, r, plan, appliedReplicas);
  if (removal && 'need' in removal) return removal;
  return {
    rollout: plan,
    appliedReplicas,
    ...fleetObjects(obs, spec, plan, appliedReplicas),
    events: rolloutEvents(obs, r, plan, removal),
    ...(!deployment &&
      plan.deploySpec && {
        createdEvent: {
          type: 'Normal',
          reason: 'DeploymentCreated',
          message: `Created Deployment ${raw.metadata.name} at revision ${plan.deployRevision} (${plan.deploySpec.image}) with ${appliedReplicas} replicas.${r.scaling ? ` ${r.scaling.message}` : ''}`,
        },
      }),
    ...(removal && { removal }),
    ...(plan.cohortMemory && { cohortMemory: plan.cohortMemory }),
  };
}

/**
 * The objects a rollout plan applies: the planned revision's template, from
 * that revision's spec or the live one kept as it is (see planRollout); the
 * spec revision's record; the records of revisions history dropped.
 */
function fleetObjects(
  obs: Observation,
  spec: NonNullable<Observation['spec']>,
  plan: RolloutPlan,
  appliedReplicas: number,
): Pick<Fleet, 'children' | 'records' | 'prune' | 'remove'> {
  const { raw, deployment } = obs;
  const jw = { ...raw, spec: plan.deploySpec ?? spec } as unknown as JobWorker;
  const d = plan.deploySpec
    ? desiredDeployment(jw, plan.deployRevision, appliedReplicas)
    : deployment && liveTemplateDeployment(jw, deployment, appliedReplicas);
  return {
    children: [
      ...(d ? [d] : []),
      desiredMetricsService(jw),
      desiredPdb(jw),
      ...(plan.cohort ? [cohortDeployment(jw, plan.cohort, obs.cohortDeployment)] : []),
    ],
    records: [
      desiredRevisionRecord(
        raw as unknown as JobWorker,
        plan.specRevision,
        JSON.parse(JSON.stringify(raw.spec)) as Record<string, unknown>,
      ),
    ],
    prune: plan.evicted.map((rev) => revisionRecordName(raw.metadata.name, rev)),
    remove: plan.removeCohort
      ? [
          {
            apiVersion: 'apps/v1',
            kind: 'Deployment',
            name: cohortDeploymentName(raw.metadata.name),
          },
        ]
      : [],
  };
}

/**
 * Going down (not to zero: then every pod goes): the idlest pods first — not
 * beside a cohort, whose pods the stable Deployment cannot remove.
 */
function scaleDownRemoval(
  i: PlanInput,
  spec: NonNullable<Observation['spec']>,
  r: Replicas,
  plan: RolloutPlan,
  appliedReplicas: number,
): Removal | undefined | { need: PlanNeed } {
  const goingDown =
    !!i.obs.deployment &&
    !i.obs.cohortDeployment &&
    !plan.cohort &&
    spec.scaling.removeIdleFirst &&
    appliedReplicas > 0 &&
    appliedReplicas < (r.live ?? 0);
  if (!goingDown) return undefined;
  if (!('podLoad' in i.answers)) return { need: { kind: 'podLoad' } };
  return i.answers.podLoad && chooseRemovals(i.answers.podLoad, (r.live ?? 0) - appliedReplicas);
}

function rolloutEvents(
  obs: Observation,
  r: Replicas,
  plan: RolloutPlan,
  removal: Removal | undefined,
): PlanEvent[] {
  const { deployment } = obs;
  const { previous, scaling, current, desiredReplicas } = r;
  const events: PlanEvent[] = [];
  const revisionChanged =
    previous?.updateRevision !== undefined && previous.updateRevision !== plan.targetRevision;
  // (a Cohort rollout's own events tell its story)
  if (deployment && revisionChanged && !plan.status.rollingBack && !previous?.cohort)
    events.push({
      type: 'Normal',
      of: 'Deployment',
      reason: 'RevisionChanged',
      message: `Rolling to revision ${plan.targetRevision}${plan.deploySpec ? ` (${plan.deploySpec.image})` : ''}.`,
    });
  events.push(...plan.events);
  if (deployment && scaling && !plan.scaleToZero && !r.paused && desiredReplicas !== current)
    events.push({
      type: 'Normal',
      of: 'Deployment',
      reason: desiredReplicas > current ? 'ScaledUp' : 'ScaledDown',
      message: `Scaled from ${current} to ${desiredReplicas} replicas. ${scaling.message}${removal ? ` ${removedWords(removal)}` : ''}`,
    });
  return events;
}

/**
 * The Deployment this reconcile creates, as status describes it: just
 * created, no pod yet. The first status write already says the rollout has
 * begun, and the next is when the fleet is Available (not one more between,
 * when the watch brings the Deployment back).
 */
function creating(obs: Observation, fleet: Fleet): KubeObject | undefined {
  if (obs.deployment) return undefined;
  return fleet.children.find(
    (c) => c.kind === 'Deployment' && c.metadata.name === obs.raw.metadata.name,
  );
}

/** Phase 3: WorkersReady; pods short of ready for a while are asked why (a refused password, a database down). */
function workersPhase(
  i: PlanInput,
  r: Replicas,
  appliedReplicas: number,
  created: KubeObject | undefined,
):
  | {
      observed: ReturnType<typeof observeDeployment>;
      condition: ConditionInput;
      events: PlanEvent[];
    }
  | { need: PlanNeed } {
  const { deployment } = i.obs;
  const checkWorkers = appliedReplicas > 0 && workersNeedChecking(deployment, i.now);
  if (checkWorkers && !('workers' in i.answers)) return { need: { kind: 'workers' } };
  const observed = observeDeployment(deployment ?? created);
  const condition = workersReadyCondition(
    observed,
    appliedReplicas,
    checkWorkers ? (i.answers.workers ?? []) : undefined,
  );
  // Once per fault, not for every change of the ready count while it lasts.
  const before = r.previous?.conditions?.find((c) => c.type === 'WorkersReady');
  const fault =
    condition.status === 'False' &&
    (before?.status !== 'False' || before.reason !== condition.reason);
  return {
    observed,
    condition,
    events: fault
      ? [{ type: 'Warning', reason: 'WorkersNotReady', message: condition.message }]
      : [],
  };
}

/** A broken spec or a missing Secret, said as a Warning at each reconcile that finds it. */
function problemEvents(obs: Observation): PlanEvent[] {
  const [first] = obs.problems;
  return first
    ? [
        {
          type: 'Warning',
          reason: first.reason,
          message: obs.problems.map((p) => p.message).join(' '),
        },
      ]
    : [];
}

/**
 * A deprecated field is set: said once per generation by each operator
 * process (an upgraded operator says it once, without a spec change).
 */
function deprecationEvents(obs: Observation, warned: number | undefined): PlanEvent[] {
  if (!obs.spec?.podTemplate || warned === obs.raw.metadata.generation) return [];
  return [
    {
      type: 'Warning',
      reason: 'PodTemplateDeprecated',
      message:
        'spec.podTemplate is deprecated: move its fields into spec.template (labels and annotations under metadata; serviceAccountName, nodeSelector and tolerations under spec; env, resources and securityContext on the container named "worker"). The pods stay the same, so the move starts no rollout.',
    },
  ];
}

function pauseEvents(obs: Observation, r: Replicas): PlanEvent[] {
  const pause = obs.spec && pauseSwitch(obs.raw);
  if (!obs.spec || !pause || r.paused === r.pausedBefore) return [];
  return [
    r.paused
      ? {
          type: 'Normal',
          reason: 'Paused',
          message: `Paused by ${pause.by}: ${pause.reason}. Consumers drain within ${obs.spec.shutdown.drainDeadlineSeconds} s, then 0 replicas are held; scaling and rollouts hold until resumed.`,
        }
      : {
          type: 'Normal',
          reason: 'Resumed',
          message: `Resumed by ${pause.by}: ${pause.reason}. Replicas follow the scaler again, from ${r.current}.`,
        },
  ];
}

/** Paused, the scaler's window holds; the age estimate keeps learning. */
function nextMemory(
  memory: ScalingMemory | undefined,
  r: Replicas,
  cohortMemory: FiguresMemory | undefined,
): ScalingMemory {
  const scaled = r.scaled!.memory;
  const cohort = cohortMemory ?? (r.paused ? memory?.cohort : undefined);
  return {
    ...(r.paused && memory ? { ...scaled, scaling: memory.scaling } : scaled),
    ...(cohort && { cohort: cohortMemory ?? memory?.cohort }),
  };
}

function removedWords(r: Removal): string {
  return r.heldDeliveries === 0
    ? `Removing the idlest pods (${r.chosen.join(', ')}): no delivery interrupted.`
    : `Removing the idlest pods (${r.chosen.join(', ')}), which hold ${r.heldDeliveries} deliveries: they finish within the drain deadline or go back to the queue.`;
}

/** A Cohort rollout's Deployment: the revision's template, or the live one while it drains. */
function cohortDeployment(
  jw: JobWorker,
  c: NonNullable<RolloutPlan['cohort']>,
  live: KubeObject | undefined,
): KubeObject {
  const d = desiredCohortDeployment(
    c.spec ? { ...jw, spec: c.spec } : jw,
    c.revision,
    c.replicas,
    c.prefetch,
  );
  const template = (live?.spec as { template?: unknown } | undefined)?.template;
  return c.spec || !template ? d : { ...d, spec: { ...(d.spec as object), template } };
}

/**
 * The Deployment with its live pod template untouched (the revision that
 * runs, gate-checked when it started) at `replicas`: what a paused fleet
 * holds, and what keeps running while the revision to move to cannot start.
 */
function liveTemplateDeployment(jw: JobWorker, live: KubeObject, replicas: number): KubeObject {
  const d = desiredDeployment(jw, revisionOf(live) ?? '', replicas);
  const template = (live.spec as { template?: unknown } | undefined)?.template;
  return { ...d, spec: { ...(d.spec as object), template } };
}

/**
 * Resumed: the windows a pause interrupted start again. An analysis starts
 * its window now, anchored at the first age read once a worker consumes (the
 * backlog the pause left is not the new revision's doing); a rollback's
 * verification gets its window again, against the age now.
 */
function resumed(
  previous: JobWorkerStatus | undefined,
  scaling: ScalingOutcome | undefined,
  verifySeconds: number,
  now: Date,
): JobWorkerStatus | undefined {
  if (!previous) return previous;
  const a = previous.analysis;
  const r = previous.rollout;
  const age = scaling?.signalOk ? scaling.queueAgeSeconds : undefined;
  return {
    ...previous,
    ...(a && { analysis: { revision: a.revision, stable: a.stable, startedAt: iso(now) } }),
    ...(r?.phase === 'Verifying' && {
      rollout: {
        ...r,
        verifyUntil: iso(new Date(now.getTime() + verifySeconds * 1000)),
        ...(age !== undefined && { ageAtRestore: Math.round(age) }),
      },
    }),
  };
}

/** The queue's age, and the oldest message's: the queue's or the outbox's oldest unsent row, whichever waited longer. */
function withOutbox(
  age: ReturnType<typeof queueAge>['age'],
  outboxAge: number | undefined,
): ReturnType<typeof queueAge>['age'] & { queueAgeSeconds: number } {
  const queueAgeSeconds = age.signals.oldestAgeSeconds;
  if (outboxAge === undefined || outboxAge <= queueAgeSeconds) return { ...age, queueAgeSeconds };
  return { ...age, signals: { ...age.signals, oldestAgeSeconds: outboxAge }, queueAgeSeconds };
}

/** Desired replicas from the queue's signals (src/reconcile/scaling/replicas.ts), with the scaler's memory. */
function scale(
  obs: Observation,
  spec: NonNullable<Observation['spec']>,
  current: number,
  memory: ScalingMemory | undefined,
  nowMs: number,
): { outcome: ScalingOutcome; memory: ScalingMemory } {
  const sc = spec.scaling;
  const scalingSpec: ScalingSpec = {
    ...sc,
    prefetch: spec.broker.prefetch,
    maxConcurrency: sc.downstream?.maxConcurrency,
  };
  const mem = memory ?? { scaling: { recommendations: [] }, age: {} };
  // the fleet's ready workers: the stable Deployment's and a cohort's beside it
  const ready = (d: KubeObject | undefined) =>
    Number((d?.status as { readyReplicas?: number } | undefined)?.readyReplicas ?? 0);
  const readyReplicas = ready(obs.deployment) + ready(obs.cohortDeployment);
  let signals: Signals;
  let age: ReturnType<typeof withOutbox> | undefined;
  let ageMemory = mem.age;
  let capacityMemory = mem.capacity;
  let capacity: CapacityEstimate | undefined;
  const q = obs.queue;
  // a job waiting in the outbox is waiting (docs/outbox.md)
  const outboxAge = obs.outbox?.stats?.oldestSeconds ?? undefined;
  if (q?.ok) {
    const r = queueAge(q.stats, nowMs, mem.age, q.heads);
    ageMemory = r.memory;
    age = withOutbox(r.age, outboxAge);
    const c = estimateCapacity(q.capacity, spec.broker.prefetch, mem.capacity, nowMs);
    capacityMemory = c.memory;
    capacity = c.estimate;
    signals = {
      ...age.signals,
      readyReplicas,
      ...(q.throttleRate !== undefined && { throttleRate: q.throttleRate }),
      ...(capacity && { capacityPerReplica: capacity.perReplica }),
      ...(capacity?.completedRate !== undefined && { workerCompletedRate: capacity.completedRate }),
    };
  } else signals = { ok: false, missing: q?.missing ?? 'no queue signal' };
  // A new fleet starts at minReplicas; an unreadable signal never moves it.
  const base = current === 0 && !memory ? sc.minReplicas : current;
  const d = decideReplicas(scalingSpec, base, signals, mem.scaling, nowMs);
  const desired = signals.ok ? d.desired : Math.min(sc.maxReplicas, Math.max(sc.minReplicas, base));
  return {
    outcome: {
      desired,
      targetAgeSeconds: sc.targetOldestAgeSeconds,
      limitedBy: d.limitedBy,
      message: d.message,
      signalOk: signals.ok,
      oldestAgeSeconds: age?.signals.oldestAgeSeconds,
      queueAgeSeconds: age?.queueAgeSeconds,
      ...(outboxAge !== undefined && { outboxAgeSeconds: outboxAge }),
      queueDepth: age?.signals.depth,
      ageSource: age?.ageSource,
      ...(age?.estimatedBecause && { estimatedBecause: age.estimatedBecause }),
      throttling: d.throttling,
      ...(capacity
        ? { capacitySource: capacity.source, capacityPerReplica: capacity.perReplica }
        : d.state.perReplicaRate !== undefined && {
            capacitySource: 'Saturation' as const,
            capacityPerReplica: d.state.perReplicaRate,
          }),
    },
    memory: {
      scaling: d.state,
      age: ageMemory,
      ...(capacityMemory && { capacity: capacityMemory }),
    },
  };
}

/**
 * When to look again: Deployment changes wake the reconcile through its
 * watch (a rollout's progress too); queue age, the quarantine and the
 * pods' own words have none, so they are polled.
 */
function requeue(
  i: PlanInput,
  status: JobWorkerStatus,
  rollout: RolloutPlan | undefined,
  scaled: boolean,
  /** the first status is held this long still: it is written then, unless a change comes first */
  held: number | undefined,
): Pick<Plan, 'requeueAfterMs'> {
  if (i.obs.problems.length) return {}; // retried with backoff instead
  if (rollout?.requeueMs !== undefined)
    return { requeueAfterMs: Math.min(rollout.requeueMs, held ?? Infinity) };
  // A new revision rolling out over one that ran (or held by the gate) reads its gate's
  // signals again every few seconds; a JobWorker's first rollout is driven by its Deployment.
  if (
    i.obs.raw.status &&
    (i.obs.raw.status as JobWorkerStatus).currentRevision !== undefined &&
    status.conditions?.some((c) => c.type === 'Progressing' && c.status === 'True')
  )
    return { requeueAfterMs: Math.min(5000, i.pollMs) };
  // Turn the condition at the moment the oldest quarantined entry passes maxAge.
  // (The quarantine itself is read between reconciles: src/controller/quarantine-poll.ts.)
  const turns = i.obs.deadLetters ? deadLetterDueInMs(i.obs.deadLetters, i.now) : undefined;
  // A Deployment that stays short of ready: its pods are asked why, with backoff (./status/workers.ts).
  const workersDue = workersDueInMs(workersShortSince(i.obs.deployment), i.now) ?? Infinity;
  // A removed policy clears BrokerSettingsSafe without a change of the JobWorker. (A JobWorker
  // with a management URL polls its queue more often than this anyway.)
  const brokerDue = i.obs.brokerSettings ? (i.brokerSettingsReadMs ?? 60_000) : Infinity;
  // The outbox is read afresh by a reconcile: a stalled relay shows without a change of anything else.
  const outboxDue = i.obs.outbox ? OUTBOX_READ_MS : Infinity;
  const after = Math.min(
    held ?? Infinity,
    scaled && i.obs.polling ? i.pollMs : Infinity,
    turns ?? Infinity,
    workersDue,
    brokerDue,
    outboxDue,
  );
  return Number.isFinite(after) ? { requeueAfterMs: after } : {};
}
