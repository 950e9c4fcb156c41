// An example worker image's entrypoint: ships orders by calling a (simulated)
// carrier API. What a real worker looks like with @jobfleet/worker — the
// operator passes JOBFLEET_* (queue, credentials, contract, revision); the
// code states the contract it implements and the handlers.
//
// The simulated carrier takes CARRIER_LATENCY_MS per call (default 100) and
// answers 429 with Retry-After when more than CARRIER_MAX_CONCURRENCY calls
// are in flight in this process (default: no limit). CARRIER_REJECT_EVERY=N
// makes it refuse one order in N for good (the demo's faulty revision).
import { createHash } from 'node:crypto';
import { createWorker, Permanent, Throttled } from '../../worker/index.js';

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

const worker = createWorker({
  // The contract this code implements, stated here and never read from the
  // environment: a JobWorker whose spec.contract differs (JOBFLEET_KEY_RULE,
  // JOBFLEET_SCHEMA_VERSIONS) makes the worker refuse to start, naming both.
  contract: { keyRule: 'order:{orderId}:ship', schemaVersions: [1, 2] },
  handlers: {
    'order.ship': async (job, ctx) => {
      const order = job.payload as ShipOrder;
      if ((order.qty ?? 1) < 0) throw new Permanent(`order ${order.orderId} has qty ${order.qty}`);
      // The idempotency key goes to the carrier: a retried call ships once.
      return carrierShip(order, ctx.key, ctx.signal);
    },
  },
});
await worker.start();
