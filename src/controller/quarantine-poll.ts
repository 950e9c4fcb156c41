// The quarantines between reconciles. Every `everyMs`, each claims database
// some JobWorker reads its quarantine from is read once (one grouped query,
// ../signals/dead-letters.ts), and only a JobWorker whose read says
// something new is queued. Before, each JobWorker asked to be reconciled
// every 30 s to read it: on a thousand settled JobWorkers, those reconciles
// were most of the operator's CPU (bench/RESULTS.md, operator, steady state).
import { isDeepStrictEqual } from 'node:util';
import type { DeadLetterReader } from '../signals/dead-letters.js';
import type { DeadLetterRead, JobWorkerMemories } from './memory.js';

export interface QuarantinePollDeps {
  reader: DeadLetterReader;
  /** where each JobWorker's quarantine is read (set by its reconciles) and its last read */
  memory: JobWorkerMemories;
  everyMs: number;
  /** queues the JobWorker `key` */
  wake: (key: string) => void;
}

export class QuarantinePoll {
  private timer: NodeJS.Timeout | undefined;
  private polling: Promise<void> | undefined;

  constructor(private readonly d: QuarantinePollDeps) {}

  start(): void {
    this.timer ??= setInterval(() => void this.poll(), this.d.everyMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One round: every database read afresh, once; a JobWorker whose read changed is woken with it in its memory. */
  poll(): Promise<void> {
    this.polling ??= this.round().finally(() => (this.polling = undefined));
    return this.polling;
  }

  private async round(): Promise<void> {
    const { memory, reader } = this.d;
    await Promise.all(
      [...memory.entries()].map(async ([key, m]) => {
        const at = m.quarantineAt;
        if (!at) return;
        // maxAge 0: this round's first read of a database queries it, the others share that query
        const read = await readQuarantine(reader, at, 0, () => m.deadLetters);
        // a JobWorker deleted meanwhile stays forgotten
        if (!memory.current(key, m) || sameRead(m.deadLetters, read)) return;
        // a new read object: the last plan no longer stands (./unchanged.ts)
        m.deadLetters = read;
        this.d.wake(key);
      }),
    );
  }
}

/**
 * One JobWorker's quarantine read from a snapshot at most `maxAgeMs` old: its
 * stats, or the error with the stats `before()` still holds at that moment.
 */
export async function readQuarantine(
  reader: DeadLetterReader,
  at: { claimsUrl: string; queue: string },
  maxAgeMs: number,
  before: () => DeadLetterRead | undefined,
): Promise<DeadLetterRead> {
  try {
    return { stats: await reader.read(at.claimsUrl, at.queue, maxAgeMs) };
  } catch (err) {
    return { stats: before()?.stats, error: (err as Error).message };
  }
}

/** Two quarantine reads that say the same. */
export function sameRead(a: DeadLetterRead | undefined, b: DeadLetterRead | undefined): boolean {
  return a?.error === b?.error && isDeepStrictEqual(a?.stats, b?.stats);
}
