// The outbox's costs (`make bench BENCH=outbox`), on the ground's RabbitMQ 4
// quorum queue (the default queue type; the machine's RabbitMQ with a classic
// queue when the chroot was never built) and PostgreSQL, each repetition
// side by side with its baseline, the order reversed every other one:
//
// - Relay throughput: 20,000 jobs from a pre-filled outbox, from the relay's
//   start until the last row is marked sent, against publishing the same
//   jobs directly with confirms (500 in flight at a time, the relay's batch).
// - Latency at 500 jobs/s: from the enqueue's COMMIT to the handler's start
//   (the relay in the producer's process), against direct publish(): from
//   the call to the handler's start. One worker, in this process.
import amqp, { type ConfirmChannel } from 'amqplib';
import pino from 'pino';
import {
  createWorker,
  enqueue,
  migrateOutbox,
  publish,
  startRelay,
  type Relay,
} from '../worker/index.js';
import { insertEntries, outboxEntry } from '../worker/outbox/index.js';
import { renderJob, sendConfirmed, wireMessage } from '../worker/producer.js';
import { topology } from '../worker/topology.js';
import { createSchema } from '../test/ground/postgres.js';
import { createVhost } from '../test/ground/rabbit.js';
import { configuredUrls } from '../test/ground/services.js';
import { groundBroker, type GroundBroker } from './ground-broker.js';
import { producePaced } from './peers/paced-producer.js';
import { wallMs } from './peers/system.js';
import { median, percentile } from './stats.js';

export interface OutboxBenchOptions {
  jobs: number;
  runs: number;
  rate: number;
  seconds: number;
}

export interface ThroughputRun {
  relayPerSecond: number;
  directPerSecond: number;
}

export interface LatencyRun {
  outbox: { p50: number; p99: number; jobs: number };
  direct: { p50: number; p99: number; jobs: number };
}

export interface OutboxBenchResult {
  options: OutboxBenchOptions;
  broker: string;
  throughput: ThroughputRun[];
  latency: LatencyRun[];
}

const QUEUE = 'bench.outbox';
const JOB = (n: number, prefix = 'b') => ({
  type: 'ship',
  schemaVersion: 1,
  payload: { orderId: `${prefix}${n}`, parcels: 1 },
  keyRule: 'order:{orderId}:ship',
});
const silent = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A vhost with the work queue declared as the workers declare it, and two schemas. */
async function ground(broker: GroundBroker) {
  const urls = configuredUrls();
  const rabbit = await createVhost(broker.amqpUrl, broker.mgmtUrl);
  const claims = await createSchema(urls.pgUrl);
  const app = await createSchema(urls.pgUrl);
  const conn = await amqp.connect(rabbit.amqpUrl);
  const ch = await conn.createConfirmChannel();
  const work = topology({
    queue: QUEUE,
    deadLetterQueue: `${QUEUE}.dlq`,
    initialDelaySeconds: 1,
    maxDelaySeconds: 4,
    queueType: broker.queueType,
  }).work;
  await ch.assertQueue(work.name, work.options);
  await migrateOutbox(app.pool);
  return {
    rabbit,
    claims,
    app,
    conn,
    ch,
    async close() {
      await conn.close().catch(() => undefined);
      await app.cleanup();
      await claims.cleanup();
      await rabbit.cleanup();
    },
  };
}

/** Rows the relay has published and marked sent, from its own counter (no read of the database). */
async function published(relay: Relay): Promise<number> {
  const m = await relay.registry.getSingleMetric('jobfleet_outbox_published_total')?.get();
  return (m?.values ?? []).reduce((s, v) => s + v.value, 0);
}

/**
 * Jobs/s of a relay, active and idle, from the COMMIT of one transaction
 * that fills the outbox with `jobs` rows until it has marked the last sent.
 */
