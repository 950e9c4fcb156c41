// The outbox soak (docs/outbox.md): producer processes commit orders, each
// with its job enqueued in the same transaction (one in ten rolled back
// instead), while relay processes and worker processes are SIGKILLed at
// random, one every 1.5–3 s, and started again. The workers write each
// effect in the transaction that records the completion (transactional mode),
// so a second copy of a job is either absorbed by its claim or nothing. At the
// end the producer's rows are checked against the effects: every committed
// order shipped exactly once, no rolled-back one at all; and the redundant
// publishes (rows the relays tried more than once) and the copies the claims
// absorbed are counted. Run short by test/integration/outbox-soak.test.ts
// (make test), in full, three runs, by bench/outbox-soak.ts (make soak).
import amqp from 'amqplib';
import { topology } from '../../worker/topology.js';
import { createEffectsTable, spawnEffectWorker } from '../fixtures/spawn-effect-worker.js';
import { spawnProducer, type ProducerProcess } from '../fixtures/spawn-producer.js';
import type { WorkerProcess } from '../fixtures/spawn-effect-worker.js';
import type { PgSchema } from './postgres.js';
import { prng } from './prng.js';
import type { RabbitVhost } from './rabbit.js';

export interface OutboxSoakOptions {
  rabbit: RabbitVhost;
  /** the workers' claims database (and their effects table) */
  db: PgSchema;
  /** the producers' database: their orders and the outbox */
  app: PgSchema;
  queueType: 'classic' | 'quorum';
  /** orders attempted in all (a tenth rolled back) */
  orders: number;
  producers: number;
  /** relay processes kept alive (one active, the others standing by) */
  relays: number;
  /** worker processes kept alive */
  workers: number;
  /** orders per second, all producers together */
  rate: number;
  seed: number;
  /** give up waiting for the last effects after this long */
  timeoutMs: number;
}

export interface OutboxSoakFigures {
  seed: number;
  committed: number;
  rolledBack: number;
  /** committed orders shipped exactly once */
  shippedOnce: number;
  /** committed orders never shipped when the soak ended */
  missing: number;
  /** effects beyond the first, summed over orders */
  duplicates: number;
  /** effects of orders that were rolled back */
  phantoms: number;
  /** publishes beyond the first, summed over outbox rows (a relay died between its publish and the mark) */
  republished: number;
  /** deliveries the workers' claims absorbed (outcome duplicate): republished copies and redeliveries */
  absorbed: number;
  relayKills: number;
  workerKills: number;
  seconds: number;
}

