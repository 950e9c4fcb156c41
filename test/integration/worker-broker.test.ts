// What the broker may do to a delivery, and what the worker does so that
// nothing is lost: a quorum queue's delivery limit (RabbitMQ 4 drops a message
// returned 20 times when the queue has no dead-letter target), a claims
// database that turns read-only, a handler that never returns, and refusals
// named for what they are. Runs on both brokers of the test ground; the
// queues here are quorum queues whatever the project's default.
import http from 'node:http';
import net from 'node:net';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import type { ConsumeMessage } from 'amqplib';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { publish } from '../../worker/index.js';
import { DELIVERY_LIMIT, overLimitQueueName, topology } from '../../worker/topology.js';
import type { Misconfigured } from '../../worker/readiness.js';
import { freePort, repoRoot } from '../ground/control-plane.js';
import { eventually } from '../ground/eventually.js';
import { startTcpProxy, viaProxy } from '../ground/tcp-proxy.js';
import { CONTRACT, harness, metricValue, type Harness } from './worker-harness.js';

let h: Harness;
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  await h?.cleanup();
});

const KEY_RULE = CONTRACT.keyRule;
const quorum = (queue: string) =>
  topology({
    queue,
    deadLetterQueue: `${queue}.dlq`,
    queueType: 'quorum',
    initialDelaySeconds: 1,
    maxDelaySeconds: 4,
  });
const job = (queue: string, orderId: string, payload: Record<string, unknown> = {}) =>
  publish(h.ch, queue, {
    type: 'ship',
    schemaVersion: 1,
    payload: { orderId, ...payload },
    keyRule: KEY_RULE,
  });
const queueStats = (queue: string) =>
  h.rabbit.mgmt.get<{ messages_ready?: number; messages_unacknowledged?: number }>(
    `/queues/${encodeURIComponent(h.rabbit.vhost)}/${encodeURIComponent(queue)}`,
  );

describe("a quorum queue's delivery limit", () => {
  it('a message the broker gives up on ends in our quarantine as a delivery_limit dead letter, audited, never dropped', async () => {
    const queue = 'limit.q';
    const t = quorum(queue);
    await h.ch.assertQueue(t.work.name, t.work.options);
    await h.ch.assertQueue(overLimitQueueName(queue), t.overLimit!.options);
    const { key } = await job(queue, 'l-1');
    // What a crash or a lost connection does to a delivery: the channel holding
    // it closes unacked, DELIVERY_LIMIT + 1 times. (A basic.nack with requeue
    // stopped counting toward the limit in RabbitMQ 4.3: only a failure does.)
    let returns = 0;
    for (;;) {
      const ch = await h.conn.createChannel();
      const m = await ch.get(queue);
      await ch.close();
      if (!m) break;
      returns++;
      await eventually('the return to land', async () =>
        (await h.messages(queue)) + (await h.messages(overLimitQueueName(queue))) === 1
          ? true
          : undefined,
      );
    }
    expect(returns).toBe(DELIVERY_LIMIT + 1);
    expect(await h.messages(overLimitQueueName(queue))).toBe(1);

    const w = await h.startWorker({ config: { queue, queueType: 'quorum' } });
    await h.waitOutcomes(w, 1);
    expect(w.outcomes).toEqual(['dead_lettered']);
    const [copy] = await h.drainQueue(`${queue}.dlq`);
    expect(copy?.properties.headers?.['x-jobfleet-failure-class']).toBe('delivery_limit');
    const { rows } = await h.db.pool.query<{ failure_class: string; key: string; reason: string }>(
      'select failure_class, key, reason from jobfleet_dead_letters',
    );
    expect(rows).toEqual([
      expect.objectContaining({
        failure_class: 'delivery_limit',
        key,
        reason: expect.stringMatching(/delivered it 21 times without an ack/),
      }),
    ]);
    expect(
      await metricValue(w, 'jobfleet_dead_letters_total', { failure_class: 'delivery_limit' }),
    ).toBe(1);
    expect(await h.messages(queue)).toBe(0);
    expect(await h.messages(overLimitQueueName(queue))).toBe(0);
    expect(await h.effects(key)).toBe(0);
  });

  it('a copy of a key that already completed is acked as a duplicate, not quarantined', async () => {
    const queue = 'limit.done';
    const t = quorum(queue);
    await h.ch.assertQueue(t.work.name, t.work.options);
    await h.ch.assertQueue(overLimitQueueName(queue), t.overLimit!.options);
    const w = await h.startWorker({ config: { queue, queueType: 'quorum' } });
    const { key } = await job(queue, 'l-2');
    await h.waitOutcomes(w, 1);
    // A second copy of the same job lands in the delivery-limit queue (as after a lost ack).
    await job(overLimitQueueName(queue), 'l-2');
    await h.waitOutcomes(w, 2);
    expect(w.outcomes).toEqual(['completed', 'duplicate']);
    expect(await h.messages(`${queue}.dlq`)).toBe(0);
    expect(await h.effects(key)).toBe(1);
  });
});

