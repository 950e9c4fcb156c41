// In-doubt runs (docs/in-doubt.md): an attempt whose outcome is unknown is
// decided against the downstream's observed state before anything runs
// again. The door of worker/in-doubt/: delivery.ts calls it at named points
// (the claim's history read, the doubt resolved, the run's ctx.intend and
// ctx.step, the run ended in doubt).
export { readAnswer, type ReconcileAnswer } from './answers.js';
export {
  describeDoubt,
  readHistory,
  type AttemptEnd,
  type AttemptHistory,
  type Doubt,
  type DoubtCause,
  type PreviousAttempt,
} from './attempts.js';
export { decide, IN_DOUBT_POLICIES, type InDoubtPolicy, type Resolution } from './decide.js';
export { ClaimLost, HoldForPerson, InDoubt } from './errors.js';
export { resolveDoubt, type DoubtDecision } from './resolve.js';
export {
  RunRecord,
  type ReconcileContext,
  type RunRecordStore,
  type StepOptions,
} from './run-record.js';
