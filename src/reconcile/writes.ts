// A plan's writes, in the order the reconciler carries them out: which
// object is the stable Deployment, which the cohort's, what is live and what
// is absent, all decided here from the Observation. The reconciler
// (src/controller/reconciler.ts) only performs them.
import type { KubeObject } from '../kube/client.js';
import type { Observation } from './observation.js';

export type Write =
  /** a revision's ControllerRevision: created once, never patched */
  | { op: 'record'; object: KubeObject }
  /** a pod's deletion cost, before the replicas go down (null takes the mark off) */
  | { op: 'podCost'; pod: string; cost: string | null }
  /**
   * Server-side apply unless every field is already live. `live` is the
   * object from the synced cache (the Deployments); `absent`: known not to
   * exist, so nothing is read first.
   */
  | {
      op: 'apply';
      object: KubeObject;
      role: 'stable' | 'cohort' | 'child';
      live?: KubeObject;
      absent: boolean;
    }
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
 * The writes, ordered: a revision's record before its first pod can start;
 * the idlest pods marked before the ReplicaSet picks its victims; the stable
 * Deployment; the other children; deletions last.
 */
export function writesOf(obs: Observation, f: FleetWrites): Write[] {
  const name = obs.raw.metadata.name;
  // No Deployment in the synced cache: a new JobWorker (or its children deleted).
  const fresh = !obs.deployment;
  const stable = f.children.find((c) => c.kind === 'Deployment' && c.metadata.name === name);
  const others = f.children.filter((c) => c !== stable);
  return [
    ...f.records.map((object): Write => ({ op: 'record', object })),
    ...(f.podCosts ?? []).map((w): Write => ({ op: 'podCost', pod: w.pod, cost: w.cost })),
    ...(stable
      ? [
          {
            op: 'apply',
            object: stable,
            role: 'stable',
            ...(obs.deployment && { live: obs.deployment }),
            absent: fresh,
          } satisfies Write,
        ]
      : []),
    ...others.map((object): Write =>
      // A Cohort rollout's Deployment is watched too: its cache entry, or absent.
      object.kind === 'Deployment'
        ? {
            op: 'apply',
            object,
            role: 'cohort',
            ...(obs.cohortDeployment && { live: obs.cohortDeployment }),
            absent: !obs.cohortDeployment,
          }
        : { op: 'apply', object, role: 'child', absent: fresh },
    ),
    ...f.remove.map((r): Write => ({ op: 'delete', ...r })),
    ...f.prune.map((n): Write => ({
      op: 'delete',
      apiVersion: 'apps/v1',
      kind: 'ControllerRevision',
      name: n,
    })),
  ];
}