describe('a claims database that turns read-only (a failover that leaves the URL on a demoted node)', () => {
  it('for a minute mid-drain: no job lost, one effect each, deliveries held rather than returned', async () => {
    const queue = 'ro.q';
    const role = `jobfleet_ro_${randomBytes(4).toString('hex')}`;
    const admin = h.db.pool;
    await admin.query(`create role ${role} login`);
    await admin.query(`grant usage, create on schema ${h.db.schema} to ${role}`);
    await admin.query(`grant all on effects, effects_id_seq to ${role}`);
    const url = new URL(h.db.url);
    url.username = role;
    const setReadOnly = async (on: boolean) => {
      await admin.query(
        `alter role ${role} ${on ? 'set default_transaction_read_only = on' : 'reset default_transaction_read_only'}`,
      );
      // its sessions end as in a failover; the pool reconnects to the same URL
      await admin.query(
        'select pg_terminate_backend(pid) from pg_stat_activity where usename = $1',
        [role],
      );
    };
    try {
      const returnsSeen: number[] = [];
      const w = await h.startWorker({
        config: { queue, queueType: 'quorum', claimsUrl: url.toString(), prefetch: 8 },
        handlers: {
          ship: h.effectHandler(() => new Promise((r) => setTimeout(r, 20))),
        },
        onOutcome: (result, msg: ConsumeMessage) => {
          w.outcomes.push(result);
          const n = Number(msg.properties.headers?.['x-delivery-count'] ?? 0);
          returnsSeen.push(n);
        },
      });
      const keys: string[] = [];
      for (let i = 0; i < 300; i++) keys.push((await job(queue, `ro-${i}`)).key);
      await eventually('a third done', async () => ((await h.effects()) >= 100 ? true : undefined));
      await setReadOnly(true);
      const from = Date.now();
      await eventually('the worker to stop taking deliveries', () =>
        Promise.resolve(w.ready() ? undefined : true),
      );
      // A minute of refused writes: the worker holds what it has and takes nothing more.
      while (Date.now() - from < 60_000) {
        const s = await queueStats(queue);
        expect(s.messages_unacknowledged ?? 0).toBeLessThanOrEqual(8);
        await new Promise((r) => setTimeout(r, 2000));
      }
      await setReadOnly(false);
      // Done is the completion record, then the ack: the handler's effect (written on its own
      // connection here) comes before both, so 300 effects alone are not yet 300 jobs done.
      const completed = async () =>
        (
          await admin.query<{ n: number }>(
            "select count(*)::int as n from jobfleet_claims where state = 'completed'",
          )
        ).rows[0]?.n;
      await eventually(
        'every job done: recorded and acked',
        async () => {
          const [effects, records, left] = [
            await h.effects(),
            await completed(),
            await h.messages(queue),
          ];
          if (records === 300 && left === 0) return true;
          throw new Error(
            `${effects} effects, ${records} completion records, ${left} in the queue`,
          );
        },
        60_000,
        500,
      );
      for (const key of keys.slice(0, 20)) expect(await h.effects(key)).toBe(1);
      expect(await h.effects()).toBe(300);
      expect(await h.messages(`${queue}.dlq`)).toBe(0);
      expect(await h.messages(overLimitQueueName(queue))).toBe(0);
      // The broker's count of returns per message stays far below its limit.
      expect(Math.max(...returnsSeen)).toBeLessThan(10);
      expect(w.outcomes).not.toContain('requeued');
    } finally {
      await admin.query(`drop owned by ${role}`).catch(() => undefined);
      await admin.query(`drop role if exists ${role}`).catch(() => undefined);
    }
  }, 180_000);
});

