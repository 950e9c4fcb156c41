// A new JobWorker's first status, pure: held for the first seconds of its
// Deployment while it is only on its way, so that one that turns Available
// within them gets a single status write, not two. Every status write of a
// JobWorker costs the apiserver about twice a small one's CPU (it runs the
// whole object, conditions and managed fields, through its schema), and a
// thousand created at once pay it a thousand times (bench/RESULTS.md,
// operator). What is held is only "creating, nothing wrong": a problem, a
// pause, a blocked rollout or a fault is written at once, and so is any
// status once one has been written. Until then `kubectl get jw` shows a blank
// phase (docs/runbook.md, "What each JobWorker costs"). A status is also
// the revision history: a spec changed while the first is held is planned
// from the held one (planFromHeld), so its revision is numbered after it;
// after a restart, which forgets the held one, from the revision its
// Deployment runs (../children: deployedRevision).
import type { JobWorkerStatus } from '../../api/jobworker.js';
import type { Observation } from '../model/index.js';

/** How long a new JobWorker's first status may wait for it to turn Available. */
export const FIRST_STATUS_HOLD_MS = 10_000;

/**
 * How long the first status waits still (ms), or undefined: write it now.
 * Counted from the Deployment's creation, or from `heldSince` (when this
 * process first held it; the reconcile that creates the Deployment) if that
 * is earlier: a Deployment that never comes (its create refused) does not
 * hold the status longer. A JobWorker whose Deployment is older (an operator
 * that stopped before writing, a Deployment adopted) is not held.
 */
export function firstStatusHoldMs(
  obs: Pick<Observation, 'raw' | 'deployment' | 'problems'>,
  status: JobWorkerStatus,
  now: Date,
  heldSince?: number,
  holdMs = FIRST_STATUS_HOLD_MS,
): number | undefined {
  const written = (obs.raw.status as JobWorkerStatus | undefined)?.observedGeneration;
  if (written !== undefined || obs.problems.length) return undefined;
  if (status.phase !== 'Progressing' && status.phase !== 'Scaling') return undefined;
  const created = obs.deployment?.metadata.creationTimestamp;
  const since = Math.min(
    created ? Date.parse(created) : Infinity,
    heldSince ?? Infinity,
    now.getTime(),
  );
  const left = holdMs - (now.getTime() - since);
  return left > 0 ? left : undefined;
}

/**
 * What a plan reads as the status written: the server's, or, once the spec
 * has moved past the generation of a held first status (edited within the
 * hold), the held one, whose revision history the next revision is
 * numbered after. That plan then writes at once: it is not a first status.
 */
export function planFromHeld<O extends Pick<Observation, 'raw'>>(
  obs: O,
  held: JobWorkerStatus | undefined,
): O {
  const written = (obs.raw.status as JobWorkerStatus | undefined)?.observedGeneration;
  if (!held || written !== undefined || held.observedGeneration === obs.raw.metadata.generation)
    return obs;
  return { ...obs, raw: { ...obs.raw, status: held } };
}
