// A worker process for the chaos soak (bench/chaos.ts). Transactional mode:
// the business effect (a row in `effects`) commits in the same transaction as
// the claim's completion, so a SIGKILL at any instant leaves both or neither —
// which is what lets the soak count duplicate effects honestly. The payload
// says how the job behaves: ok, transient (fails its first `failTimes`
// attempts), permanent, or throttle (429 Retry-After 1 s on attempt 1).
import { createWorker, Permanent, Throttled } from '../worker/index.js';

interface ChaosPayload {
  n: number;
  kind: 'ok' | 'transient' | 'permanent' | 'throttle';
  failTimes?: number;
  ms?: number;
}

const worker = createWorker({
  contract: { keyRule: 'chaos:{n}', schemaVersions: [1] },
  mode: 'transactional',
  handlers: {
    chaos: async (job, ctx) => {
      const p = job.payload as ChaosPayload;
      if (p.kind === 'permanent') throw new Permanent(`job ${p.n} is invalid for good`);
      if (p.kind === 'transient' && job.attempt <= (p.failTimes ?? 1))
        throw new Error(`downstream reset on attempt ${job.attempt}`);
      if (p.kind === 'throttle' && job.attempt === 1)
        throw new Throttled('downstream answered 429', { retryAfterMs: 1000 });
      if (p.ms) await new Promise((r) => setTimeout(r, p.ms));
      await ctx.tx?.query('insert into effects (key, attempt, pid) values ($1, $2, $3)', [
        job.key,
        job.attempt,
        process.pid,
      ]);
      return { n: p.n };
    },
  },
});
await worker.start();
console.log(JSON.stringify({ ready: true, pid: process.pid }));
