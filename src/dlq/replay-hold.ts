// Whether a replay must wait, pure. The operating guidance: do not
// bulk-requeue while the incident is still producing failures — stabilize the
// dependency, then replay, and check queue age before continuing. So a
// JobReplay is Held (and a running one pauses) while its JobWorker is paused
// or mid-rollout, its oldest message is past the objective, its dependency is
// throttling, or dead letters of the selected failure class are still
// arriving; it goes on by itself once none holds. The JobReplay controller
// reads the JobWorker's status and the quarantine, and asks here.
import type { HOLD_REASONS } from '../api/jobreplay.js';
import type { JobWorkerSpec, JobWorkerStatus } from '../api/jobworker.js';

/** Dead letters of the selected class within this long mean the incident still produces failures. */
export const ARRIVING_WINDOW_MS = 120_000;

export type HoldReason = (typeof HOLD_REASONS)[number];

export interface HoldView {
  jobWorker: string;
  status: JobWorkerStatus | undefined;
  /** dead letters of the replay's failure class in the last ARRIVING_WINDOW_MS, keys never replayed (DeadLetterStore.arriving) */
  recentDeadLetters: number;
  failureClass?: string;
}

export interface Hold {
  reason: HoldReason;
  message: string;
}

export function replayHold(v: HoldView): Hold | undefined {
  const s = v.status ?? {};
  const cond = (type: string) => s.conditions?.find((c) => c.type === type);
  const jw = `JobWorker ${v.jobWorker}`;
  if (s.phase === 'Paused')
    return { reason: 'TargetPaused', message: `${jw} is paused; the replay waits for its resume.` };
  if (s.phase === 'RollingBack' || s.phase === 'Progressing' || s.rollout)
    return {
      reason: 'RolloutInProgress',
      message: `${jw} is ${s.phase === 'RollingBack' || s.rollout ? 'rolling back' : 'rolling out'}; the replay waits until its revision settles.`,
    };
  if (cond('AgeObjectiveMet')?.status === 'False')
    return {
      reason: 'AgeOverObjective',
      message: `${jw}'s oldest message is past its objective (${s.oldestMessageAge ?? '?'}); replaying now would add to the backlog.`,
    };
  if (s.scaling?.throttling)
    return {
      reason: 'DependencyThrottling',
      message: `${jw}'s dependency is throttling; replayed jobs would meet the same refusals.`,
    };
  if (v.recentDeadLetters > 0)
    return {
      reason: 'FailuresStillArriving',
      message: `${v.recentDeadLetters} dead letters${v.failureClass ? ` of class ${v.failureClass}` : ''} arrived in the last ${ARRIVING_WINDOW_MS / 60_000} minutes: the incident is still producing failures.`,
    };
  return undefined;
}

/**
 * A replay's rate, capped by the downstream budget. Replayed jobs run on the
 * same workers as first attempts, so the fleet's in-flight count already
 * holds them to the budget; publishing faster than the budget lets the fleet
 * complete them (capacity per replica × the replicas the budget allows) only
 * grows the backlog, which the age hold would then stop. Uncapped when the
 * JobWorker declares no budget or no capacity is known yet.
 */
export function replayRate(
  requested: number,
  spec: Pick<JobWorkerSpec, 'broker' | 'scaling'> | undefined,
  status: JobWorkerStatus | undefined,
): { rate: number; capped?: string } {
  const budget = spec?.scaling.downstream?.maxConcurrency;
  const perReplica = status?.capacityPerReplica;
  if (!spec || !budget || !perReplica) return { rate: requested };
  const replicas = Math.max(1, Math.floor(budget / spec.broker.prefetch));
  const ceiling = Math.max(0.01, Math.round(perReplica * replicas * 100) / 100);
  return requested <= ceiling
    ? { rate: requested }
    : {
        rate: ceiling,
        capped: `${requested}/s capped at ${ceiling}/s: the downstream budget (maxConcurrency ${budget}) lets ${replicas} replicas of ${perReplica} jobs/s each complete no more`,
      };
}
