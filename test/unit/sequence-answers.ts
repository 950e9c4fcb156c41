// What a simulated world answers when the planner asks for a read
// (src/reconcile/plan.ts planToCompletion): the rollout and cohort sequence
// harnesses share it. A world without the operator's outside signals reads
// none (no Prometheus, no queue total, no unready workers to ask).
import type { PlanAnswers, PlanNeed } from '../../src/reconcile/plan.js';
import type { PodSample } from '../../src/reconcile/cohort/figures.js';

export interface AnsweringWorld {
  pods: ReadonlyArray<{ revision: string; restarts: number }>;
  /** each revision's recorded spec (its ControllerRevision) */
  records: ReadonlyMap<string, Record<string, unknown>>;
  /** the cohort pods' counters, where the world keeps them */
  cohortSamples?: () => PodSample[];
}

export function answerFromWorld(w: AnsweringWorld) {
  return (need: PlanNeed, answers: PlanAnswers): void => {
    switch (need.kind) {
      case 'pods':
        answers.pods = {
          ...answers.pods,
          [need.revision]: w.pods
            .filter((p) => p.revision === need.revision)
            .map((p) => ({ restarts: p.restarts })),
        };
        return;
      case 'revisionSpec':
        answers.revisionSpecs = {
          ...answers.revisionSpecs,
          [need.revision]: w.records.get(need.revision),
        };
        return;
      case 'cohortSamples':
        answers.cohortSamples = w.cohortSamples?.() ?? [];
        return;
      case 'seenVersions':
        answers.seenVersions = undefined;
        return;
      case 'queued':
        answers.queued = undefined;
        return;
      case 'workers':
        answers.workers = [];
        return;
      case 'podLoad':
        answers.podLoad = undefined;
    }
  };
}
