// The gate a replay passes before each message it takes (src/dlq/replay.ts's
// `gate`): it asks whether the replay must hold (./replay-hold.ts decides) at
// most every CHECK_MS while replaying, and every POLL_MS while held, and says
// when a hold starts, changes reason or ends. The JobReplay controller writes
// that to status and events; `jobfleet dlq replay` prints it.
import { setTimeout as sleep } from 'node:timers/promises';
import type { JobWorkerStatus } from '../api/jobworker.js';
import { ARRIVING_WINDOW_MS, replayHold, type Hold } from './replay-hold.js';
import type { DeadLetterStore } from './store.js';

export const HOLD_CHECK_MS = 2000;
export const HOLD_POLL_MS = 5000;

export interface HoldGateDeps {
  /** the hold now, if any */
  check(): Promise<Hold | undefined>;
  /** a hold began or its reason changed */
  onHeld(hold: Hold): Promise<void> | void;
  /** the hold `was` ended: the replay goes on */
  onResumed(was: Hold): Promise<void> | void;
  now(): number;
  /** aborted: the gate opens and the replay stops (its own signal) */
  signal?: AbortSignal;
  /** while held longer than this, the gate throws HoldTimeout */
  timeoutMs?: number;
  /** waits between two checks while held (a fake clock's in tests) */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

const realSleep = (ms: number, signal?: AbortSignal) =>
  sleep(ms, undefined, signal && { signal }).catch(() => undefined); // aborted: the loop ends

export class HoldTimeout extends Error {
  constructor(readonly hold: Hold) {
    super(`still held after the hold timeout: ${hold.message}`);
  }
}

/** Resolves when the replay may take its next message. */
export function holdGate(d: HoldGateDeps): () => Promise<void> {
  let checkedAt = -Infinity;
  let held: { hold: Hold; since: number } | undefined;
  return async () => {
    while (!d.signal?.aborted) {
      const now = d.now();
      if (!held && now - checkedAt < HOLD_CHECK_MS) return;
      checkedAt = now;
      const hold = await d.check();
      if (!hold) {
        if (held) await d.onResumed(held.hold);
        held = undefined;
        return;
      }
      if (held?.hold.reason !== hold.reason) {
        await d.onHeld(hold);
        held = { hold, since: held?.since ?? now };
      }
      if (d.timeoutMs !== undefined && now - held.since >= d.timeoutMs) throw new HoldTimeout(hold);
      await (d.sleep ?? realSleep)(HOLD_POLL_MS, d.signal);
    }
  };
}

/**
 * The hold now, for a replay of `queue`'s dead letters of `failureClass`:
 * the target JobWorker's status (when known) and what still arrives.
 */
export async function askHold(
  store: Pick<DeadLetterStore, 'arriving'>,
  t: {
    jobWorker: string;
    queue: string;
    failureClass?: string | undefined;
    status: JobWorkerStatus | undefined;
    now: number;
  },
): Promise<Hold | undefined> {
  const failureClass = t.failureClass ? { failureClass: t.failureClass } : {};
  return replayHold({
    jobWorker: t.jobWorker,
    status: t.status,
    recentDeadLetters: await store.arriving({
      queue: t.queue,
      ...failureClass,
      since: new Date(t.now - ARRIVING_WINDOW_MS),
    }),
    ...failureClass,
  });
}
