// Scaling: the age of the oldest waiting message, what a replica can do,
// the replicas that follow, and which pods go first when they fall.
// The folder's only door: code outside it imports from here.
export {
  type CapacityEstimate,
  type CapacityMemory,
  type CapacitySource,
  estimateCapacity,
} from './capacity.js';
export {
  type AgeMemory,
  ageRising,
  type AgeSource,
  type EstimatedBecause,
  queueAge,
  RISE_SUSTAIN_MS,
} from './queue-age.js';
export {
  decideReplicas,
  type LimitedBy,
  type ScalingSpec,
  type ScalingState,
  type Signals,
} from './replicas.js';
export type { ScalingOutcome } from './outcome.js';
export { chooseRemovals, DELETION_COST, type PodLoad, type Removal } from './scale-down.js';
