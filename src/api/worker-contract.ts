// What the operator and the worker runtime agree on, seen from the operator:
// the JOBFLEET_* variables it sets on the worker container, and the words a
// worker's /readyz answers with. The worker library (worker/) defines them;
// the planner reads them through here, so that src/reconcile/ depends on
// src/api/ alone.
export { ENV, type WorkerConfigInput } from '../../worker/config.js';
export { NOT_READY_REASONS, PASSING } from '../../worker/readiness.js';
export { topology } from '../../worker/topology.js';
export { HOLD_LIMIT_MS } from '../../worker/hold-limit.js';
