// Whether the worker pods are ready, and if not why, pure: from what each
// unready pod says (its /readyz answer, or the last line of a worker that
// refused to start, kept in its termination message) to the WorkersReady
// condition. Read only once a Deployment has stayed unavailable a while
// (WORKERS_CHECK_AFTER_MS): pods that are merely starting cost nothing.
import type { KubeObject } from '../../api/kube-object.js';
import { NOT_READY_REASONS, PASSING } from '../../api/worker-contract.js';
import type { ConditionInput } from '../model/index.js';
import type { DeploymentObservation } from './status.js';
import type { WorkerReason } from '../../api/reasons.js';

/** How long a Deployment is unavailable before its pods are asked why. */
export const WORKERS_CHECK_AFTER_MS = 10_000;

/** What one unready pod says. */
export interface WorkerReport {
  pod: string;
  reason: WorkerReason;
  message: string;
  fix?: string;
}

/** At most this long between two askings of a fleet that stays unready. */
export const WORKERS_ASK_MAX_MS = 5 * 60_000;

/**
 * The Deployment has stayed short of ready replicas for WORKERS_CHECK_AFTER_MS, or a rollout
 * has made no progress for as long with pods unavailable (a new revision's pods that cannot
 * pull their image while the old ones still serve).
 */
export function workersNeedChecking(deployment: KubeObject | undefined, now: Date): boolean {
  const since = workersShortSince(deployment);
  return since !== undefined && now.getTime() - since >= WORKERS_CHECK_AFTER_MS;
}

/** Since when (ms) the Deployment has been short as workersNeedChecking measures it; undefined: it is not. */
export function workersShortSince(deployment: KubeObject | undefined): number | undefined {
  const st = deployment?.status as
    | {
        replicas?: number;
        readyReplicas?: number;
        unavailableReplicas?: number;
        conditions?: Array<{
          type: string;
          status: string;
          lastTransitionTime?: string;
          lastUpdateTime?: string;
        }>;
      }
    | undefined;
  const want = (deployment?.spec as { replicas?: number } | undefined)?.replicas ?? 0;
  if (!st || want === 0) return undefined;
  const at = (since: string | undefined) => {
    const ms = Date.parse(since ?? '');
    return Number.isNaN(ms) ? undefined : ms;
  };
  const available = st.conditions?.find((c) => c.type === 'Available');
  if ((st.readyReplicas ?? 0) < want && available?.status === 'False')
    return at(available.lastTransitionTime);
  const progressing = st.conditions?.find((c) => c.type === 'Progressing');
  return (st.unavailableReplicas ?? 0) > 0 ? at(progressing?.lastUpdateTime) : undefined;
}

/**
 * How often a fleet short for `shortMs` has its pods asked: first after
 * WORKERS_CHECK_AFTER_MS, then after as long again as it has lasted (10 s,
 * 20 s, 40 s …), at most every WORKERS_ASK_MAX_MS. A fault a worker reports
 * is seen within a few seconds of the check; one that lasts costs little.
 */
export function workersAskEveryMs(shortMs: number): number {
  return Math.min(WORKERS_ASK_MAX_MS, Math.max(WORKERS_CHECK_AFTER_MS, shortMs));
}

/** When to look again at a fleet short since `since` (ms) to ask its pods: undefined when it is not short. */
export function workersDueInMs(since: number | undefined, now: Date): number | undefined {
  if (since === undefined) return undefined;
  const short = now.getTime() - since;
  return short < WORKERS_CHECK_AFTER_MS ? WORKERS_CHECK_AFTER_MS - short : workersAskEveryMs(short);
}

const KNOWN: ReadonlySet<string> = new Set(NOT_READY_REASONS);

/**
 * A worker's own words from its /readyz body or its last log line: reason,
 * message and fix, and nothing else (a log line may hold anything, so only
 * these fields of a line the worker runtime wrote are kept).
 */
export function parseWorkerWords(
  text: string,
): { reason: WorkerReason; message: string; fix?: string } | undefined {
  for (const line of text.trim().split('\n').reverse()) {
    let o: Record<string, unknown>;
    try {
      o = JSON.parse(line) as Record<string, unknown>;
    } catch {
      continue;
    }
    if (typeof o.reason !== 'string' || !KNOWN.has(o.reason)) continue;
    const reason = o.reason as WorkerReason;
    const message =
      typeof o.message === 'string' ? o.message : typeof o.err === 'string' ? o.err : '';
    return {
      reason,
      message: message.slice(0, 300),
      ...(typeof o.fix === 'string' && { fix: o.fix.slice(0, 300) }),
    };
  }
  return undefined;
}

/** The WorkersReady condition; undefined reports: the pods were not asked (yet). */
export function workersReadyCondition(
  d: DeploymentObservation | undefined,
  applied: number,
  reports: WorkerReport[] | undefined,
): ConditionInput {
  const type = 'WorkersReady';
  if (applied === 0)
    return { type, status: 'True', reason: 'NoneWanted', message: 'No worker replica is wanted.' };
  // Wanted, and no Deployment yet (being created, or held by a problem Degraded names): not ready, not a worker fault.
  if (!d)
    return {
      type,
      status: 'Unknown',
      reason: 'Starting',
      message: `0 of ${applied} workers are ready; their Deployment does not exist yet.`,
    };
  // Measured against the count this reconcile gives the Deployment (`applied`), not the one it
  // had: a scale-up turns this Unknown in the same status write that raises Desired, not one later.
  // A fault speaks even while enough replicas are ready: a new revision's pods stuck on it.
  const faults = (reports ?? []).filter((r) => !PASSING.has(r.reason));
  if (d.readyReplicas >= applied && !faults.length)
    return {
      type,
      status: 'True',
      reason: 'AllReady',
      message: `${Math.min(d.readyReplicas, applied)} of ${applied} workers are ready.`,
    };
  if (!faults.length)
    return {
      type,
      status: 'Unknown',
      reason: reports?.length ? reports[0]!.reason : 'Starting',
      message: `${d.readyReplicas} of ${applied} workers are ready; the others are ${reports?.length ? reports[0]!.reason.toLowerCase() : 'starting'}.`,
    };
  // The commonest fault speaks for the fleet; the first pod that has it is named.
  const count = new Map<WorkerReason, number>();
  for (const f of faults) count.set(f.reason, (count.get(f.reason) ?? 0) + 1);
  const reason = [...count.entries()].sort((a, b) => b[1] - a[1])[0]![0];
  const first = faults.find((f) => f.reason === reason)!;
  return {
    type,
    status: 'False',
    reason,
    message: `${d.readyReplicas} of ${applied} workers are ready; ${count.get(reason)} of those asked say ${reason} (pod ${first.pod}: ${first.message || 'no detail'}).${first.fix ? ` Fix: ${first.fix}.` : ''}`,
  };
}
