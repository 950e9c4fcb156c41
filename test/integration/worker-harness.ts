// Shared set-up for the worker runtime suites: a vhost, a schema, an effects
// table that handlers write (the count of business effects is what tests
// assert), and in-process workers wired to them.
import amqp, { type ChannelModel, type ConfirmChannel, type GetMessage } from 'amqplib';
import pino from 'pino';
import {
  createWorker,
  publish,
  type DeliveryResult,
  type Handler,
  type PublishJob,
  type Worker,
  type WorkerOptions,
} from '../../worker/index.js';
import { createEffectsTable } from '../fixtures/spawn-effect-worker.js';
import { eventually } from '../ground/eventually.js';
import {
  queueType,
  usePostgres,
  useRabbit,
  type PgSchema,
  type RabbitVhost,
} from '../ground/index.js';
import { topology } from '../../worker/topology.js';

export const CONTRACT = { keyRule: 'order:{orderId}:ship', schemaVersions: [1, 2] };
export const QUEUE = 'orders.ship';
const TOPOLOGY = {
  queue: QUEUE,
  deadLetterQueue: `${QUEUE}.dlq`,
  initialDelaySeconds: 1,
  maxDelaySeconds: 4,
};

export interface TestWorker extends Worker {
  outcomes: DeliveryResult[];
}

export interface Harness {
  rabbit: RabbitVhost;
  db: PgSchema;
  conn: ChannelModel;
  ch: ConfirmChannel;
  job(orderId: string, extra?: Partial<PublishJob>): Promise<{ id: string; key: string }>;
  publishRaw(body: string | Buffer, props?: amqp.Options.Publish): Promise<void>;
  /** handler that records one business effect per run, then returns */
  effectHandler(fn?: (job: Parameters<Handler>[0]) => Promise<void> | void): Handler;
  effects(key?: string): Promise<number>;
  messages(queue: string): Promise<number>;
  /** takes every ready message off a queue */
  drainQueue(queue: string): Promise<GetMessage[]>;
  claim(key: string): Promise<Record<string, unknown> | undefined>;
  startWorker(opts?: Partial<WorkerOptions>): Promise<TestWorker>;
  waitOutcomes(w: TestWorker, n: number, timeoutMs?: number): Promise<DeliveryResult[]>;
  cleanup(): Promise<void>;
}

export async function harness(): Promise<Harness> {
  const rabbit = await useRabbit();
  const db = await usePostgres();
  await createEffectsTable(db.pool);
  const conn = await amqp.connect(rabbit.amqpUrl);
  const ch = await conn.createConfirmChannel();
  // Declared as the workers declare it (the producer's side of the contract):
  // on RabbitMQ 4 a quorum queue with its delivery limit and dead-letter target.
  const work = topology({ ...TOPOLOGY, queueType: queueType() }).work;
  await ch.assertQueue(work.name, work.options);
  const workers: Worker[] = [];

  const h: Harness = {
    rabbit,
    db,
    conn,
    ch,
    job: (orderId, extra = {}) =>
      publish(ch, QUEUE, {
        type: 'ship',
        schemaVersion: 1,
        payload: { orderId },
        keyRule: CONTRACT.keyRule,
        ...extra,
      }),
    publishRaw: (body, props = {}) =>
      new Promise<void>((resolve, reject) =>
        ch.sendToQueue(
          QUEUE,
          Buffer.isBuffer(body) ? body : Buffer.from(body),
          { persistent: true, ...props },
          (err) => (err ? reject(err as Error) : resolve()),
        ),
      ),
    effectHandler: (fn) => async (job) => {
      await fn?.(job);
      await db.pool.query('insert into effects (key, attempt) values ($1, $2)', [
        job.key,
        job.attempt,
      ]);
      return { shipped: job.key };
    },
    effects: async (key) => {
      const r = key
        ? await db.pool.query<{ n: number }>(
            'select count(*)::int as n from effects where key = $1',
            [key],
          )
        : await db.pool.query<{ n: number }>('select count(*)::int as n from effects');
      return r.rows[0]?.n ?? 0;
    },
    messages: async (queue) => {
      const c = await conn.createChannel();
      try {
        return (await c.checkQueue(queue)).messageCount;
      } finally {
        await c.close();
      }
    },
    drainQueue: async (queue) => {
      const c = await conn.createChannel();
      const out: GetMessage[] = [];
      try {
        for (
          let m = await c.get(queue, { noAck: true });
          m;
          m = await c.get(queue, { noAck: true })
        )
          out.push(m);
      } finally {
        await c.close();
      }
      return out;
    },
    claim: async (key) =>
      (await db.pool.query('select * from jobfleet_claims where key = $1', [key])).rows[0] as
        Record<string, unknown> | undefined,
    startWorker: async (opts = {}) => {
      const outcomes: DeliveryResult[] = [];
      const w = createWorker({
        contract: CONTRACT,
        handlers: { ship: h.effectHandler() },
        logger: pino({ level: process.env.JOBFLEET_TEST_LOG ?? 'silent' }),
        handleSignals: false,
        onOutcome: (r) => outcomes.push(r),
        ...opts,
        config: {
          queue: QUEUE,
          brokerUrl: rabbit.amqpUrl,
          claimsUrl: db.url,
          metricsPort: 0,
          queueType: queueType(),
          initialDelaySeconds: TOPOLOGY.initialDelaySeconds,
          maxDelaySeconds: TOPOLOGY.maxDelaySeconds,
          leaseSeconds: 10,
          drainDeadlineSeconds: 5,
          ...opts.config,
        },
      }) as TestWorker;
      Object.defineProperty(w, 'outcomes', { value: outcomes });
      workers.push(w);
      await w.start();
      return w;
    },
    waitOutcomes: (w, n, timeoutMs = 30_000) =>
      eventually(
        `${n} delivery outcomes (have ${w.outcomes.length})`,
        () => Promise.resolve(w.outcomes.length >= n ? w.outcomes : undefined),
        timeoutMs,
      ),
    cleanup: async () => {
      await Promise.all(workers.map((w) => w.stop({ deadlineMs: 1000 })));
      await conn.close().catch(() => undefined);
      await rabbit.cleanup();
      await db.cleanup();
    },
  };
  return h;
}

export async function metricValue(
  w: Worker,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const m = (await w.metrics.registry.getSingleMetric(name)?.get()) as
    | { values: Array<{ value: number; labels: Record<string, unknown>; metricName?: string }> }
    | undefined;
  if (!m) return 0;
  return m.values
    .filter(
      (v) =>
        (v.metricName === undefined || v.metricName === name) &&
        Object.entries(labels).every(([k, val]) => v.labels[k] === val),
    )
    .reduce((a, v) => a + v.value, 0);
}
