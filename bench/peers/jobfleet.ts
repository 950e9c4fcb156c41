// jobfleet: createWorker from the public API with a no-op handler; the full
// path per job is decode → claim (PostgreSQL) → handler → record → ack. The
// claim store lives in a fresh schema of the bench database.
import pino from 'pino';
import {
  createWorker,
  type Handler,
  type HandlerDefinition,
  type Worker,
} from '../../worker/index.js';
import { createSchema } from '../../test/ground/postgres.js';
import { amqpQueue, JOB_TYPE, KEY_RULE, QUEUE } from './amqp-queue.js';
import { packageVersion, repoRoot, type BenchJob, type System } from './system.js';

export const system: System = {
  id: 'jobfleet',
  label: 'jobfleet',
  version: packageVersion(repoRoot),
  settings:
    'createWorker from worker/index.ts, no-op handler, external mode, defaults otherwise; prefetch per row',
  usesPostgres: true,
  prepare: async (services) => {
    const q = await amqpQueue(services, services.queueType);
    const db = await createSchema(services.pgUrl);
    return {
      target: {
        amqpUrl: q.vhost.amqpUrl,
        claimsUrl: db.url,
        queueType: services.queueType ?? 'classic',
      },
      fill: (n) => q.fill(n),
      openProducer: () => q.openProducer(),
      cleanup: async () => {
        await q.vhost.cleanup();
        await db.cleanup();
      },
    };
  },
  consumer: (target, options, hooks) => {
    let worker: Worker | undefined;
    return {
      open: () => {
        worker = createWorker({
          contract: { keyRule: KEY_RULE, schemaVersions: [1] },
          handlers: { [JOB_TYPE]: benchHandler(options, hooks) },
          logger: pino({ level: 'silent' }),
          handleSignals: false,
          // 'completed' is reported after the record is committed and the message acked.
          onOutcome: (result) => {
            if (result === 'completed') hooks.finished();
          },
          config: {
            queue: QUEUE,
            brokerUrl: target.amqpUrl as string,
            claimsUrl: target.claimsUrl as string,
            prefetch: options.prefetch ?? 64,
            queueType: target.queueType === 'quorum' ? 'quorum' : 'classic',
            metricsPort: 0,
          },
        });
        return Promise.resolve();
      },
      start: async () => {
        await worker?.start();
      },
      settle: () => hooks.allFinished(),
      close: async () => {
        await worker?.stop({ deadlineMs: 1000 });
      },
    };
  },
};

/**
 * The no-op handler, or (the in-doubt rows: bench/worker-throughput.ts) the
 * same with a reconcile beside it, an intent recorded first, or N steps.
 */
function benchHandler(
  options: Record<string, number>,
  hooks: { started(job: BenchJob): void },
): HandlerDefinition {
  const run: Handler = async (job, ctx) => {
    hooks.started(job.payload as BenchJob);
    if (options.intend) await ctx.intend({ ref: job.key });
    for (let i = 1; i <= (options.steps ?? 0); i++)
      await ctx.step(`step-${i}`, () => Promise.resolve(i));
    return null;
  };
  return options.reconcile
    ? { run, reconcile: () => Promise.resolve({ outcome: 'not_done' }) }
    : { run };
}
