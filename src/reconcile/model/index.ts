// The reconcile's shared vocabulary, below every concern: what was observed,
// the conditions a concern sets, the events it announces, how times are written.
// The folder's only door: code outside it imports from here.
export { type ConditionInput, isTrue, phaseOf, setCondition } from './conditions.js';
export type { PlanEvent } from './events.js';
export type {
  BrokerPolicy,
  BrokerSettings,
  BrokerSettingsRead,
  CapacityReading,
  DeadLetterInput,
  OutboxInput,
  HeadReading,
  Observation,
  CapacityCounters,
  Problem,
  QueueObservation,
  QueueStats,
} from './observation.js';
export { OUTBOX_READ_MS } from './observation.js';
export { iso } from './time.js';
export { visibleStatus } from './visible.js';
