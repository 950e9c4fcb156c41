// What the scaler decided in one reconcile, and what it read to decide: the
// status (../status/) reports it, the operator's gauges export it.
import type { CapacitySource } from './capacity.js';
import type { AgeSource, EstimatedBecause } from './queue-age.js';
import type { LimitedBy } from './replicas.js';

export interface ScalingOutcome {
  desired: number;
  /** the objective (spec.scaling.targetOldestAgeSeconds), for the alerts' gauge */
  targetAgeSeconds: number;
  limitedBy: LimitedBy;
  message: string;
  signalOk: boolean;
  /** the oldest message's age: the queue's head, or the outbox's oldest unsent row when older */
  oldestAgeSeconds?: number;
  /** the queue's own head: what a rollout's analysis and a rollback's verification read */
  queueAgeSeconds?: number;
  /** the outbox's oldest unsent row for this queue, when spec.outbox names one */
  outboxAgeSeconds?: number;
  queueDepth?: number;
  ageSource?: AgeSource;
  /** why the age is estimated, when the user can change it */
  estimatedBecause?: EstimatedBecause;
  capacitySource?: CapacitySource | 'Saturation';
  capacityPerReplica?: number;
  throttling?: boolean;
}
