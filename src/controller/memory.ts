// What this process keeps of each JobWorker between reconciles — the
// scaler's window, the status it last wrote (or holds back), its last
// quarantine read, when its pods' counters were read — in one record per
// JobWorker, so a deleted JobWorker is forgotten by one delete. Lost on
// restart, and that is fine: each part is rebuilt from the cluster and the
// queue within a few reconciles.
import type { JobWorkerSpec, JobWorkerStatus } from '../api/jobworker.js';
import type { Parsed } from '../api/parse.js';
import type { ScalingMemory } from '../reconcile/plan.js';
import type { StatusMemory } from '../reconcile/children/index.js';
import type { WorkerReport } from '../reconcile/status/index.js';
import type { DeadLetterStats } from '../signals/dead-letters.js';

export interface DeadLetterRead {
  stats?: DeadLetterStats;
  error?: string;
}

export interface JobWorkerMemory {
  /** the scaler's window and AIMD cap, the age estimate's and the cohort figures' memory */
  scaling?: ScalingMemory;
  /** the status last written, compared before writing again (../reconcile/children/writes.ts) */
  status?: StatusMemory;
  /** its Deployment was written: a reconcile that fails later keeps its creation turn */
  deploymentApplied?: boolean;
  /** the resourceVersions our last applies gave its Deployments: their watch events wake nothing */
  deploymentWrites?: string[];
  /** the last quarantine read: its stats, or the error and the stats before it */
  deadLetters?: DeadLetterRead;
  /** where its quarantine is read: ./quarantine-poll.ts reads it there between reconciles */
  quarantineAt?: { claimsUrl: string; queue: string };
  /** the generation a deprecated spec field was last announced for (a Warning event) */
  deprecationWarned?: number;
  /** when the worker pods' own figures were last read (ms) */
  countersReadAt?: number;
  /** the unready pods' last answer (ms, which pods, and what they said), reused until the next asking is due */
  workers?: { at: number; pods: string; reports: WorkerReport[] | undefined };
  /** the spec as parsed and checked, for one uid and generation: an unchanged spec is not validated again */
  spec?: ParsedSpec;
  /** what the last plan was made from (./unchanged.ts): a reconcile that finds the same makes none */
  planned?: PlannedFrom;
  /** its first status, held (src/reconcile/status/first-status.ts): since when (ms; held at most that long after), and the last one planned */
  firstStatusHeld?: { at: number; status: JobWorkerStatus };
}

export interface ParsedSpec {
  /** uid/generation */
  of: string;
  parsed: Parsed<JobWorkerSpec>;
  /** what the environment rules say of it (src/reconcile/children: envProblems) */
  env: string[];
}

/** The inputs of a JobWorker's last plan, as compared by ./unchanged.ts. */
export interface PlannedFrom {
  /** the leadership term's caches it read: a new term plans afresh */
  term: object;
  /** the JobWorker's resourceVersions that are still the same object: the one planned from, and the one our status write made */
  versions: string[];
  /** its children's resourceVersions, as ./unchanged.ts lists them */
  children: string;
  /** the quarantine read it saw (compared by identity: each read is a new one) */
  deadLetters: DeadLetterRead | undefined;
  /** when the plan asked to look again (ms); undefined: only news wakes it */
  dueAt?: number;
}

export class JobWorkerMemories {
  private readonly byKey = new Map<string, JobWorkerMemory>();

  /** `key`'s memory, begun empty the first time. */
  of(key: string): JobWorkerMemory {
    let m = this.byKey.get(key);
    if (!m) this.byKey.set(key, (m = {}));
    return m;
  }

  peek(key: string): JobWorkerMemory | undefined {
    return this.byKey.get(key);
  }

  /** Whether `memory` is still `key`'s: a read that finishes after forget() must not write. */
  current(key: string, memory: JobWorkerMemory): boolean {
    return this.byKey.get(key) === memory;
  }

  /** Every JobWorker's key and memory. */
  entries(): IterableIterator<[string, JobWorkerMemory]> {
    return this.byKey.entries();
  }

  forget(key: string): void {
    this.byKey.delete(key);
  }
}
