// What one JobWorker reconcile observed (src/controller/observe.ts reads it):
// each source a value, or the reason it is missing.
import type { JobWorkerSpec } from '../../api/jobworker.js';
import type { KubeObject } from '../../api/kube-object.js';
import type { ProblemReason } from '../../api/reasons.js';

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
      /** the workers' own figures, when read this time (../scaling/capacity.ts) */
      capacity?: CapacityReading;
      /** what the worker pods saw of the queue's head, when the broker gives no head timestamp (../scaling/queue-age.ts) */
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
  /** the outbox spec.outbox names, when it names one (docs/outbox.md) */
  outbox?: OutboxInput;
  /** the broker's policies and flags, read only with a management URL (src/signals/broker-settings.ts) */
  brokerSettings?: BrokerSettingsRead;
}

/** A policy or operator policy as the management API lists it (`/api/policies/{vhost}`). */
export interface BrokerPolicy {
  name: string;
  pattern: string;
  'apply-to': string;
  priority: number;
  definition: Record<string, unknown>;
}

/** What the management API says of the broker's settings that can lose or stall jobs. */
export interface BrokerSettings {
  policies: BrokerPolicy[];
  operatorPolicies: BrokerPolicy[];
  /** `/api/feature-flags`: state enabled, disabled or unavailable; stability stable, required or experimental */
  featureFlags: Array<{ name: string; state: string; stability?: string }>;
  /** `/api/deprecated-features/used` (RabbitMQ 4.x; none where the API has no such path) */
  deprecatedFeaturesUsed: string[];
}

/** The broker's settings, or why they could not be read. */
export type BrokerSettingsRead =
  { ok: true; settings: BrokerSettings } | { ok: false; error: string };

/** The queue's statistics, as the management API gives them (src/signals/rabbitmq.ts). */
export interface QueueStats {
  /** classic, quorum or stream */
  type: string;
  messagesReady: number;
  messagesUnacked: number;
  consumers: number;
  /** seconds since the epoch; classic queues only */
  headMessageTimestamp?: number;
  publishRate: number;
  ackRate: number;
}

/**
 * One worker pod's view of the queue's head (worker/queue-head.ts), read
 * from its /metrics. Times are ms since the epoch; `lastAtMs` and
 * `lastUntimestampedAtMs` are 0 before the first such delivery.
 */
export interface HeadReading {
  /** the newest delivery that carried a timestamp: its age when it arrived (s), and when */
  lastAgeSeconds: number;
  lastAtMs: number;
  /** the newest delivery that carried none */
  lastUntimestampedAtMs: number;
  /** how long the consumer has had a free prefetch slot and received nothing (s) */
  idleSeconds: number;
}

/** One pod's counters since its process started. */
export interface CapacityCounters {
  pod: string;
  handlerSecondsSum: number;
  /** jobs_total{outcome="completed"} */
  completed: number;
}

/** Each pod's counters, read from the pods themselves or as Prometheus last scraped them. */
export interface CapacityReading {
  source: 'WorkerMetrics' | 'Prometheus';
  pods: CapacityCounters[];
}

/** A JobWorker that names an outbox is planned again this often: a stalled relay shows within it. */
export const OUTBOX_READ_MS = 10_000;

/** The outbox that feeds the JobWorker's queue, as last read (src/signals/outbox.ts). */
export interface OutboxInput {
  stalledAfterSeconds: number;
  /** the last read; undefined until one succeeds */
  stats?: {
    unsent: number;
    oldestSeconds: number | null;
    relay: {
      holder: string;
      heartbeatSeconds: number;
      lastError: string | null;
      lastErrorSeconds: number | null;
      lastSentSeconds: number | null;
    } | null;
    /** false: no jobfleet_outbox in that database yet */
    exists: boolean;
  };
  /** why the last read failed */
  error?: string;
}

/** The JobWorker's quarantine, as last read from the claims database. */
export interface DeadLetterInput {
  owner: string;
  maxAgeSeconds: number;
  queue: string;
  /** the last read; undefined until one succeeds */
  stats?: {
    quarantined: number;
    oldestAt: Date | null;
    /** jobs whose outcome is unknown (docs/in-doubt.md): being decided, and held for a person */
    inDoubt?: {
      deciding: number;
      held: number;
      heldJobs: Array<{ id: number; key: string | null; reason: string }>;
    };
  };
  /** why the last read failed */
  error?: string;
}
