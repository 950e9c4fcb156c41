// Rollouts, pure: the state status records for them, and the compatibility
// gate that blocks a revision whose idempotency-key rule or message schema
// versions would be incompatible (./rollback.ts: the rollback that follows an
// aborted revision). The reconciler observes, calls these, applies what they
// decide and records their state in status, so an operator restart resumes at
// the same step.
import type { JobWorkerStatus } from '../../api/jobworker.js';
import type { ConditionInput } from '../model/index.js';

export type RolloutState = NonNullable<JobWorkerStatus['rollout']>;
export type AnalysisState = NonNullable<JobWorkerStatus['analysis']>;
export type LastRollback = NonNullable<JobWorkerStatus['lastRollback']>;
export type Trigger = RolloutState['trigger'];

/** What the rollout contributes to status (src/reconcile/status/status.ts). */
export interface RolloutStatus {
  rollout?: RolloutState;
  lastRollback?: LastRollback;
  analysis?: AnalysisState;
  abortedRevision?: string;
  /** a Cohort rollout in progress (../cohort/steps.ts), and how the last one ended */
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
