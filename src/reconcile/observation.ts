// What one JobWorker reconcile observed (src/controller/observe.ts reads it):
// each source a value, or the reason it is missing.
import type { JobWorkerSpec } from '../api/jobworker.js';
import type { KubeObject } from '../kube/client.js';
import type { CapacityReading } from './capacity.js';
import type { HeadReading, QueueStats } from './queue-age.js';
import type { DeadLetterInput } from './status.js';
import type { ProblemReason } from './reasons.js';

export interface Problem {
  reason: ProblemReason;
  message: string;
}

/** The queue as read for scaling: its statistics, or why there are none. */
export type QueueObservation =
  | {
      ok: true;
      stats: QueueStats;
      throttleRate?: number;
      /** the workers' own figures, when read this time (./capacity.ts) */
      capacity?: CapacityReading;
      /** what the worker pods saw of the queue's head, when the broker gives no head timestamp (./queue-age.ts) */
      heads?: HeadReading[];
    }
  | { ok: false; missing: string };

export interface Observation {
  raw: KubeObject;
  /** the parsed spec; undefined when it is invalid (the problems say why) */
  spec: JobWorkerSpec | undefined;
  /** what a person must fix: an invalid spec, a missing Secret or key */
  problems: Problem[];
  /** Secret values by the field that names them (never logged, never in status) */
  secrets: Map<string, string>;
  deployment: KubeObject | undefined;
  /** the Cohort strategy's Deployment (<name>-cohort), when one exists */
  cohortDeployment?: KubeObject;
  /** its other children as the watches last saw them: the metrics Service and the PDB */
  others: KubeObject[];
  /** the pods labelled as this JobWorker's, as the watch last saw them (only what is read of them) */
  pods: KubeObject[];
  /** the ControllerRevisions labelled as this JobWorker's, whoever owns them (a JobWorker of the same name before may have left some) */
  records: KubeObject[];
  /** read only when the spec is valid and nothing is missing */
  queue?: QueueObservation;
  /** whether the queue is read at all (a management URL is set): the reconcile polls then */
  polling: boolean;
  deadLetters?: DeadLetterInput;
}
