// BullMQ (Redis, Lua scripts) as its docs describe a throughput worker
// (docs.bullmq.io guide/workers/concurrency and auto-removal-of-jobs;
// docs/gitbook/guide in taskforcesh/bullmq): one Worker with a high local
// concurrency factor, finished jobs removed on completion, jobs added with
// addBulk. Durability is Redis's, which the report prints as found: the
// others here all commit to disk before they count a job done.
import { Queue, Worker, type ConnectionOptions } from 'bullmq';
import { Redis } from 'ioredis';
import { randomBytes } from 'node:crypto';
import { installedVersion, sendAll, type BenchJob, type System } from './system.js';

const QUEUE = 'bench';

const workerOptions = { concurrency: 64, removeOnComplete: { count: 0 } };

const settings =
  `Worker concurrency ${workerOptions.concurrency}, removeOnComplete { count: 0 }, ` +
  `jobs added with addBulk; ioredis ${installedVersion('ioredis')} ` +
  '(https://docs.bullmq.io/guide/workers/concurrency, …/workers/auto-removal-of-jobs, …/queues/adding-bulks)';

const connection = (redisUrl: string): ConnectionOptions => {
  const u = new URL(redisUrl);
  return { host: u.hostname, port: Number(u.port || 6379) };
};

export interface RedisFacts {
  version: string;
  save: string;
  appendonly: string;
  appendfsync: string;
}

/** What a Redis restart keeps, in words, from the settings read off the server. */
export function redisPersistence(f: RedisFacts): { durable: boolean; words: string } {
  const settings = `Redis ${f.version}, save "${f.save}", appendonly ${f.appendonly}`;
  if (f.appendonly === 'yes')
    return { durable: true, words: `${settings} (appendfsync ${f.appendfsync})` };
  return {
    durable: false,
    words: f.save
      ? `${settings}: snapshots only, a restart loses the jobs since the last one`
      : `${settings}: nothing on disk, a restart loses every job, queued or in flight`,
  };
}

/** The Redis server's version and persistence settings, read rather than assumed. */
export async function redisFacts(redisUrl: string): Promise<RedisFacts | undefined> {
  const r = new Redis(redisUrl, {
    lazyConnect: true,
    connectTimeout: 2000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  r.on('error', () => undefined); // the failed connect() says it
  try {
    await r.connect();
    const info = await r.info('server');
    const version = /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown';
    const get = async (name: string) => (await r.config('GET', name))[1] ?? '';
    return {
      version,
      save: await get('save'),
      appendonly: await get('appendonly'),
      appendfsync: await get('appendfsync'),
    };
  } catch {
    return undefined;
  } finally {
    r.disconnect();
  }
}

export const system: System = {
  id: 'bullmq',
  label: 'BullMQ',
  version: installedVersion('bullmq'),
  settings,
  usesPostgres: false,
  unavailable: async ({ redisUrl }) =>
    (await redisFacts(redisUrl)) ? undefined : `no Redis answers at ${redisUrl}`,
  prepare: ({ redisUrl }) => {
    // A fresh key prefix per run: nothing collides, and obliterate() removes it all.
    const target = { redisUrl, prefix: `jobfleet-bench-${randomBytes(4).toString('hex')}` };
    const queue = () =>
      new Queue(QUEUE, { connection: connection(redisUrl), prefix: target.prefix });
    return Promise.resolve({
      target,
      fill: async (n) => {
        const q = queue();
        const batch = 1000;
        await sendAll(Math.ceil(n / batch), 1, (i) =>
          q.addBulk(
            Array.from({ length: Math.min(batch, n - i * batch) }, (_, j) => ({
              name: QUEUE,
              data: { n: i * batch + j, at: 0 },
            })),
          ),
        );
        await q.close();
      },
      openProducer: () => {
        const q = queue();
        return Promise.resolve({
          send: async (job: BenchJob) => {
            await q.add(QUEUE, job);
          },
          close: () => q.close(),
        });
      },
      cleanup: async () => {
        const q = queue();
        await q.obliterate({ force: true });
        await q.close();
      },
    });
  },
  consumer: (target, _options, hooks) => {
    let worker: Worker<BenchJob> | undefined;
    return {
      open: async () => {
        worker = new Worker<BenchJob>(
          QUEUE,
          (job) => {
            hooks.started(job.data);
            return Promise.resolve();
          },
          {
            connection: connection(target.redisUrl as string),
            prefix: target.prefix,
            autorun: false,
            ...workerOptions,
          },
        );
        // 'completed' fires once the job has been moved to completed (here: removed) in Redis.
        worker.on('completed', () => hooks.finished());
        worker.on('error', (err) => console.error('bullmq:', err));
        await worker.waitUntilReady();
      },
      start: () => {
        worker?.run().catch((err: unknown) => console.error('bullmq worker:', err));
        return Promise.resolve();
      },
      settle: () => hooks.allFinished(),
      close: async () => {
        await worker?.close();
      },
    };
  },
};