async function relayRun(g: Awaited<ReturnType<typeof ground>>, jobs: number): Promise<number> {
  const relay = startRelay({
    pool: g.app.pool,
    brokerUrl: g.rabbit.amqpUrl,
    migrate: false,
    logger: silent,
  });
  while (!relay.active) await sleep(20);
  const at = Date.now();
  const client = await g.app.pool.connect();
  let t0: number;
  try {
    await client.query('begin');
    for (let i = 0; i < jobs; i += 1000)
      await insertEntries(
        client,
        Array.from({ length: Math.min(1000, jobs - i) }, (_, k) =>
          outboxEntry(QUEUE, JOB(i + k), at),
        ),
      );
    await client.query('commit');
    t0 = performance.now();
  } finally {
    client.release();
  }
  while ((await published(relay)) < jobs) await sleep(5);
  const seconds = (performance.now() - t0) / 1000;
  await relay.stop();
  await g.ch.purgeQueue(QUEUE);
  await g.app.pool.query('truncate jobfleet_outbox');
  return jobs / seconds;
}

/** Jobs/s publishing the same messages directly with confirms, `window` in flight at a time. */
async function directRun(ch: ConfirmChannel, jobs: number, window = 500): Promise<number> {
  const at = Date.now();
  const t0 = performance.now();
  for (let i = 0; i < jobs; i += window) {
    const sends: Promise<void>[] = [];
    for (let k = i; k < Math.min(jobs, i + window); k++) {
      const { body, props } = wireMessage(renderJob(JOB(k), at));
      sends.push(sendConfirmed(ch, QUEUE, body, props));
    }
    await Promise.all(sends);
  }
  const seconds = (performance.now() - t0) / 1000;
  await ch.purgeQueue(QUEUE);
  return jobs / seconds;
}

/** From the producer's mark (commit returned, or publish called) to the handler's start, at `rate`. */
async function latencyRun(
  g: Awaited<ReturnType<typeof ground>> & { queueType: 'classic' | 'quorum' },
  via: 'outbox' | 'direct',
  o: OutboxBenchOptions,
): Promise<{ p50: number; p99: number; jobs: number }> {
  const marks = new Map<string, number>();
  const starts = new Map<string, number>();
  const worker = createWorker({
    contract: { keyRule: 'order:{orderId}:ship', schemaVersions: [1] },
    handlers: {
      ship: (job) => {
        starts.set(job.id, wallMs());
        return Promise.resolve();
      },
    },
    config: {
      queue: QUEUE,
      brokerUrl: g.rabbit.amqpUrl,
      claimsUrl: g.claims.url,
      queueType: g.queueType,
      initialDelaySeconds: 1,
      maxDelaySeconds: 4,
      metricsPort: 0,
      prefetch: 64,
      outboxRelay: 'off',
    },
    logger: silent,
    handleSignals: false,
  });
  await worker.start();
  const relay =
    via === 'outbox'
      ? startRelay({
          pool: g.app.pool,
          brokerUrl: g.rabbit.amqpUrl,
          migrate: false,
          logger: silent,
        })
      : undefined;
  try {
    const send = async (job: { n: number; at: number }) => {
      const id = `${via}-${job.n}`;
      if (via === 'direct') {
        marks.set(id, wallMs());
        await publish(g.ch, QUEUE, { ...JOB(job.n, via), id });
        return;
      }
      const client = await g.app.pool.connect();
      try {
        await client.query('begin');
        await enqueue(client, QUEUE, { ...JOB(job.n, via), id });
        await client.query('commit');
        marks.set(id, wallMs());
      } finally {
        client.release();
      }
    };
    const { sent } = await producePaced({ send } as never, o.rate, o.seconds);
    const deadline = Date.now() + 60_000;
    while (starts.size < sent && Date.now() < deadline) await sleep(50);
    const ms = [...marks].flatMap(([id, mark]) => {
      const s = starts.get(id);
      return s === undefined ? [] : [s - mark];
    });
    ms.sort((a, b) => a - b);
    return { p50: percentile(ms, 0.5), p99: percentile(ms, 0.99), jobs: ms.length };
  } finally {
    await relay?.stop();
    await worker.stop({ deadlineMs: 5000 });
    await g.ch.purgeQueue(QUEUE);
    await g.app.pool.query('truncate jobfleet_outbox');
  }
}

