// pg-boss (PostgreSQL, SKIP LOCKED polling) configured for throughput as its
// docs describe (pgboss.io/api/workers, docs/api/workers.md in timgit/pg-boss):
// batch fetch (batchSize), several polling loops in the process
// (localConcurrency, what teamSize became), burstWhenBatchFull so a loop keeps
// fetching while batches come back full, and LISTEN/NOTIFY dispatch
// (useListenNotify + a notify queue) so a new job wakes a worker at once.
// Everything else is the library default, its supervisor and maintenance included.
import { PgBoss, type ConstructorOptions, type WorkOptions } from 'pg-boss';
import { createSchema } from '../../test/ground/postgres.js';
import { installedVersion, sendAll, type BenchJob, type System } from './system.js';

const QUEUE = 'bench';

const workOptions = {
  batchSize: 64,
  localConcurrency: 4,
  burstWhenBatchFull: true,
} satisfies WorkOptions;

const settings =
  `work(): batchSize ${workOptions.batchSize}, localConcurrency ${workOptions.localConcurrency} ` +
  `(up to ${workOptions.batchSize * workOptions.localConcurrency} jobs in hand at once), ` +
  'burstWhenBatchFull; useListenNotify + queue notify: true (LISTEN/NOTIFY dispatch); other options ' +
  'default, supervisor and maintenance included (https://pgboss.io/api/workers)';

const boss = (target: Record<string, string>, extra: ConstructorOptions = {}) => {
  const b = new PgBoss({
    connectionString: target.pgUrl,
    schema: target.schema,
    ...extra,
  });
  b.on('error', (err) => console.error('pg-boss:', err));
  b.on('warning', (w) => console.error('pg-boss warning:', w));
  return b;
};

// The parent's instance only creates the schema and sends: maintenance is the worker's job.
const producerOptions: ConstructorOptions = { supervise: false, schedule: false };

export const system: System = {
  id: 'pg-boss',
  label: 'pg-boss',
  version: installedVersion('pg-boss'),
  settings,
  usesPostgres: true,
  prepare: async (services) => {
    const db = await createSchema(services.pgUrl);
    const target = { pgUrl: services.pgUrl, schema: db.schema };
    return {
      target,
      fill: async (n) => {
        const b = boss(target, producerOptions);
        await b.start();
        await b.createQueue(QUEUE, { notify: true });
        const batch = 1000;
        await sendAll(Math.ceil(n / batch), 1, (i) =>
          b.insert(
            QUEUE,
            Array.from({ length: Math.min(batch, n - i * batch) }, (_, j) => ({
              data: { n: i * batch + j, at: 0 },
            })),
          ),
        );
        await b.stop({ graceful: false, close: true });
      },
      openProducer: async () => {
        const b = boss(target, producerOptions);
        await b.start();
        return {
          send: async (job) => {
            await b.send(QUEUE, job);
          },
          close: () => b.stop({ graceful: false, close: true }),
        };
      },
      cleanup: () => db.cleanup(),
    };
  },
  consumer: (target, _options, hooks) => {
    const b = boss(target, { useListenNotify: true });
    return {
      open: async () => {
        await b.start();
      },
      start: async () => {
        await b.work<BenchJob>(QUEUE, workOptions, (jobs) => {
          for (const job of jobs) hooks.started(job.data);
          return Promise.resolve();
        });
      },
      // offWork waits for each loop's current batch, completion statement included.
      settle: async () => {
        await b.offWork(QUEUE, { wait: true });
        hooks.finishAll();
      },
      close: () => b.stop({ graceful: true, close: true }),
    };
  },
};
