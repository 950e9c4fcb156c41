// The worker: one handler per job type, and the contract it implements. The
// operator passes everything else as JOBFLEET_* variables (queue, broker and
// claims URLs from your Secrets, prefetch, retry bounds, drain deadline).
import { createWorker, Permanent, Throttled } from '@jobfleet/worker';
import { shipOrder, type Order } from './carrier.js';

const worker = createWorker({
  // The contract: how a job's idempotency key is made from its payload, and
  // the payload schema versions this code reads. The JobWorker's
  // spec.contract must say the same; the operator blocks a rollout that
  // changes either while messages of the old contract wait.
  contract: { keyRule: 'order:{orderId}:ship', schemaVersions: [1, 2] },
  handlers: {
    'order.ship': async (job, ctx) => {
      const order = job.payload as Order;
      // Permanent: no retry can fix it; the job goes to the quarantine with this reason.
      if (!order.orderId) throw new Permanent('payload.orderId is missing');
      const answer = await shipOrder(order, ctx.key, ctx.signal);
      // Throttled: retried after the downstream's Retry-After, and counted for the operator's cap.
      if (answer.status === 429)
        throw new Throttled('carrier throttles', { retryAfterMs: answer.retryAfterMs });
      // Anything else thrown is transient: retried with bounded, jittered backoff.
      if (answer.status >= 500) throw new Error(`carrier answered ${answer.status}`);
      return { trackingId: answer.trackingId }; // recorded as the job's result, then acked
    },
  },
});
await worker.start();
