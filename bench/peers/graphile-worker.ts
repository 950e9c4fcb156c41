// graphile-worker (PostgreSQL, LISTEN/NOTIFY + SKIP LOCKED) with the settings
// its performance page gives for its own throughput figures
// (worker.graphile.org/docs/performance, website/docs/performance.md in
// graphile/worker): 24 concurrent jobs, a pool of 25, a local queue of 500
// jobs fetched per query, completions and failures batched with delay 0, and
// prepared statements (the default, stated here so it is not in doubt).
import { Logger, makeWorkerUtils, run, type Runner } from 'graphile-worker';
import { createSchema } from '../../test/ground/postgres.js';
import { installedVersion, sendAll, type BenchJob, type System } from './system.js';

const TASK = 'bench';

const workerSettings = {
  concurrentJobs: 24,
  maxPoolSize: 25,
  localQueue: { size: 500 },
  completeJobBatchDelay: 0,
  failJobBatchDelay: 0,
  preparedStatements: true,
};

const settings =
  `concurrentJobs ${workerSettings.concurrentJobs}, maxPoolSize ${workerSettings.maxPoolSize}, ` +
  `localQueue.size ${workerSettings.localQueue.size}, completeJobBatchDelay 0, failJobBatchDelay 0, ` +
  'preparedStatements true: the preset of its performance page ' +
  '(https://worker.graphile.org/docs/performance)';

const silent = new Logger(() => () => undefined);

const utils = (target: Record<string, string>) =>
  makeWorkerUtils({
    connectionString: target.pgUrl,
    schema: target.schema,
    logger: silent,
  });

export const system: System = {
  id: 'graphile-worker',
  label: 'graphile-worker',
  version: installedVersion('graphile-worker'),
  settings,
  usesPostgres: true,
  prepare: async (services) => {
    const db = await createSchema(services.pgUrl);
    const target = { pgUrl: services.pgUrl, schema: db.schema };
    return {
      target,
      fill: async (n) => {
        const u = await utils(target);
        await u.migrate();
        const batch = 1000;
        await sendAll(Math.ceil(n / batch), 1, (i) =>
          u.addJobs(
            Array.from({ length: Math.min(batch, n - i * batch) }, (_, j) => ({
              identifier: TASK,
              payload: { n: i * batch + j, at: 0 },
            })),
          ),
        );
        await u.release();
      },
      openProducer: async () => {
        const u = await utils(target);
        return {
          send: async (job) => {
            await u.addJob(TASK, job);
          },
          close: async () => {
            await u.release();
          },
        };
      },
      cleanup: () => db.cleanup(),
    };
  },
  consumer: (target, _options, hooks) => {
    let runner: Runner | undefined;
    let stopped: Promise<void> | undefined;
    const stop = () => (stopped ??= runner?.stop() ?? Promise.resolve());
    return {
      open: () => Promise.resolve(),
      start: async () => {
        runner = await run({
          noHandleSignals: true,
          logger: silent,
          crontab: '',
          taskList: {
            [TASK]: (payload) => {
              hooks.started(payload as BenchJob);
              return Promise.resolve();
            },
          },
          preset: {
            worker: {
              connectionString: target.pgUrl as string,
              schema: target.schema as string,
              ...workerSettings,
            },
          },
        });
      },
      // With batched completion a job is released after its handler returns;
      // a graceful stop flushes the batch.
      settle: async () => {
        await stop();
        hooks.finishAll();
      },
      close: stop,
    };
  },
};
