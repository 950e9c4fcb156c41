// Which pods a scale-down removes, pure: the idlest first. The ReplicaSet
// controller picks the pods with the lowest controller.kubernetes.io/pod-
// deletion-cost first (after pods that are not ready), so before lowering the
// replicas the operator gives the pods it chose a cost below the default 0
// and takes its mark off any pod it chose before and does not choose now.
// Only those pods are written: a fleet that does not scale down gets no pod
// writes. src/controller/plan-reads.ts reads what each pod holds (its own
// jobfleet_held_* gauges); the reconciler writes the annotations, then the
// Deployment.

export const DELETION_COST = 'controller.kubernetes.io/pod-deletion-cost';
/** The cost given to a pod chosen for removal: below every unannotated pod (0). */
export const CHOSEN_COST = '-1';

export interface PodLoad {
  pod: string;
  /** deliveries held and the oldest one's age; undefined when the pod did not answer */
  held?: { deliveries: number; oldestSeconds: number };
  /** its deletion-cost annotation now, if any */
  cost?: string;
}

export interface Removal {
  /** the pods to remove, idlest first */
  chosen: string[];
  /** annotations to write: a pod and its new cost, or null to take the mark off */
  writes: Array<{ pod: string; cost: string | null }>;
  /** deliveries the chosen pods hold (0 is the goal): they finish within the drain deadline or go back to the queue */
  heldDeliveries: number;
}

/**
 * The `remove` idlest pods: fewest held deliveries, then the youngest oldest
 * delivery. A pod that did not answer is taken after every idle one and
 * before any that holds work (it may be starting, or it may be busy).
 */
export function chooseRemovals(pods: PodLoad[], remove: number): Removal {
  const rank = (p: PodLoad): [number, number] =>
    p.held === undefined
      ? [0.5, 0]
      : [p.held.deliveries === 0 ? 0 : 1 + p.held.deliveries, p.held.oldestSeconds];
  const ordered = [...pods].sort((a, b) => {
    const [x1, y1] = rank(a);
    const [x2, y2] = rank(b);
    return x1 - x2 || y1 - y2 || a.pod.localeCompare(b.pod);
  });
  const chosen = ordered.slice(0, Math.max(0, remove));
  const picked = new Set(chosen.map((p) => p.pod));
  const writes = [
    ...chosen.filter((p) => p.cost !== CHOSEN_COST).map((p) => ({ pod: p.pod, cost: CHOSEN_COST })),
    // A mark left by an earlier scale-down on a pod that stayed: it may be busy now.
    ...pods
      .filter((p) => !picked.has(p.pod) && p.cost === CHOSEN_COST)
      .map((p) => ({ pod: p.pod, cost: null })),
  ];
  return {
    chosen: chosen.map((p) => p.pod),
    writes,
    heldDeliveries: chosen.reduce((n, p) => n + (p.held?.deliveries ?? 0), 0),
  };
}
