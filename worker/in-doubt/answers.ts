// What a reconcile may answer, and how a user's return value is read. Pure.

/**
 * The answer of a handler's `reconcile` (or a step's), after it asked the
 * downstream what it observed:
 * - done: the effect happened; its result is recorded, nothing runs again;
 * - not_done: it did not happen; the handler (or step) runs;
 * - unknown: the downstream cannot tell now; asked again after a backoff,
 *   held for a person at the attempt ceiling;
 * - conflict: the downstream shows an effect that does not match the intent;
 *   held for a person at once.
 */
export type ReconcileAnswer =
  | { outcome: 'done'; result?: unknown }
  | { outcome: 'not_done' }
  | { outcome: 'unknown'; reason?: string }
  | { outcome: 'conflict'; reason: string };

const OUTCOMES = ['done', 'not_done', 'unknown', 'conflict'] as const;

/** A user's return value as an answer; anything else is `unknown`, saying what to return. */
export function readAnswer(value: unknown, where: string): ReconcileAnswer {
  const v = value as { outcome?: unknown; reason?: unknown; result?: unknown } | null;
  const outcome = v !== null && typeof v === 'object' ? v.outcome : undefined;
  const reason = typeof v?.reason === 'string' ? v.reason : undefined;
  switch (outcome) {
    case 'done':
      return { outcome, result: v?.result };
    case 'not_done':
      return { outcome };
    case 'unknown':
      return { outcome, reason };
    case 'conflict':
      return { outcome, reason: reason ?? 'the downstream shows a different effect' };
  }
  const got = JSON.stringify(value)?.slice(0, 80) ?? String(value);
  return {
    outcome: 'unknown',
    reason: `${where} returned ${got}: return {outcome: ${OUTCOMES.map((o) => `'${o}'`).join(' | ')}}`,
  };
}
