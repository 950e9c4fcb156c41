// The in-doubt decision, pure: what a worker does with an attempt whose
// outcome is unknown, given the reconcile's answer (or none) and the policy.

import type { ReconcileAnswer } from './answers.js';

/**
 * For handlers without a reconcile: `rerun` runs the handler again (the
 * downstream is expected to dedupe ctx.key), `hold` quarantines the job for
 * a person. The default is rerun (docs/in-doubt.md says why).
 */
export type InDoubtPolicy = 'rerun' | 'hold';

export const IN_DOUBT_POLICIES: readonly InDoubtPolicy[] = ['rerun', 'hold'];

/** How an in-doubt attempt was resolved: the metric's label. */
export type Resolution = 'done' | 'not_done' | 'unknown' | 'conflict' | 're_run' | 'held';

export type Decision =
  /** the effect happened: record this result, never call again */
  | { do: 'complete'; result: unknown; resolution: 'done' }
  /** run the handler (or step) */
  | { do: 'run'; resolution: 'not_done' | 're_run' }
  /** ask again after the retry backoff */
  | { do: 'retry'; reason: string; resolution: 'unknown' }
  /** quarantine for a person's decision */
  | { do: 'hold'; reason: string; resolution: 'unknown' | 'conflict' | 'held' };

/**
 * `answer`: the reconcile's, or undefined when there is none. `attempt` is
 * this attempt's number; at `maxAttempts` an unknown answer is held, not
 * asked again.
 */
export function decide(
  answer: ReconcileAnswer | undefined,
  policy: InDoubtPolicy,
  attempt: number,
  maxAttempts: number,
): Decision {
  if (!answer) {
    return policy === 'rerun'
      ? { do: 'run', resolution: 're_run' }
      : {
          do: 'hold',
          reason: 'no reconcile, and the in-doubt policy is hold',
          resolution: 'held',
        };
  }
  switch (answer.outcome) {
    case 'done':
      return { do: 'complete', result: answer.result ?? null, resolution: 'done' };
    case 'not_done':
      return { do: 'run', resolution: 'not_done' };
    case 'conflict':
      return {
        do: 'hold',
        reason: `reconcile answered conflict: ${answer.reason}`,
        resolution: 'conflict',
      };
    case 'unknown': {
      const said = `reconcile answered unknown${answer.reason ? `: ${answer.reason}` : ''}`;
      return attempt >= maxAttempts
        ? {
            do: 'hold',
            reason: `${said} (attempt ${attempt} of ${maxAttempts})`,
            resolution: 'unknown',
          }
        : { do: 'retry', reason: said, resolution: 'unknown' };
    }
  }
}
