// Status conditions, pure: a port of apimachinery's meta.SetStatusCondition.
// lastTransitionTime changes only when status changes, so an unchanged
// reconcile computes an identical status (and writes nothing).
import type { Condition, Phase } from '../../api/jobworker.js';
import { CONDITION_TYPES, type ConditionType, type ReasonOf } from '../../api/reasons.js';

/** A condition to set: its reason one the catalog declares for its type (../../api/reasons.ts). */
export type ConditionInput = {
  [T in ConditionType]: {
    type: T;
    status: 'True' | 'False' | 'Unknown';
    reason: ReasonOf<T>;
    message: string;
  };
}[ConditionType];

export function setCondition(
  conditions: readonly Condition[],
  c: ConditionInput,
  observedGeneration: number,
  now: Date,
): Condition[] {
  const existing = conditions.find((x) => x.type === c.type);
  const next: Condition = {
    type: c.type,
    status: c.status,
    reason: c.reason,
    message: c.message,
    observedGeneration,
    lastTransitionTime:
      existing && existing.status === c.status
        ? existing.lastTransitionTime
        : now.toISOString().replace(/\.\d{3}Z$/, 'Z'),
  };
  const rest = conditions.filter((x) => x.type !== c.type);
  // Stable order: the declared types first, in their order, then anything else.
  return [...rest, next].sort((a, b) => order(a.type) - order(b.type));
}

function order(type: string): number {
  const i = (CONDITION_TYPES as readonly string[]).indexOf(type);
  return i < 0 ? CONDITION_TYPES.length : i;
}

export function isTrue(conditions: readonly Condition[] | undefined, type: ConditionType): boolean {
  return conditions?.some((c) => c.type === type && c.status === 'True') ?? false;
}

/**
 * The one-word phase for `kubectl get`, derived from the conditions (most
 * urgent first). Progressing is a revision rolling out; a change of the
 * replica count alone is not one: while a replica serves it stays Healthy
 * (Desired and Ready show the change), and with none ready yet, waking from
 * zero or resuming, it is Scaling (docs/scaling.md).
 */
export function phaseOf(conditions: readonly Condition[], rollingBack = false): Phase {
  if (isTrue(conditions, 'RolloutBlocked')) return 'Blocked';
  if (isTrue(conditions, 'Degraded')) return 'Degraded';
  if (isTrue(conditions, 'Paused')) return 'Paused';
  if (isTrue(conditions, 'Draining')) return 'Draining';
  if (rollingBack) return 'RollingBack';
  if (isTrue(conditions, 'Progressing')) return 'Progressing';
  if (!isTrue(conditions, 'Available')) return 'Scaling';
  return 'Healthy';
}
