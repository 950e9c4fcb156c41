// At most `size` JobWorkers being created at once: a JobWorker whose
// Deployment does not exist yet waits here while `size` others have theirs
// created but not yet through the control plane. Without it, a mass create
// hands the controller manager every Deployment at once; its queues are FIFO,
// so each Deployment's later steps (pods ready → status Available) wait
// behind every other's first, and almost nothing turns Healthy until nearly
// everything does. Fed a window at a time, the control plane finishes them
// in order at the same total rate: workers start consuming progressively.
//
// A creation leaves the window when its Deployment has its pods (the
// controller manager's part is done; image pulls and readiness are not
// waited for, so a slow registry does not slow creation) or after
// `timeoutMs` (a Deployment that cannot get pods — quota, admission — must
// not hold a slot forever). Pure: the caller passes the clock, and starts
// the keys it is given.

export interface CreationWindowOptions {
  /** creations in flight at once; 0: no window */
  size: number;
  timeoutMs: number;
}

export class CreationWindow {
  /** key → when its slot was taken */
  private readonly inFlight = new Map<string, number>();
  /** keys waiting for a slot, in arrival order (a Set keeps it and merges repeats) */
  private readonly waiting = new Set<string>();

  constructor(private readonly opts: CreationWindowOptions) {}

  /**
   * Whether the creation of `key` may start now; if not, it waits its turn.
   * A key that holds a turn restarts its clock: a turn handed out by `fill`
   * counts from when its reconcile starts, not from when it was queued.
   */
  admit(key: string, now: number): boolean {
    if (this.opts.size <= 0) return true;
    const turn =
      this.inFlight.has(key) || (this.inFlight.size < this.opts.size && this.waiting.size === 0);
    if (turn) this.inFlight.set(key, now);
    else this.waiting.add(key);
    return turn;
  }

  /**
   * `key`'s Deployment has its pods, or the JobWorker is gone: its slot is
   * free. Returns the waiting keys to start now, oldest first.
   */
  release(key: string, now: number): string[] {
    this.waiting.delete(key);
    this.inFlight.delete(key);
    return this.fill(now);
  }

  /** Frees the slots held past the timeout; returns the waiting keys to start now. */
  expire(now: number): string[] {
    for (const [key, at] of this.inFlight)
      if (now - at >= this.opts.timeoutMs) this.inFlight.delete(key);
    return this.fill(now);
  }

  /**
   * Hands free slots to the oldest waiting keys. The slot is theirs from now
   * (their reconcile finds it taken by themselves), and one whose JobWorker
   * went meanwhile holds it only until the timeout.
   */
  private fill(now: number): string[] {
    const start: string[] = [];
    for (const key of this.waiting) {
      if (this.inFlight.size >= this.opts.size) break;
      this.waiting.delete(key);
      this.inFlight.set(key, now);
      start.push(key);
    }
    return start;
  }

  get stats(): { inFlight: number; waiting: number } {
    return { inFlight: this.inFlight.size, waiting: this.waiting.size };
  }
}

/** The controller manager's part of a creation is done: the Deployment's current generation has all its pods. */
export function hasItsPods(d: {
  metadata: { generation?: number };
  spec?: unknown;
  status?: unknown;
}): boolean {
  const spec = d.spec as { replicas?: number } | undefined;
  const status = d.status as { observedGeneration?: number; replicas?: number } | undefined;
  return (
    (status?.observedGeneration ?? 0) >= (d.metadata.generation ?? 1) &&
    (status?.replicas ?? 0) >= (spec?.replicas ?? 1)
  );
}
