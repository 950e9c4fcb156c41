// A handler's abort signal, made only when the handler reads it: most never
// do, and a controller plus a drain listener per job cost more than the rest
// of a no-op job's bookkeeping. Aborted by a lost lease or the drain deadline,
// whether or not it exists yet: a signal made later starts aborted.

export class RunSignal {
  private controller: AbortController | undefined;
  private ended = false;
  private aborted = false;
  private reason: unknown;
  /** the drain listener, made with the controller: a run that never reads the signal has neither */
  private onDrain: (() => void) | undefined;

  constructor(private readonly drain: AbortSignal) {}

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
      else if (this.drain.aborted) this.abort(this.drain.reason);
      else if (!this.ended) {
        this.onDrain = () => this.abort(this.drain.reason);
        this.drain.addEventListener('abort', this.onDrain, { once: true });
      }
    }
    return this.controller.signal;
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.controller?.abort(reason);
  }

  /** The run is over: nothing is kept on the drain signal, nor added later by a late read. */
  done(): void {
    this.ended = true;
    if (this.onDrain) this.drain.removeEventListener('abort', this.onDrain);
    this.onDrain = undefined;
  }
}
