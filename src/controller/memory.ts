// What this process keeps of each JobWorker between reconciles — the
// scaler's window, the status it last wrote, its last quarantine read, when
// its pods' counters were read — in one record per JobWorker, so a deleted
// JobWorker is forgotten by one delete. Lost on restart, and that is fine:
// each part is rebuilt from the cluster and the queue within a few reconciles.
import type { ScalingMemory } from '../reconcile/plan.js';
import type { StatusMemory } from '../reconcile/children/index.js';
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
  /** the last quarantine read: its stats, or the error and the stats before it */
  deadLetters?: DeadLetterRead;
  /** the generation a deprecated spec field was last announced for (a Warning event) */
  deprecationWarned?: number;
  /** when the worker pods' own figures were last read (ms) */
  countersReadAt?: number;
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

  forget(key: string): void {
    this.byKey.delete(key);
  }
}
