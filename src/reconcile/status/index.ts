// The JobWorker's status: the conditions computed from the plan, and what
// the worker pods say of themselves.
// The folder's only door: code outside it imports from here.
export { computeStatus, deadLetterDueInMs, observeDeployment } from './status.js';
export { duration } from './duration.js';
export { FIRST_STATUS_HOLD_MS, firstStatusHoldMs, planFromHeld } from './first-status.js';
export {
  parseWorkerWords,
  type WorkerReport,
  workersAskEveryMs,
  workersDueInMs,
  workersNeedChecking,
  workersReadyCondition,
  workersShortSince,
} from './workers.js';
