// A reconcile's writes. Two pure steps: `writesOf`, the plan's intents in
// the order they must happen (which object is the stable Deployment, which
// the cohort's); `settle`, the ones still to make against what the watches
// saw — an object already as desired is not written, a revision record
// already this JobWorker's is not created, one another object left is
// replaced, a status that shows nothing new is not written (../model/visible.ts),
// nor a new JobWorker's first one while it is held (../status/first-status.ts)
// — and which events may go out
// once which writes are made. The reconciler (src/controller/reconciler.ts)
// carries the settled list out and decides nothing.
import { createHash } from 'node:crypto';
import { API_VERSION, KIND, type JobWorkerStatus } from '../../api/jobworker.js';
import type { KubeObject } from '../../api/kube-object.js';
import { visibleStatus, type PlanEvent, type Observation } from '../model/index.js';
import { recordState } from './ownership.js';
import { isSubset } from './subset.js';

export type Write =
  /** a revision's ControllerRevision: created once, never patched; `replace`: one of that name is another object's */
  | { op: 'record'; object: KubeObject; replace?: true }
  /** a pod's deletion cost, before the replicas go down (null takes the mark off) */
  | { op: 'podCost'; pod: string; cost: string | null }
  /** server-side apply */
  | { op: 'apply'; object: KubeObject; role: 'stable' | 'cohort' | 'child' }
  | { op: 'delete'; apiVersion: string; kind: string; name: string };

export interface FleetWrites {
  /** the objects to apply; the stable Deployment is the one named as the JobWorker */
  children: KubeObject[];
  records: KubeObject[];
  /** ControllerRevisions of revisions dropped from history */
  prune: string[];
  /** children to delete: a Cohort rollout's Deployment once it is over */
  remove: Array<{ apiVersion: string; kind: string; name: string }>;
  podCosts?: Array<{ pod: string; cost: string | null }>;
}

/**
 * The intents, ordered: a revision's record before its first pod can start;
 * the idlest pods marked before the ReplicaSet picks its victims; the stable
 * Deployment; the other children; deletions last.
 */
export function writesOf(obs: Observation, f: FleetWrites): Write[] {
  const name = obs.raw.metadata.name;
  const isStable = (c: KubeObject) => c.kind === 'Deployment' && c.metadata.name === name;
  const stable = f.children.filter(isStable);
  const others = f.children.filter((c) => !isStable(c));
  return [
    ...f.records.map((object): Write => ({ op: 'record', object })),
    ...(f.podCosts ?? []).map((w): Write => ({ op: 'podCost', pod: w.pod, cost: w.cost })),
    ...stable.map((object): Write => ({ op: 'apply', object, role: 'stable' })),
    ...others.map((object): Write => ({
      op: 'apply',
      object,
      role: object.kind === 'Deployment' ? 'cohort' : 'child',
    })),
    ...f.remove.map((r): Write => ({ op: 'delete', ...r })),
    ...f.prune.map((n): Write => ({
      op: 'delete',
      apiVersion: 'apps/v1',
      kind: 'ControllerRevision',
      name: n,
    })),
  ];
}

/** The status this process last wrote for a JobWorker: its digest, and the resourceVersion it was written over. */
export interface StatusMemory {
  before?: string;
  digest: string;
}

/** What a plan needs of the settling: its intents, status and events. */
export interface PlannedWrites {
  writes: Write[];
  status: JobWorkerStatus;
  /** sent with a status change */
  events: PlanEvent[];
  /** sent when this reconcile creates the Deployment */
  createdEvent?: PlanEvent;
  /** sent whatever the status: about the spec as written, not a change the status carries */
  notices?: PlanEvent[];
  scaleDownHeld?: number;
  /** a new JobWorker's first status, held (../status/first-status.ts): not written yet */
  statusHeldMs?: number;
}

export interface Settled {
  /** carried out in order; a failure stops the rest */
  writes: Write[];
  /** the status to write after them (even when one failed), and what to remember once it is */
  status?: { object: KubeObject; remember: StatusMemory };
  /** each event, sent once the first `after` writes are made */
  events: Array<{ event: PlanEvent; after: number }>;
  /** deliveries held by the pods a lowered replica count removes: counted once its write is made */
  scaleDownHeld?: { count: number; after: number };
}

