// Rollouts and rollbacks: the planner's phases, the compatibility gate, the
// fixed-order rollback, revisions and the pause switch.
// The folder's only door: code outside it imports from here.
export type { RolloutStatus } from './gate.js';
export {
  ANNOTATION_PAUSE_BY,
  ANNOTATION_PAUSE_REASON,
  pauseSwitch,
  type PauseSwitch,
  wasPaused,
} from './pause.js';
export {
  planRollout,
  type PodFacts,
  type RolloutAnswers,
  type RolloutNeed,
  type RolloutPlan,
} from './planner.js';
export type { HistoryEntry } from './revisions.js';
