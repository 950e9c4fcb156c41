// The transactional outbox (docs/outbox.md): producers, relays and workers as
// OS processes, killed and cut off from outside, on real RabbitMQ (both
// brokers: the integration and integration-rabbitmq4 projects) and
// PostgreSQL. The producer's database is a schema of its own (its `orders`
// table and its outbox); the workers' claims database another. Every case
// ends with each committed order's effect exactly once, and none for an order
// rolled back.
import type { ChildProcess } from 'node:child_process';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually } from '../ground/eventually.js';
import { startTcpProxy, viaProxy, type TcpProxy } from '../ground/tcp-proxy.js';
import { spawnEffectWorker, type WorkerProcess } from '../fixtures/spawn-effect-worker.js';
import { spawnProducer, type ProducerProcess } from '../fixtures/spawn-producer.js';
import { QUEUE, harness, type Harness } from './worker-harness.js';
import { queueType, usePostgres, type PgSchema } from '../ground/index.js';

const INVOICES = 'orders.invoice';

let h: Harness;
let app: PgSchema;
const procs: ChildProcess[] = [];
const proxies: TcpProxy[] = [];
beforeEach(async () => {
  h = await harness();
  app = await usePostgres();
});
afterEach(async () => {
  for (const p of procs.splice(0)) {
    if (p.exitCode === null && p.signalCode === null) {
      p.kill('SIGCONT');
      p.kill('SIGKILL');
    }
  }
  for (const p of proxies.splice(0)) await p.close();
  await app?.cleanup();
  await h?.cleanup();
});

/** An effect worker on this test's vhost and claims schema: 5 s lease, retry delays 1–4 s. */
async function worker(env: Record<string, string> = {}): Promise<WorkerProcess> {
  const w = await spawnEffectWorker({
    JOBFLEET_QUEUE: QUEUE,
    JOBFLEET_QUEUE_TYPE: queueType(),
    JOBFLEET_BROKER_URL: h.rabbit.amqpUrl,
    JOBFLEET_CLAIMS_URL: h.db.url,
    JOBFLEET_INITIAL_DELAY_SECONDS: '1',
    JOBFLEET_MAX_DELAY_SECONDS: '4',
    JOBFLEET_LEASE_SECONDS: '5',
    ...env,
  });
  procs.push(w.proc);
  return w;
}

/** A producer process on the app schema (RELAY=1: with a relay; ORDERS=0: a relay alone). */
async function producer(env: Record<string, string>): Promise<ProducerProcess> {
  const p = await spawnProducer({
    OUTBOX_DB_URL: app.url,
    BROKER_URL: h.rabbit.amqpUrl,
    QUEUE,
    ...env,
  });
  procs.push(p.proc);
  return p;
}

async function through(url: string): Promise<{ proxy: TcpProxy; url: string }> {
  const u = new URL(url);
  const proxy = await startTcpProxy(u.hostname, Number(u.port));
  proxies.push(proxy);
  return { proxy, url: viaProxy(url, proxy) };
}

const keyOf = (orderId: string) => `order:${orderId}:ship`;
const count = async (sql: string, values: unknown[] = [], db = app) =>
  (await db.pool.query<{ n: number }>(sql, values)).rows[0]?.n ?? 0;
const unsent = () => count('select count(*)::int as n from jobfleet_outbox where sent_at is null');
const committedOrders = async () =>
  (await app.pool.query<{ id: string }>('select id from orders order by id')).rows.map((r) => r.id);

/** Every committed order's effect once, and nothing else: the outbox empty, the queue empty. */
async function eachOrderOnce(): Promise<string[]> {
  const orders = await committedOrders();
  await eventually(
    'every committed order shipped',
    async () => {
      const { rows } = await h.db.pool.query<{ key: string }>('select distinct key from effects');
      return rows.length >= orders.length ? true : undefined;
    },
    60_000,
  );
  await eventually('the outbox sent and the queue empty', async () =>
    (await unsent()) === 0 && (await h.messages(QUEUE)) === 0 ? true : undefined,
  );
  const { rows } = await h.db.pool.query<{ key: string; n: number }>(
    'select key, count(*)::int as n from effects group by key order by key',
  );
  expect(rows).toEqual(
    orders.map((o) => ({ key: keyOf(o), n: 1 })).sort((a, b) => (a.key < b.key ? -1 : 1)),
  );
  return orders;
}

