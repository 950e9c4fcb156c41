// An example worker image's entrypoint: ships orders by calling a (simulated)
// carrier API. What a real worker looks like with @jobfleet/worker — the
// operator passes JOBFLEET_* (queue, credentials, contract, revision); the
// code states the contract it implements and the handlers.
//
// The simulated carrier takes CARRIER_LATENCY_MS per call (default 100) and
// answers 429 with Retry-After when more than CARRIER_MAX_CONCURRENCY calls
// are in flight in this process (default: no limit). CARRIER_REJECT_EVERY=N
// makes it refuse one order in N for good (the demo's faulty revision).
//
// CARRIER_URL names a real carrier instead: one that dedupes nothing (every
// POST /bookings books) and answers GET /bookings?ref= with what it booked
// under our reference. Its handler records its intent before the call and
// reconciles before any re-run (docs/in-doubt.md): a worker killed mid-call
// is followed by a lookup, not a second booking.
import { createHash } from 'node:crypto';
import {
  createWorker,
  InDoubt,
  Permanent,
  Throttled,
  type HandlerDefinition,
  type Job,
} from '../../worker/index.js';

const latencyMs = Number(process.env.CARRIER_LATENCY_MS ?? 100);
const maxConcurrency = Number(process.env.CARRIER_MAX_CONCURRENCY ?? Infinity);
const rejectEvery = Number(process.env.CARRIER_REJECT_EVERY ?? 0);
let inFlight = 0;

interface ShipOrder {
  orderId: string;
  /** a negative quantity is a bad order: no retry will fix it */
  qty?: number;
}

async function carrierShip(order: ShipOrder, idempotencyKey: string, signal: AbortSignal) {
  if (inFlight >= maxConcurrency)
    throw new Throttled('carrier answered 429', { retryAfterMs: 1000 });
  if (rejectEvery && createHash('sha256').update(order.orderId).digest()[0]! % rejectEvery === 0)
    throw new Permanent(`carrier refused order ${order.orderId}: address does not validate`);
  inFlight++;
  try {
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(resolve, latencyMs);
      signal.addEventListener('abort', () => {
        clearTimeout(t);
        reject(new Error('aborted'));
      });
    });
    return { trackingId: `trk-${idempotencyKey}` };
  } finally {
    inFlight--;
  }
}

/** Our reference at the carrier: the same for every attempt of the key. */
const referenceOf = (job: Job) => `jobfleet-${job.key}`;

/** A carrier that takes no idempotency key, at `url`: looked up by our reference before any re-run. */
function bookingCarrier(url: string): HandlerDefinition {
  return {
    run: async (job, ctx) => {
      const ref = referenceOf(job);
      const details = { orderId: (job.payload as ShipOrder).orderId };
      await ctx.intend({ ref }); // durable before the call; ClaimLost if the claim is not ours
      let res: Response;
      try {
        res = await fetch(`${url}/bookings`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ ref, details }),
          signal: ctx.signal,
        });
      } catch (err) {
        throw new InDoubt(`booking ${ref}: ${(err as Error).message}`, { cause: err });
      }
      const throttled = Throttled.fromResponse(res);
      if (throttled) throw throttled;
      if (!res.ok) throw new Error(`carrier answered ${res.status}`);
      return { bookingId: ((await res.json()) as { id: number }).id };
    },
    reconcile: async (job, ctx) => {
      const ref = referenceOf(job);
      const res = await fetch(`${url}/bookings?ref=${encodeURIComponent(ref)}`, {
        signal: ctx.signal,
      });
      if (!res.ok) return { outcome: 'unknown', reason: `lookup answered ${res.status}` };
      const found = (await res.json()) as Array<{ id: number }>;
      if (found.length === 0) return { outcome: 'not_done' };
      if (found.length > 1)
        return { outcome: 'conflict', reason: `${found.length} bookings under ${ref}` };
      return { outcome: 'done', result: { bookingId: found[0]?.id } };
    },
  };
}

// (a trailing slash, as URL.toString() writes one, is not part of the paths below)
const carrierUrl = process.env.CARRIER_URL?.replace(/\/+$/, '');

const worker = createWorker({
  // The contract this code implements, stated here and never read from the
  // environment: a JobWorker whose spec.contract differs (JOBFLEET_KEY_RULE,
  // JOBFLEET_SCHEMA_VERSIONS) makes the worker refuse to start, naming both.
  contract: { keyRule: 'order:{orderId}:ship', schemaVersions: [1, 2] },
  handlers: {
    'order.ship': carrierUrl
      ? bookingCarrier(carrierUrl)
      : async (job, ctx) => {
          const order = job.payload as ShipOrder;
          if ((order.qty ?? 1) < 0)
            throw new Permanent(`order ${order.orderId} has qty ${order.qty}`);
          // The idempotency key goes to the carrier: a retried call ships once.
          return carrierShip(order, ctx.key, ctx.signal);
        },
  },
});
await worker.start();
