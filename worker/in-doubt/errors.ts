// The errors of in-doubt runs. InDoubt and ClaimLost are the handler's (the
// public surface exports them); HoldForPerson is the worker's own.

/**
 * The handler does not know whether its effect happened: it sent the request
 * and lost the answer (a reset connection, a timeout after the request went
 * out). The next attempt asks the handler's reconcile first; it never re-runs
 * blind unless the in-doubt policy says to.
 */
export class InDoubt extends Error {
  override readonly name = 'InDoubt';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * Thrown by ctx.intend and ctx.step: this run no longer holds its claim (it
 * was taken over, or its lease could not be confirmed in time). Make no call;
 * let it propagate. The worker that holds the claim decides the job.
 */
export class ClaimLost extends Error {
  override readonly name = 'ClaimLost';
}

/** A doubt that only a person can decide (conflict, policy hold, reconcile unknown to the ceiling). */
export class HoldForPerson extends Error {
  override readonly name = 'HoldForPerson';
}