describe('transactional outbox: one effect per committed order, none per rolled-back one', () => {
  it('the producer SIGKILLed before its COMMIT leaves no order and no job; after it, the job still runs once', async () => {
    await worker();
    await producer({ RELAY: '1' }); // the relay stays up while producers die
    const before = await producer({ ORDERS: '1', FIRST: '1', PAUSE_AT: 'before_commit' });
    await before.line((l) => l.paused === 'before_commit');
    before.proc.kill('SIGKILL');
    expect((await before.exited).signal).toBe('SIGKILL');

    const after = await producer({ ORDERS: '1', FIRST: '2', PAUSE_AT: 'after_commit' });
    await after.line((l) => l.paused === 'after_commit');
    after.proc.kill('SIGKILL');
    expect((await after.exited).signal).toBe('SIGKILL');

    expect(await eachOrderOnce()).toEqual(['o2']);
    expect(await h.effects(keyOf('o1'))).toBe(0);
    expect(await count('select count(*)::int as n from jobfleet_outbox')).toBe(1);
  });

  it('rolled-back transactions enqueue nothing; committed ones are published in commit order', async () => {
    const p = await producer({ ORDERS: '30', ROLLBACK_EVERY: '3' });
    expect(await p.line((l) => l.done === true)).toMatchObject({ committed: 20, rolledBack: 10 });
    // held back until all are in: the order the relay publishes them in is the queue's
    await producer({ RELAY: '1' });
    await eventually('all published', async () => ((await unsent()) === 0 ? true : undefined));
    const got = (await h.drainQueue(QUEUE)).map(
      (m) => (JSON.parse(m.content.toString()) as { key: string }).key,
    );
    const ids = (
      await app.pool.query<{ key: string }>('select key from jobfleet_outbox order by id')
    ).rows.map((r) => r.key);
    expect(got).toEqual(ids);
    expect(ids).toEqual(
      (await committedOrders()).sort((a, b) => Number(a.slice(1)) - Number(b.slice(1))).map(keyOf),
    );
  });

  it('a row that commits after a later-numbered row is not skipped', async () => {
    await worker();
    await producer({ RELAY: '1' });
    const slow = await app.pool.connect();
    try {
      await slow.query('begin');
      await slow.query(
        `insert into jobfleet_outbox (queue, message_id, key, type, schema_version, payload)
         values ($1, 'm-slow', 'order:slow:ship', 'ship', 1, '{"orderId":"slow"}')`,
        [QUEUE],
      );
      await slow.query(`insert into orders (id) values ('slow')`);
      // a later transaction takes a higher id and commits first
      await producer({ ORDERS: '1', PREFIX: 'fast' }).then((p) => p.line((l) => l.done === true));
      await eventually('the later row shipped', async () =>
        (await h.effects(keyOf('fast1'))) === 1 ? true : undefined,
      );
      await slow.query('commit');
    } finally {
      slow.release();
    }
    await eachOrderOnce();
  });

  it('the relay SIGKILLed mid-batch: its standby takes over, the second copies are absorbed by claims and counted', async () => {
    const w = await worker();
    const broker = await through(h.rabbit.amqpUrl);
    const doomed = await producer({ RELAY: '1', BROKER_URL: broker.url, BATCH: '50' });
    await eventually('the first relay active', async () =>
      (await doomed.metric('jobfleet_test_relay_active')) === 1 ? true : undefined,
    );
    const standby = await producer({ RELAY: '1' });
    broker.proxy.holdReplies(); // its publishes reach the broker; the confirms never come back
    await producer({ ORDERS: '120' }).then((p) => p.line((l) => l.done === true));
    // mid-batch: rows taken and published, none confirmed (the relay waits for them)
    const inFlight = () =>
      count(
        `select count(*)::int as n from jobfleet_outbox o, jobfleet_outbox_relay r
         where o.id = any(r.in_flight) and o.sent_at is null`,
      );
    await eventually('a batch in flight', async () => ((await inFlight()) > 0 ? true : undefined));
    const taken = await inFlight();
    doomed.proc.kill('SIGKILL');
    expect((await doomed.exited).signal).toBe('SIGKILL');
    broker.proxy.cut();
    await eachOrderOnce();
    const republished = await standby.metric('jobfleet_outbox_republished_total');
    expect(republished).toBe(taken);
    await eventually('every second copy absorbed by its claim', async () =>
      (await w.metric('jobfleet_jobs_total', { outcome: 'duplicate' })) === republished
        ? true
        : undefined,
    );
  });

  it('the broker connection dropped while rows wait: they are sent once it is back', async () => {
    await worker();
    const broker = await through(h.rabbit.amqpUrl);
    const relay = await producer({ RELAY: '1', BROKER_URL: broker.url });
    await eventually('the relay active', async () =>
      (await relay.metric('jobfleet_test_relay_active')) === 1 ? true : undefined,
    );
    broker.proxy.cut();
    await producer({ ORDERS: '40' }).then((p) => p.line((l) => l.done === true));
    await eventually('the relay row names the broker', async () => {
      const { rows } = await app.pool.query<{ last_error: string | null }>(
        'select last_error from jobfleet_outbox_relay',
      );
      return rows[0]?.last_error?.includes('broker unreachable') ? true : undefined;
    });
    expect(await unsent()).toBe(40);
    broker.proxy.restore();
    await eachOrderOnce();
  });

  it('the relay frozen (SIGSTOP) with its session open: a standby ends that session and takes over', async () => {
    await worker();
    const frozen = await producer({ RELAY: '1', SILENT_S: '3' });
    await eventually('the first relay active', async () =>
      (await frozen.metric('jobfleet_test_relay_active')) === 1 ? true : undefined,
    );
    const standby = await producer({ RELAY: '1', SILENT_S: '3' });
    frozen.proc.kill('SIGSTOP');
    await producer({ ORDERS: '30' }).then((p) => p.line((l) => l.done === true));
    await eventually(
      'the standby active',
      async () => ((await standby.metric('jobfleet_test_relay_active')) === 1 ? true : undefined),
      30_000,
    );
    await eachOrderOnce();
    // thawed, the old relay finds its session gone and stands by
    frozen.proc.kill('SIGCONT');
    await eventually('the thawed relay standing by', async () =>
      (await frozen.metric('jobfleet_test_relay_active')) === 0 ? true : undefined,
    );
    expect(await standby.metric('jobfleet_test_relay_active')).toBe(1);
  });

  it("the relay's PostgreSQL backend terminated: the lock is taken again and nothing is lost", async () => {
    await worker();
    const relay = await producer({ RELAY: '1' });
    await eventually('the relay active', async () =>
      (await relay.metric('jobfleet_test_relay_active')) === 1 ? true : undefined,
    );
    const p = await producer({ ORDERS: '200', RATE: '200' });
    await eventually('some sent', async () =>
      (await count('select count(*)::int as n from jobfleet_outbox where sent_at is not null')) > 20
        ? true
        : undefined,
    );
    const killed = await count(
      `select count(pg_terminate_backend(l.pid))::int as n from pg_locks l
       where l.locktype = 'advisory' and l.classid = 6975330 -- the relay's lock class
         and l.objid = 'jobfleet_outbox'::regclass::oid and l.granted`,
    );
    expect(killed).toBe(1);
    await p.line((l) => l.done === true);
    await eachOrderOnce();
  });
});

