// Whether a JobWorker has news since its last plan. A reconcile that finds
// the same spec generation, the same children (by resourceVersion), the same
// quarantine read and no requeue due makes no plan at all: no parsing, no
// validation, no revision hash, no status digest. Most wake-ups of a settled
// fleet are such (the operator's own status write, a resync), and at a
// thousand JobWorkers their plans were most of the operator's CPU.
import { isDeepStrictEqual } from 'node:util';
import type { KubeObject } from '../kube/client.js';
import { cohortDeploymentName } from '../reconcile/children/index.js';
import type { DeadLetterRead, PlannedFrom } from './memory.js';
import type { ObjectCache } from './observe.js';

/** The resourceVersions of everything of the JobWorker's a plan reads from the watches, in one string. */
export function childrenVersions(raw: KubeObject, cache: ObjectCache): string {
  const namespace = raw.metadata.namespace as string;
  const name = raw.metadata.name;
  const rv = (o: KubeObject | undefined) => o?.metadata.resourceVersion ?? '-';
  const owned = (kind: Parameters<ObjectCache['owned']>[0]) =>
    cache
      .owned(kind, namespace, name)
      .map((o) => `${o.metadata.name}@${rv(o)}`)
      .sort()
      .join(',');
  return [
    rv(cache.get('Deployment', namespace, name)),
    rv(cache.get('Deployment', namespace, cohortDeploymentName(name))),
    owned('Service'),
    owned('PodDisruptionBudget'),
    owned('ControllerRevision'),
    owned('Pod'),
  ].join('|');
}

/**
 * The last plan still stands: same term, the JobWorker at a version planned
 * from or written by our own status write, the same children and quarantine
 * read, and its requeue not yet due. `nowMs`: the reconcile's clock.
 */
export function unchanged(
  planned: PlannedFrom,
  now: {
    term: object;
    raw: KubeObject;
    children: string;
    deadLetters: DeadLetterRead | undefined;
    nowMs: number;
  },
): boolean {
  if (planned.term !== now.term) return false;
  const rv = now.raw.metadata.resourceVersion;
  if (!rv || !planned.versions.includes(rv)) return false;
  if (planned.children !== now.children || planned.deadLetters !== now.deadLetters) return false;
  return planned.dueAt === undefined || now.nowMs < planned.dueAt;
}

/**
 * Whether a JobWorker watch event may change a plan: anything but a change
 * of status alone (the operator's own status write, most often), which
 * wakes nothing. A new object, a deletion or any spec or metadata change is news.
 */
export function hasNews(old: KubeObject | undefined, obj: KubeObject | undefined): boolean {
  if (!old || !obj) return true;
  return !isDeepStrictEqual(withoutStatus(old), withoutStatus(obj));
}

/** The object as a plan reads it, but for its status and what every write changes. */
function withoutStatus(o: KubeObject): Partial<KubeObject> {
  const copy: Partial<KubeObject> = { ...o, metadata: { ...o.metadata } };
  delete copy.status;
  delete copy.metadata?.resourceVersion;
  delete copy.metadata?.managedFields;
  return copy;
}

/** Set by the deployment controller on every Deployment it syncs: no plan reads it. */
const DEPLOYMENT_REVISION = 'deployment.kubernetes.io/revision';

/**
 * Whether a Deployment watch event may change its JobWorker's plan. The
 * deployment controller's own bookkeeping wakes nothing: its revision
 * annotation, and the Progressing condition's reason and update time while
 * no replica is unavailable (../reconcile/status/workers.ts reads that time
 * only while some are). With our own applies' events (./reconciler.ts,
 * ownDeploymentWrite), 0.6–0.9 planned reconciles fewer per new JobWorker
 * (bench/RESULTS.md, operator). Anything else, status counts and condition
 * turns included, is news.
 */
export function deploymentHasNews(
  old: KubeObject | undefined,
  obj: KubeObject | undefined,
): boolean {
  if (!old || !obj) return true;
  return !isDeepStrictEqual(deploymentAsRead(old), deploymentAsRead(obj));
}

interface DeploymentCondition {
  type: string;
  status: string;
  lastTransitionTime?: string;
  lastUpdateTime?: string;
}

function deploymentAsRead(d: KubeObject): unknown {
  const metadata = { ...d.metadata, annotations: { ...d.metadata.annotations } };
  delete metadata.resourceVersion;
  delete metadata.annotations[DEPLOYMENT_REVISION];
  const status = (d.status ?? {}) as {
    unavailableReplicas?: number;
    conditions?: DeploymentCondition[];
  };
  const unavailable = (status.unavailableReplicas ?? 0) > 0;
  return {
    metadata,
    spec: d.spec,
    status: {
      ...status,
      conditions: status.conditions?.map((c) => ({
        type: c.type,
        status: c.status,
        lastTransitionTime: c.lastTransitionTime,
        ...(unavailable && c.type === 'Progressing' && { lastUpdateTime: c.lastUpdateTime }),
      })),
    },
  };
}
