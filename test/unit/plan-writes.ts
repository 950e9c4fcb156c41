// A plan's writes (src/reconcile/children/writes.ts) as the sequence harnesses and
// transcripts read them: what it applies, records, deletes and marks.
import type { KubeObject } from '../../src/kube/client.js';
import type { Plan } from '../../src/reconcile/plan.js';

export const applied = (p: Plan): KubeObject[] =>
  p.writes.flatMap((w) => (w.op === 'apply' ? [w.object] : []));

export const recorded = (p: Plan): KubeObject[] =>
  p.writes.flatMap((w) => (w.op === 'record' ? [w.object] : []));

/** the names of the objects of `kind` the plan deletes */
export const deleted = (p: Plan, kind: string): string[] =>
  p.writes.flatMap((w) => (w.op === 'delete' && w.kind === kind ? [w.name] : []));

/** the pod-deletion-cost marks, or undefined when there are none */
export function podCosts(p: Plan): Array<{ pod: string; cost: string | null }> | undefined {
  const marks = p.writes.flatMap((w) => (w.op === 'podCost' ? [{ pod: w.pod, cost: w.cost }] : []));
  return marks.length ? marks : undefined;
}