describe('a handler that never returns', () => {
  it('is aborted at the handler deadline and retried, then dead-lettered; the channel and its other deliveries carry on', async () => {
    const queue = 'hung.q';
    if ((inject('broker') ?? 'machine') === 'rabbitmq4') {
      // A short consumer timeout on the test broker: without the handler
      // deadline, the hung delivery would make RabbitMQ close the channel.
      await h.rabbit.mgmt.request(
        'PUT',
        `/policies/${encodeURIComponent(h.rabbit.vhost)}/short-consumer-timeout`,
        {
          pattern: `^${queue}$`,
          definition: { 'consumer-timeout': 8000 },
          'apply-to': 'queues',
        },
      );
    }
    let hungRuns = 0;
    const w = await h.startWorker({
      config: { queue, queueType: 'quorum', handlerTimeoutSeconds: 2, maxAttempts: 2, prefetch: 4 },
      handlers: {
        ship: h.effectHandler(async (j) => {
          if ((j.payload as { orderId: string }).orderId === 'hung') {
            hungRuns++;
            await new Promise(() => undefined); // ignores its signal, never settles
          }
        }),
      },
    });
    const hung = await job(queue, 'hung');
    const others: string[] = [];
    for (let i = 0; i < 5; i++) others.push((await job(queue, `ok-${i}`)).key);
    await eventually(
      'the others done',
      async () => ((await h.effects()) === 5 ? true : undefined),
      20_000,
    );
    await eventually(
      'the hung job dead-lettered after 2 attempts',
      async () => ((await h.claim(hung.key))?.state === 'dead_lettered' ? true : undefined),
      30_000,
    );
    expect(hungRuns).toBe(2);
    const { rows } = await h.db.pool.query<{ reason: string; failure_class: string }>(
      'select reason, failure_class from jobfleet_dead_letters',
    );
    expect(rows).toEqual([
      {
        failure_class: 'attempts_exhausted',
        reason: expect.stringMatching(/HandlerTimedOut: the handler ran longer than 2 s/),
      },
    ]);
    // Past the consumer timeout: the same channel still delivers, and nothing was redelivered.
    await new Promise((r) => setTimeout(r, 2000));
    const late = await job(queue, 'late');
    await eventually(
      'a later job done',
      async () => ((await h.effects(late.key)) === 1 ? true : undefined),
      20_000,
    );
    expect(await metricValue(w, 'jobfleet_redeliveries_total')).toBe(0);
    expect(w.outcomes).not.toContain('requeued');
    for (const key of others) expect(await h.effects(key)).toBe(1);
  }, 90_000);
});