/** The writes still to make, against what observe read and the status this process last wrote. */
export function settle(
  p: PlannedWrites,
  obs: Observation,
  last: StatusMemory | undefined,
): Settled {
  const writes = p.writes.flatMap((w) => due(w, obs));
  const stable = writes.findIndex((w) => w.op === 'apply' && w.role === 'stable');
  // An event announcing the Deployment waits for its write; when there is none, it is already so.
  const deploymentDone = stable + 1;
  const status = p.statusHeldMs === undefined ? statusWrite(p.status, obs.raw, last) : undefined;
  return {
    writes,
    ...(status && { status }),
    events: [
      ...(p.createdEvent && !obs.deployment && stable >= 0
        ? [{ event: p.createdEvent, after: deploymentDone }]
        : []),
      ...(status ? p.events : []).map((event) => ({
        event,
        after: event.of === 'Deployment' ? deploymentDone : 0,
      })),
      ...(p.notices ?? []).map((event) => ({ event, after: 0 })),
    ],
    // Counted once: by the reconcile whose write lowered the replicas.
    ...(p.scaleDownHeld !== undefined &&
      stable >= 0 && { scaleDownHeld: { count: p.scaleDownHeld, after: deploymentDone } }),
  };
}

/** One intent as still to do: nothing when it is done already. */
function due(w: Write, obs: Observation): Write[] {
  switch (w.op) {
    case 'apply': {
      const live = liveOf(w, obs);
      return live && isSubset(w.object, live) ? [] : [w];
    }
    case 'record': {
      const state = recordState(obs.raw, obs.records, w.object.metadata.name);
      return state === 'own' ? [] : [state === 'foreign' ? { ...w, replace: true } : w];
    }
    default:
      return [w];
  }
}

/**
 * A record's create found one of that name the watches had not shown (made
 * by a reconcile whose watch event is still on its way, or by another
 * object, unlabelled): `live`, read then. Another object's is replaced.
 */
export function afterConflict(
  w: Extract<Write, { op: 'record' }>,
  live: KubeObject | undefined,
  jw: KubeObject,
): Write[] {
  const state = recordState(jw, live ? [live] : [], w.object.metadata.name);
  if (state === 'own') return [];
  // Made again by someone else between our delete and our create: retried with backoff, not in a loop.
  if (w.replace)
    throw new Error(
      `ControllerRevision ${w.object.metadata.name} was created again by another object while being replaced`,
    );
  return [{ ...w, replace: true }];
}

function liveOf(w: Extract<Write, { op: 'apply' }>, obs: Observation): KubeObject | undefined {
  if (w.role === 'stable') return obs.deployment;
  if (w.role === 'cohort') return obs.cohortDeployment;
  return obs.others.find(
    (o) => o.kind === w.object.kind && o.metadata.name === w.object.metadata.name,
  );
}

/**
 * The status write, unless it would show nothing new (../model/visible.ts:
 * figures alone, such as the queue depth or the counts inside a message, wait
 * for the next write that changes something). The watch may not have
 * brought back this process's last status write yet: compared with it alone,
 * that write would go again; so while the JobWorker is still at the version
 * that write went over, the planned status is compared with what was written.
 */
function statusWrite(
  status: JobWorkerStatus,
  raw: KubeObject,
  last: StatusMemory | undefined,
): Settled['status'] {
  const seen = canonical(visibleStatus(status));
  // a digest, not the status: kept for every JobWorker
  const digest = createHash('sha1').update(seen).digest('base64');
  const changed =
    last && last.before === raw.metadata.resourceVersion
      ? last.digest !== digest
      : seen !== shownOnServer(raw.status);
  if (!changed) return undefined;
  const { name, namespace } = raw.metadata;
  return {
    object: { apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace }, status },
    remember: { before: raw.metadata.resourceVersion, digest },
  };
}

/**
 * What a status read from the server shows (canonical), once per object the
 * watch delivered: a resync plans a settled JobWorker again and again over
 * the same unchanged status.
 */
const shown = new WeakMap<object, string>();
function shownOnServer(status: unknown): string {
  if (typeof status !== 'object' || status === null) return canonical(visibleStatus({}));
  let s = shown.get(status);
  if (s === undefined) shown.set(status, (s = canonical(visibleStatus(status))));
  return s;
}

/**
 * JSON with every object's keys sorted and undefined fields dropped (the
 * server sorts a custom resource's keys and omits what is undefined): equal
 * strings, equal statuses.
 */
function canonical(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'null';
  if (Array.isArray(v))
    return `[${v.map((x) => (x === undefined ? 'null' : canonical(x))).join(',')}]`;
  const o = v as Record<string, unknown>;
  const fields: string[] = [];
  for (const k of Object.keys(o).sort())
    if (o[k] !== undefined) fields.push(`${JSON.stringify(k)}:${canonical(o[k])}`);
  return `{${fields.join(',')}}`;
}
