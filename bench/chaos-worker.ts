// A worker process for the chaos soak (bench/chaos.ts), in the mode
// CHAOS_MODE names:
// - transactional: the business effect (a row in `effects`) commits in the
//   same transaction as the claim's completion, so a SIGKILL at any instant
//   leaves both or neither — which lets the soak count duplicate effects.
// - external: the effect is a call to a downstream that takes ctx.key as its
//   idempotency key (its own connection; `effects` is unique per key, and
//   every call is also logged in `effect_calls`), then the record goes through
//   group commit like any job: the batched claims, records and acks.
// The payload says how the job behaves: ok, transient (fails its first
// `failTimes` attempts), permanent, or throttle (429 Retry-After 1 s on its first run).
import pg from 'pg';
import { createWorker, Permanent, Throttled, type HandlerContext } from '../worker/index.js';

interface ChaosPayload {
  n: number;
  kind: 'ok' | 'transient' | 'permanent' | 'throttle';
  failTimes?: number;
  ms?: number;
}

const external = process.env.CHAOS_MODE === 'external';
const downstream = external
  ? new pg.Pool({ connectionString: process.env.JOBFLEET_CLAIMS_URL, max: 4 })
  : undefined;
downstream?.on('error', () => undefined); // a terminated backend: the next call fails and retries

async function effect(key: string, attempt: number, ctx: HandlerContext): Promise<void> {
  const values = [key, attempt, process.pid];
  if (!downstream) {
    await ctx.tx?.query('insert into effects (key, attempt, pid) values ($1, $2, $3)', values);
    return;
  }
  await downstream.query(
    `with call as (insert into effect_calls (key, attempt, pid) values ($1, $2, $3))
     insert into effects (key, attempt, pid) values ($1, $2, $3) on conflict (key) do nothing`,
    values,
  );
}

const worker = createWorker({
  contract: { keyRule: 'chaos:{n}', schemaVersions: [1] },
  mode: external ? 'external' : 'transactional',
  handlers: {
    chaos: async (job, ctx) => {
      const p = job.payload as ChaosPayload;
      if (p.kind === 'permanent') throw new Permanent(`job ${p.n} is invalid for good`);
      if (p.kind === 'transient' && job.attempt <= (p.failTimes ?? 1))
        throw new Error(`downstream reset on attempt ${job.attempt}`);
      if (p.kind === 'throttle' && job.throttled === 0)
        throw new Throttled('downstream answered 429', { retryAfterMs: 1000 });
      if (p.ms) await new Promise((r) => setTimeout(r, p.ms));
      await effect(job.key, job.attempt, ctx);
      return { n: p.n };
    },
  },
});
await worker.start();
console.log(JSON.stringify({ ready: true, pid: process.pid }));