const QUEUE = 'orders.ship';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runOutboxSoak(o: OutboxSoakOptions): Promise<OutboxSoakFigures> {
  const random = prng(o.seed);
  await createEffectsTable(o.db.pool);
  await o.db.pool.query(
    'create table deliveries (key text, outcome text not null, returns int not null)',
  );
  const workerEnv = {
    JOBFLEET_QUEUE: QUEUE,
    JOBFLEET_QUEUE_TYPE: o.queueType,
    JOBFLEET_BROKER_URL: o.rabbit.amqpUrl,
    JOBFLEET_CLAIMS_URL: o.db.url,
    JOBFLEET_PREFETCH: '16',
    JOBFLEET_MAX_ATTEMPTS: '10',
    JOBFLEET_INITIAL_DELAY_SECONDS: '0.5',
    JOBFLEET_MAX_DELAY_SECONDS: '2',
    JOBFLEET_LEASE_SECONDS: '5',
    JOBFLEET_TEST_MODE: 'transactional',
    JOBFLEET_TEST_RECORD_DELIVERIES: '1',
  };
  const relayEnv = {
    OUTBOX_DB_URL: o.app.url,
    BROKER_URL: o.rabbit.amqpUrl,
    QUEUE,
    RELAY: '1',
    STANDBY_MS: '500',
  };
  const conn = await amqp.connect(o.rabbit.amqpUrl);
  const started = Date.now();
  const workers: WorkerProcess[] = [];
  const relays: ProducerProcess[] = [];
  const producers: ProducerProcess[] = [];
  const starting: Array<Promise<void>> = [];
  let relayKills = 0;
  let workerKills = 0;
  let stopping = false;
  try {
    const ch = await conn.createChannel();
    const work = topology({
      queue: QUEUE,
      deadLetterQueue: `${QUEUE}.dlq`,
      initialDelaySeconds: 0.5,
      maxDelaySeconds: 2,
      queueType: o.queueType,
    }).work;
    await ch.assertQueue(work.name, work.options);
    for (let i = 0; i < o.workers; i++) workers.push(await spawnEffectWorker(workerEnv));
    for (let i = 0; i < o.relays; i++) relays.push(await spawnProducer(relayEnv));

    // The killer: every 1.5–3 s a random relay or worker is SIGKILLed and another started.
    const killer = (async () => {
      while (!stopping) {
        await sleep(1500 + random() * 1500);
        if (stopping) continue;
        const relay = random() < 0.5;
        const pool: Array<WorkerProcess | ProducerProcess> = relay ? relays : workers;
        if (pool.length === 0) continue;
        const [victim] = pool.splice(Math.floor(random() * pool.length), 1);
        victim?.proc.kill('SIGKILL');
        if (relay) {
          relayKills++;
          starting.push(spawnProducer(relayEnv).then((r) => void relays.push(r)));
        } else {
          workerKills++;
          starting.push(spawnEffectWorker(workerEnv).then((w) => void workers.push(w)));
        }
      }
    })();

    const each = Math.ceil(o.orders / o.producers);
    for (let p = 0; p < o.producers; p++)
      producers.push(
        await spawnProducer({
          OUTBOX_DB_URL: o.app.url,
          QUEUE,
          ORDERS: String(Math.min(each, o.orders - p * each)),
          FIRST: String(p * each + 1),
          PREFIX: `s${o.seed}-`,
          ROLLBACK_EVERY: '10',
          RATE: String(o.rate / o.producers),
        }),
      );
    await Promise.all(producers.map((p) => p.line((l) => l.done === true)));

    // Until every committed order shipped (or the time is up). The killer goes on until then,
    // or until half the time is spent: the tail then runs on the survivors.
    const committed = await count(o.app, 'select count(*)::int as n from orders');
    const deadline = started + o.timeoutMs;
    while (Date.now() < deadline) {
      const shipped = await count(o.db, 'select count(distinct key)::int as n from effects');
      if (shipped >= committed) break;
      if (Date.now() - started > o.timeoutMs / 2) stopping = true;
      await sleep(500);
    }
    stopping = true;
    await killer;
    await Promise.allSettled(starting);
    return await figures(o, relayKills, workerKills, started);
  } finally {
    stopping = true;
    await Promise.allSettled(starting);
    const all = [...workers, ...relays, ...producers];
    for (const p of all) p.proc.kill('SIGKILL');
    await Promise.all(all.map((p) => p.exited));
    await conn.close().catch(() => undefined);
  }
}

async function count(db: PgSchema, sql: string): Promise<number> {
  return (await db.pool.query<{ n: number }>(sql)).rows[0]?.n ?? 0;
}

async function figures(
  o: OutboxSoakOptions,
  relayKills: number,
  workerKills: number,
  started: number,
): Promise<OutboxSoakFigures> {
  const orders = new Set(
    (await o.app.pool.query<{ id: string }>('select id from orders')).rows.map(
      (r) => `order:${r.id}:ship`,
    ),
  );
  const effects = (
    await o.db.pool.query<{ key: string; n: number }>(
      'select key, count(*)::int as n from effects group by key',
    )
  ).rows;
  const shipped = new Map(effects.map((e) => [e.key, e.n]));
  const attempted = o.orders;
  return {
    seed: o.seed,
    committed: orders.size,
    rolledBack: attempted - orders.size,
    shippedOnce: [...orders].filter((k) => shipped.get(k) === 1).length,
    missing: [...orders].filter((k) => !shipped.has(k)).length,
    duplicates: effects.reduce((s, e) => s + e.n - 1, 0),
    phantoms: effects.filter((e) => !orders.has(e.key)).length,
    republished: await count(
      o.app,
      'select coalesce(sum(publishes - 1), 0)::int as n from jobfleet_outbox where publishes > 1',
    ),
    absorbed: await count(
      o.db,
      "select count(*)::int as n from deliveries where outcome = 'duplicate'",
    ),
    relayKills,
    workerKills,
    seconds: Math.round((Date.now() - started) / 100) / 10,
  };
}
