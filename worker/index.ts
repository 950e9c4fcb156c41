// @jobfleet/worker — the public surface. Everything else is internal.
export { createWorker, type Worker, type WorkerOptions } from './worker.js';
export type {
  Handler,
  HandlerContext,
  HandlerDefinition,
  Job,
  DeliveryResult,
  Reconcile,
  FollowUps,
} from './delivery.js';
export { Permanent, Throttled, parseRetryAfter } from './errors.js';
export {
  ClaimLost,
  InDoubt,
  type Doubt,
  type DoubtCause,
  type InDoubtPolicy,
  type PreviousAttempt,
  type ReconcileAnswer,
  type ReconcileContext,
  type StepOptions,
} from './in-doubt/index.js';
export { publish, HEADERS, type PublishJob } from './producer.js';
export {
  enqueue,
  migrateOutbox,
  startRelay,
  type OutboxJob,
  type Queryable,
  type Relay,
  type RelayOptions,
} from './outbox/index.js';
export { ConfigError, loadConfig, type WorkerConfig, type WorkerConfigInput } from './config.js';
export type { Contract } from './contract.js';