describe('what the broker refuses, named', () => {
  it('a broker user without configure permission on the queue: BrokerPermissionRefused, naming the queue and the permission', async () => {
    const user = `jf-${randomBytes(3).toString('hex')}`;
    await h.rabbit.mgmt.request('PUT', `/users/${user}`, { password: 'pw-not-logged', tags: '' });
    try {
      await h.rabbit.mgmt.request(
        'PUT',
        `/permissions/${encodeURIComponent(h.rabbit.vhost)}/${user}`,
        {
          configure: '^some-other-queue$',
          write: '.*',
          read: '.*',
        },
      );
      const url = new URL(h.rabbit.amqpUrl);
      url.username = user;
      url.password = 'pw-not-logged';
      const err = (await h
        .startWorker({ config: { queue: 'perm.q', brokerUrl: url.toString() } })
        .catch((e: unknown) => e)) as Misconfigured;
      expect(err.problem).toMatchObject({
        reason: 'BrokerPermissionRefused',
        message: expect.stringContaining('queue "perm.q"'),
        fix: expect.stringMatching(/configure .*permission on queue "perm.q"/),
      });
      expect(JSON.stringify(err.problem)).not.toContain('pw-not-logged');
    } finally {
      await h.rabbit.mgmt.request('DELETE', `/users/${user}`);
    }
  });

  it('a queue declared elsewhere with other arguments: QueueArgumentsDiffer, naming the argument', async () => {
    // as a producer or the messaging-topology-operator might have declared it
    await h.ch.assertQueue('args.q', { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    const err = (await h
      .startWorker({ config: { queue: 'args.q', queueType: 'quorum' } })
      .catch((e: unknown) => e)) as Misconfigured;
    expect(err.problem).toMatchObject({
      reason: 'QueueArgumentsDiffer',
      // the first of the arguments it lacks that the broker compares
      message: expect.stringMatching(
        /queue "args.q" exists with a different (x-delivery-limit|x-dead-letter-exchange|x-dead-letter-routing-key|x-dead-letter-strategy|x-overflow) \(/,
      ),
    });
  });
});

describe('a worker that refuses to start', () => {
  it('exits within a second while clients hold connections to its metrics port', async () => {
    // The broker answers only once the test holds its connections: a proxy held hung.
    const brokerUrl = new URL(h.rabbit.amqpUrl);
    const proxy = await startTcpProxy(brokerUrl.hostname, Number(brokerUrl.port || 5672));
    proxy.hang();
    const wrong = new URL(viaProxy(h.rabbit.amqpUrl, proxy));
    wrong.password = 'not-the-password';
    const port = await freePort();
    const proc = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/effect-worker.ts'], {
      cwd: repoRoot,
      env: {
        ...process.env,
        LOG_LEVEL: 'info',
        JOBFLEET_QUEUE: 'refuse.q',
        JOBFLEET_BROKER_URL: wrong.toString(),
        JOBFLEET_CLAIMS_URL: h.db.url,
        JOBFLEET_METRICS_PORT: String(port),
      },
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    const exited = new Promise<number>((r) => proc.once('exit', () => r(Date.now())));
    let refusedAt = 0;
    createInterface({ input: proc.stdout }).on('line', (line) => {
      if (line.includes('refusing to start')) refusedAt = Date.now();
    });
    const agent = new http.Agent({ keepAlive: true });
    const sockets: net.Socket[] = [];
    try {
      // An idle keep-alive connection (a scraper's), and one mid-request (a slow probe).
      await eventually(
        'the health endpoint',
        () =>
          new Promise<true | undefined>((resolve) =>
            http
              .get({ port, path: '/healthz', agent }, (res) => {
                res.resume();
                res.on('end', () => resolve(res.statusCode === 200 ? true : undefined));
              })
              .on('error', () => resolve(undefined)),
          ),
      );
      const slow = net.connect(port, '127.0.0.1');
      slow.on('error', () => undefined);
      await new Promise((r) => slow.once('connect', r));
      slow.write('GET /metrics HTTP/1.1\r\nHost: x\r\n');
      sockets.push(slow);
      proxy.restore();
      const exitAt = await exited;
      expect(refusedAt).toBeGreaterThan(0);
      expect(exitAt - refusedAt).toBeLessThan(1000);
      expect(proc.exitCode).not.toBe(0);
    } finally {
      agent.destroy();
      for (const s of sockets) s.destroy();
      if (proc.exitCode === null) proc.kill('SIGKILL');
      await proxy.close();
    }
  });
});
