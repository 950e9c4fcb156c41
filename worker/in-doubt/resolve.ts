// Deciding an in-doubt attempt before anything runs again: the handler's
// reconcile asks the downstream, or the policy decides. A handler whose
// in-doubt attempt was inside a ctx.step resumes: its recorded steps are not
// called again, and the interrupted step is decided by its own reconcile.
import { readAnswer, type ReconcileAnswer } from './answers.js';
import type { Doubt } from './attempts.js';
import { decide, type Decision, type InDoubtPolicy } from './decide.js';

export type DoubtDecision = Decision | { do: 'resume' };

export interface DoubtInput {
  doubt: Doubt;
  /** the handler's reconcile, bound to its job and context; undefined when it has none */
  reconcile?: () => Promise<ReconcileAnswer>;
  policy: InDoubtPolicy;
  attempt: number;
  maxAttempts: number;
}

export async function resolveDoubt(x: DoubtInput): Promise<DoubtDecision> {
  if (!x.reconcile && x.doubt.step) return { do: 'resume' };
  let answer: ReconcileAnswer | undefined;
  if (x.reconcile) {
    try {
      answer = readAnswer(await x.reconcile(), 'reconcile');
    } catch (err) {
      answer = {
        outcome: 'unknown',
        reason: `reconcile threw ${String((err as Error)?.message ?? err)}`,
      };
    }
  }
  return decide(answer, x.policy, x.attempt, x.maxAttempts);
}