describe("a handler's follow-up job: it exists if and only if its job completed", () => {
  async function invoiceWorker(): Promise<WorkerProcess> {
    return worker({
      JOBFLEET_QUEUE: INVOICES,
      JOBFLEET_TEST_TYPE: 'invoice',
      JOBFLEET_TEST_KEY_RULE: 'invoice:{orderId}',
    });
  }
  const invoices = (orderId: string) =>
    count('select count(*)::int as n from effects where key = $1', [`invoice:${orderId}`], h.db);
  const followUps = () => count('select count(*)::int as n from jobfleet_outbox', [], h.db);

  it('the worker killed before its completion record: no follow-up; the next run writes it once', async () => {
    await invoiceWorker();
    const doomed = await worker({
      JOBFLEET_TEST_FOLLOW_UP_QUEUE: INVOICES,
      JOBFLEET_TEST_WAIT_FIRST: '1',
      JOBFLEET_TEST_HANDLER_MS: '60000',
    });
    const { key } = await h.job('fu1', { payload: { orderId: 'fu1' } });
    await eventually('running', async () =>
      (await h.claim(key))?.state === 'running' ? true : undefined,
    );
    doomed.proc.kill('SIGKILL');
    expect((await doomed.exited).signal).toBe('SIGKILL');
    expect(await followUps()).toBe(0);
    await worker({ JOBFLEET_TEST_FOLLOW_UP_QUEUE: INVOICES });
    await eventually(
      'the invoice',
      async () => ((await invoices('fu1')) === 1 ? true : undefined),
      60_000,
    );
    expect(await followUps()).toBe(1);
  });

  it('the worker killed after its completion record, before the ack: the follow-up exists once, the redelivery adds none', async () => {
    await invoiceWorker();
    const broker = await through(h.rabbit.amqpUrl);
    const doomed = await worker({
      JOBFLEET_BROKER_URL: broker.url,
      JOBFLEET_TEST_FOLLOW_UP_QUEUE: INVOICES,
    });
    const { key } = await h.job('fu2', { payload: { orderId: 'fu2', ms: 300 } });
    await eventually('running', async () =>
      (await h.claim(key))?.state === 'running' ? true : undefined,
    );
    broker.proxy.hang(); // the ack (and its relay's publish) cannot reach the broker now
    await eventually('completed', async () =>
      (await h.claim(key))?.state === 'completed' ? true : undefined,
    );
    expect(await followUps()).toBe(1);
    doomed.proc.kill('SIGKILL');
    expect((await doomed.exited).signal).toBe('SIGKILL');
    broker.proxy.cut();
    const next = await worker({ JOBFLEET_TEST_FOLLOW_UP_QUEUE: INVOICES });
    await eventually('the duplicate', async () =>
      (await next.metric('jobfleet_jobs_total', { outcome: 'duplicate' })) === 1 ? true : undefined,
    );
    await eventually(
      'the invoice',
      async () => ((await invoices('fu2')) === 1 ? true : undefined),
      30_000,
    );
    expect(await followUps()).toBe(1);
    expect(await h.effects(key)).toBe(1);
  });
});