export async function runOutboxBench(o: OutboxBenchOptions): Promise<OutboxBenchResult> {
  const broker = await groundBroker('outbox-bench');
  const throughput: ThroughputRun[] = [];
  const latency: LatencyRun[] = [];
  try {
    for (let run = 1; run <= o.runs; run++) {
      const g = { ...(await ground(broker)), queueType: broker.queueType };
      try {
        const relayFirst = run % 2 === 1;
        let relayPerSecond = 0;
        let directPerSecond = 0;
        for (const which of relayFirst ? ['relay', 'direct'] : ['direct', 'relay'])
          if (which === 'relay') relayPerSecond = await relayRun(g, o.jobs);
          else directPerSecond = await directRun(g.ch, o.jobs);
        throughput.push({ relayPerSecond, directPerSecond });
        const l: Partial<LatencyRun> = {};
        for (const via of relayFirst
          ? (['outbox', 'direct'] as const)
          : (['direct', 'outbox'] as const))
          l[via] = await latencyRun(g, via, o);
        latency.push(l as LatencyRun);
        console.error(`run ${run}: ${JSON.stringify({ relayPerSecond, directPerSecond, ...l })}`);
      } finally {
        await g.close();
      }
    }
  } finally {
    await broker.stop();
  }
  return { options: o, broker: broker.name, throughput, latency };
}

const f0 = (n: number) => Math.round(n).toLocaleString('en-US');
const f1 = (n: number) => n.toFixed(1);
const f2 = (n: number) => n.toFixed(2);

export function renderOutboxSection(r: OutboxBenchResult): string {
  const ratios = r.throughput.map((t) => t.relayPerSecond / t.directPerSecond);
  const lat = (v: 'outbox' | 'direct', k: 'p50' | 'p99') => r.latency.map((l) => l[v][k]);
  return `- broker: ${r.broker}; PostgreSQL on this machine; ${r.options.runs} runs, the order of the two rows reversed every other run.
- relay throughput: ${f0(r.options.jobs)} jobs from a pre-filled outbox (one transaction's rows), from its COMMIT until the active relay has marked the last one sent (its own counter) (batches of 500, up to 4 published ahead of their marks; one statement takes a batch, one marks it), against publishing the same messages directly with confirms, 500 in flight at a time. Ratio per run ${ratios.map(f2).join(', ')}; **median ${f2(median(ratios))}** (target ≥ 0.8).
- latency at ${r.options.rate} jobs/s for ${r.options.seconds} s: outbox from the enqueue's COMMIT to the handler's start (the relay in the producer's process, woken by NOTIFY); direct from the call to publish() to the handler's start. One worker (prefetch 64) in the same process. Outbox **median p50 ${f1(median(lat('outbox', 'p50')))} ms, p99 ${f1(median(lat('outbox', 'p99')))} ms** (targets ≤ 20 ms and ≤ 100 ms).

| run | relay jobs/s | direct jobs/s | relay / direct | outbox p50 ms | outbox p99 ms | direct p50 ms | direct p99 ms | jobs timed (outbox, direct) |
|---:|---:|---:|---:|---:|---:|---:|---:|---|
${r.throughput
  .map((t, i) => {
    const l = r.latency[i] as LatencyRun;
    return `| ${i + 1} | ${f0(t.relayPerSecond)} | ${f0(t.directPerSecond)} | ${f2(t.relayPerSecond / t.directPerSecond)} | ${f1(l.outbox.p50)} | ${f1(l.outbox.p99)} | ${f1(l.direct.p50)} | ${f1(l.direct.p99)} | ${l.outbox.jobs}, ${l.direct.jobs} |`;
  })
  .join('\n')}
| median | ${f0(median(r.throughput.map((t) => t.relayPerSecond)))} | ${f0(median(r.throughput.map((t) => t.directPerSecond)))} | ${f2(median(ratios))} | ${f1(median(lat('outbox', 'p50')))} | ${f1(median(lat('outbox', 'p99')))} | ${f1(median(lat('direct', 'p50')))} | ${f1(median(lat('direct', 'p99')))} | |
`;
}
