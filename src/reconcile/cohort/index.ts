// The Cohort strategy: a few pods of the new revision beside the stable ones,
// its steps, its checks and the figures they read.
// The folder's only door: code outside it imports from here.
export {
  type FiguresMemory,
  LATENCY_BOUNDS,
  latencyWords,
  type PodCounters,
  type PodSample,
  zeroCounters,
} from './figures.js';
export {
  ANNOTATION_COHORT_COMMAND,
  type CohortCommand,
  type CohortOutput,
  cohortStep,
  DEFAULT_STEPS,
  parseCommand,
} from './steps.js';
