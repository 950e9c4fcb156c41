// Failure paths of the delivery state machine (issue 3 steps 3, 5, 6 and
// drain), on real RabbitMQ and PostgreSQL.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HEADERS, Permanent, Throttled, type Handler } from '../../worker/index.js';
import { eventually } from '../ground/eventually.js';
import { startTcpProxy, viaProxy } from '../ground/tcp-proxy.js';
import { QUEUE, harness, metricValue, type Harness } from './worker-harness.js';

const DLQ = `${QUEUE}.dlq`;
let h: Harness;
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  await h?.cleanup();
});

async function effectTimes(key: string): Promise<number[]> {
  const { rows } = await h.db.pool.query<{ at: Date }>(
    'select at from effects where key = $1 order by at',
    [key],
  );
  return rows.map((r) => r.at.getTime());
}

describe('step 3: fencing', () => {
  it("a worker whose lease was taken over cannot overwrite the new owner's result", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let running!: () => void;
    const started = new Promise<void>((r) => (running = r));
    const w = await h.startWorker({
      handlers: {
        ship: h.effectHandler(async () => {
          running();
          await gate;
        }),
      },
    });
    const { key } = await h.job('o-30');
    await started;
    // Meanwhile the lease expired and another worker took over and finished.
    await h.db.pool.query(
      `update jobfleet_claims set owner = gen_random_uuid(), state = 'completed', result = '{"by":"the new owner"}', completed_at = now() where key = $1`,
      [key],
    );
    release();
    await h.waitOutcomes(w, 1);
    expect(w.outcomes).toEqual(['delayed']); // not recorded, not acked as done: asked again later
    expect(await h.claim(key)).toMatchObject({
      state: 'completed',
      result: { by: 'the new owner' },
    });
    // The re-delivery sees the completed record and is acked as a duplicate.
    await h.waitOutcomes(w, 2);
    expect(w.outcomes[1]).toBe('duplicate');
    expect(await h.claim(key)).toMatchObject({ result: { by: 'the new owner' } });
    expect(await h.messages(QUEUE)).toBe(0);
  });
});

describe('step 5: failures', () => {
  it('Permanent: dead-lettered now, on the first attempt', async () => {
    const w = await h.startWorker({
      handlers: { ship: () => Promise.reject(new Permanent('order o-31 was cancelled')) },
    });
    const { key } = await h.job('o-31');
    await h.waitOutcomes(w, 1);
    expect(w.outcomes).toEqual(['dead_lettered']);
    const [dead] = await h.drainQueue(DLQ);
    expect(dead?.properties.headers?.[HEADERS.failureClass]).toBe('permanent');
    expect(String(dead?.properties.headers?.[HEADERS.reason])).toBe(
      'Permanent: order o-31 was cancelled',
    );
    expect(await h.claim(key)).toMatchObject({ state: 'dead_lettered', attempts: 1 });
    expect(await h.messages(QUEUE)).toBe(0);
  });

  it('Throttled with Retry-After: does not run again before that instant; spends no attempt; then completes', async () => {
    let calls = 0;
    const w = await h.startWorker({
      handlers: {
        ship: h.effectHandler(() => {
          calls++;
          if (calls === 1) {
            const res = new Response(null, { status: 429, headers: { 'retry-after': '3' } });
            throw Throttled.fromResponse(res) as Throttled;
          }
        }),
      },
    });
    const first = Date.now();
    const { key } = await h.job('o-32');
    await h.waitOutcomes(w, 1);
    const failedAt = Date.now();
    expect(w.outcomes).toEqual(['retried']);
    expect(await h.claim(key)).toMatchObject({ state: 'released', attempts: 0, throttled: 1 });
    // Scheduled in the broker: the 4 s tier (the smallest not shorter than 3 s).
    expect(await h.messages(`${QUEUE}.retry.4s`)).toBe(1);
    await h.waitOutcomes(w, 2);
    expect(w.outcomes[1]).toBe('completed');
    const [at] = await effectTimes(key);
    expect(at! - failedAt).toBeGreaterThanOrEqual(2900);
    expect(at! - first).toBeGreaterThanOrEqual(3000);
    expect(await h.claim(key)).toMatchObject({ state: 'completed', attempts: 1, throttled: 1 });
    expect(await metricValue(w, 'jobfleet_downstream_throttled_total')).toBe(1);
    expect(await metricValue(w, 'jobfleet_retries_total', { reason: 'throttled' })).toBe(1);
  });

  it('a job throttled 20 times by its dependency still completes when it recovers (maxAttempts 5)', async () => {
    let calls = 0;
    const w = await h.startWorker({
      config: { maxAttempts: 5 },
      handlers: {
        ship: h.effectHandler(() => {
          if (++calls <= 20) throw new Throttled('429 Too Many Requests', { retryAfterMs: 1 });
        }),
      },
    });
    const { key } = await h.job('o-throttled');
    await h.waitOutcomes(w, 21, 55_000);
    expect(w.outcomes.filter((o) => o === 'retried')).toHaveLength(20);
    expect(w.outcomes.at(-1)).toBe('completed');
    expect(await h.effects(key)).toBe(1);
    expect(await h.claim(key)).toMatchObject({ state: 'completed', attempts: 1, throttled: 20 });
    expect(await metricValue(w, 'jobfleet_retries_total', { reason: 'throttled' })).toBe(20);
    expect(await metricValue(w, 'jobfleet_retries_total', { reason: 'error' })).toBe(0);
  }, 60_000);

  it('throttled retries have a ceiling of their own: past it, a dead letter that says so', async () => {
    const w = await h.startWorker({
      config: { maxAttempts: 5, maxThrottledRetries: 2 },
      handlers: {
        ship: h.effectHandler(() => {
          throw new Throttled('429 Too Many Requests', { retryAfterMs: 1 });
        }),
      },
    });
    const { key } = await h.job('o-throttled-out');
    await h.waitOutcomes(w, 3, 30_000);
    expect(w.outcomes).toEqual(['retried', 'retried', 'dead_lettered']);
    expect(await h.claim(key)).toMatchObject({ state: 'dead_lettered', throttled: 2 });
    expect(await h.effects(key)).toBe(0);
  });

  it('any other error: retries after jittered backoff (never before it), then completes', async () => {
    const runs: number[] = [];
    const w = await h.startWorker({
      random: () => 0.99,
      handlers: {
        ship: h.effectHandler(() => {
          runs.push(Date.now());
          if (runs.length < 3) throw new Error('connection reset by downstream');
        }),
      },
    });
    const { key } = await h.job('o-33');
    await h.waitOutcomes(w, 3, 40_000);
    expect(w.outcomes).toEqual(['retried', 'retried', 'completed']);
    expect(await h.effects(key)).toBe(1);
    // random()=0.99: 1st retry after max(1 s initial, 0.99 × 1 s), 2nd after 0.99 × 2 s.
    expect(runs[1]! - runs[0]!).toBeGreaterThanOrEqual(1000);
    expect(runs[2]! - runs[1]!).toBeGreaterThanOrEqual(1980);
    expect(await h.claim(key)).toMatchObject({
      state: 'completed',
      attempts: 3,
      last_error: 'Error: connection reset by downstream',
    });
    expect(await metricValue(w, 'jobfleet_retries_total', { reason: 'error' })).toBe(2);
  });

  it('attempts reach maxAttempts: dead-lettered with the last reason', async () => {
    let calls = 0;
    const w = await h.startWorker({
      config: { maxAttempts: 2 },
      handlers: { ship: () => Promise.reject(new Error(`boom ${++calls}`)) },
    });
    const { key } = await h.job('o-34');
    await h.waitOutcomes(w, 2, 20_000);
    expect(w.outcomes).toEqual(['retried', 'dead_lettered']);
    expect(calls).toBe(2);
    const [dead] = await h.drainQueue(DLQ);
    expect(dead?.properties.headers?.[HEADERS.failureClass]).toBe('attempts_exhausted');
    expect(String(dead?.properties.headers?.[HEADERS.reason])).toBe(
      'gave up after 2 attempts; last error: Error: boom 2',
    );
    expect(await h.claim(key)).toMatchObject({ state: 'dead_lettered', attempts: 2 });
    expect(await h.messages(QUEUE)).toBe(0);
  });

  it('a retry that arrives early (moved by hand) waits again without spending an attempt', async () => {
    const w = await h.startWorker();
    const body = JSON.stringify({
      id: 'j-35',
      key: 'order:o-35:ship',
      type: 'ship',
      schemaVersion: 1,
      payload: { orderId: 'o-35' },
      createdAt: new Date().toISOString(),
    });
    const due = Date.now() + 2000;
    await h.publishRaw(body, {
      messageId: 'j-35',
      headers: { [HEADERS.notBefore]: due, [HEADERS.attempt]: 1 },
    });
    await h.waitOutcomes(w, 2, 20_000);
    expect(w.outcomes).toEqual(['delayed', 'completed']);
    const [at] = await effectTimes('order:o-35:ship');
    expect(at).toBeGreaterThanOrEqual(due);
    expect(await h.claim('order:o-35:ship')).toMatchObject({ attempts: 1 });
  });
});

describe('step 6: claim store unavailable', () => {
  it('acks nothing without a record, reports not-ready, and completes every job once when the store returns', async () => {
    const pgUrl = new URL(h.db.url);
    const proxy = await startTcpProxy(pgUrl.hostname, Number(pgUrl.port || 5432));
    try {
      const w = await h.startWorker({
        config: { claimsUrl: viaProxy(h.db.url, proxy), prefetch: 4 },
      });
      await h.job('o-40');
      await h.waitOutcomes(w, 1);
      expect(w.ready()).toBe(true);

      proxy.cut();
      const keys = await Promise.all(
        ['o-41', 'o-42', 'o-43'].map(async (o) => (await h.job(o)).key),
      );
      await eventually('the worker to report not-ready', () =>
        Promise.resolve(w.ready() ? undefined : true),
      );
      expect((await fetch(`http://127.0.0.1:${w.port}/readyz`)).status).toBe(503);
      // Nothing acked, and the worker returns nothing itself (no `requeued`
      // outcome): it holds what it was given and stops consuming, so the rest
      // waits in the queue. How many it was given before it saw the store fail
      // depends on timing: all 3 are either held or waiting, none gone. (On
      // quorum queues a delivery that reaches the channel after the consumer's
      // cancel is returned by the broker itself, marked redelivered:
      // docs/compatibility.md, the delivery limit.)
      const stats = () =>
        h.rabbit.mgmt.get<{ messages_ready?: number; messages_unacknowledged?: number }>(
          `/queues/${encodeURIComponent(h.rabbit.vhost)}/${QUEUE}`,
        );
      await eventually(
        'the 3 deliveries held unacked by the worker or waiting',
        async () => {
          const s = await stats();
          const held = s.messages_unacknowledged ?? 0;
          return held >= 1 && held + (s.messages_ready ?? 0) === 3 ? true : undefined;
        },
        20_000,
      );
      expect(w.outcomes.filter((o) => o === 'completed')).toHaveLength(1);
      expect(w.outcomes).not.toContain('requeued');

      proxy.restore();
      await eventually(
        'all jobs completed',
        async () => ((await h.effects()) === 4 ? true : undefined),
        40_000,
      );
      for (const key of keys) {
        expect(await h.effects(key)).toBe(1);
        expect(await h.claim(key)).toMatchObject({ state: 'completed' });
      }
      expect(await h.messages(QUEUE)).toBe(0);
      expect(w.outcomes).not.toContain('requeued');
      await eventually('ready again', () => Promise.resolve(w.ready() ? true : undefined));
    } finally {
      await proxy.close();
    }
  });
});

describe('drain', () => {
  it('on stop: finishes what it can by the deadline, returns the rest unacked, keeps the claims of handlers that ignore the abort until their lease runs out, exits within the deadline', async () => {
    const slow: Handler = h.effectHandler(async (job) => {
      const ms = (job.payload as { orderId: string }).orderId === 'fast' ? 200 : 60_000;
      await new Promise((r) => setTimeout(r, ms)); // deaf to its signal
    });
    const w = await h.startWorker({
      handlers: { ship: slow },
      config: { prefetch: 4, leaseSeconds: 5 },
    });
    const fast = await h.job('fast');
    const stuck = await h.job('stuck');
    await eventually('both claimed', async () =>
      (await h.claim(stuck.key)) && (await h.claim(fast.key)) ? true : undefined,
    );

    const t0 = Date.now();
    await w.stop({ deadlineMs: 1500 });
    const took = Date.now() - t0;
    expect(took).toBeLessThan(1500 + 3000);
    expect(await h.claim(fast.key)).toMatchObject({ state: 'completed' });
    // Not given back: the deaf run may still make its call. Its lease runs out instead, and
    // whoever takes the key over decides it first (docs/in-doubt.md).
    expect(await h.claim(stuck.key)).toMatchObject({ state: 'running', attempts: 1 });
    // the unfinished one, back in the queue (a quorum queue returns it once the closed
    // channel's consumer is processed through its log: soon after, not at once)
    await eventually(
      'the unfinished job back in the queue',
      async () => ((await h.messages(QUEUE)) === 1 ? true : undefined),
      15_000,
    );

    // Another worker finishes it once the lease is out: a takeover, decided by the policy (re-run).
    const w2 = await h.startWorker({ handlers: { ship: h.effectHandler() } });
    await eventually(
      'the stuck job completed elsewhere',
      async () => ((await h.claim(stuck.key))?.state === 'completed' ? true : undefined),
      20_000,
    );
    expect(w2.outcomes.at(-1)).toBe('completed');
    expect(await h.claim(stuck.key)).toMatchObject({ takeovers: 1, attempts: 2 });
    expect(await h.effects(stuck.key)).toBe(1);
    expect(await h.effects(fast.key)).toBe(1);
  });

  it('stop() is idempotent', async () => {
    const w = await h.startWorker();
    const a = w.stop();
    const b = w.stop();
    expect(a).toBe(b);
    await a;
  });
});

describe('broker connection lost mid-handler', () => {
  it('reconnects; the redelivered job is acked as a duplicate; one effect', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let calls = 0;
    const w = await h.startWorker({
      handlers: {
        ship: h.effectHandler(async () => {
          if (++calls === 1) await gate;
        }),
      },
    });
    const { key } = await h.job('o-50');
    await eventually('claimed', async () => ((await h.claim(key)) ? true : undefined));
    // Close the worker's connection from the broker side.
    const conns = await eventually(
      'the worker connection',
      async () => {
        const list =
          await h.rabbit.mgmt.get<Array<{ name: string; vhost: string }>>('/connections');
        const mine = list.filter((c) => c.vhost === h.rabbit.vhost);
        return mine.length >= 2 ? mine : undefined;
      },
      15_000,
    );
    // The harness' own publisher connection is the first; close every other one in the vhost.
    const ownPort = (h.conn.connection as unknown as { stream: { localPort: number } }).stream
      .localPort;
    for (const c of conns) {
      if (c.name.includes(`:${ownPort} ->`)) continue;
      await h.rabbit.mgmt.request('DELETE', `/connections/${encodeURIComponent(c.name)}`);
    }
    release();
    // The handler finishes and records, but its ack dies with the connection;
    // the broker redelivers and the record turns the redelivery into a duplicate.
    // A redelivery that comes before the record's commit finds the claim held
    // and waits a retry delay (at most 4 s here) first: 'delayed', then 'duplicate'.
    await eventually(
      'the redelivery acked as a duplicate',
      () => Promise.resolve(w.outcomes.includes('duplicate') ? true : undefined),
      30_000,
    );
    expect(w.outcomes[0]).toBe('completed');
    expect(w.outcomes.at(-1)).toBe('duplicate');
    expect(w.outcomes.slice(1, -1).every((o) => o === 'delayed')).toBe(true);
    expect(await metricValue(w, 'jobfleet_redeliveries_total')).toBe(1);
    await eventually(
      'queue empty',
      async () => ((await h.messages(QUEUE)) === 0 ? true : undefined),
      30_000,
    );
    expect(await h.effects(key)).toBe(1);
    expect(await h.claim(key)).toMatchObject({ state: 'completed' });
    expect(calls).toBe(1);
    await eventually('ready again', () => Promise.resolve(w.ready() ? true : undefined), 20_000);
  });
});

describe('transactional mode', () => {
  it("commits the handler's writes with the completion record; a failure rolls both back", async () => {
    await h.db.pool.query('create table shipments (order_id text primary key)');
    let calls = 0;
    const w = await h.startWorker({
      mode: 'transactional',
      handlers: {
        ship: async (job, ctx) => {
          await ctx.tx!.query('insert into shipments values ($1)', [
            (job.payload as { orderId: string }).orderId,
          ]);
          if (++calls === 1) throw new Error('fails after its write');
          return { ok: true };
        },
      },
    });
    const { key } = await h.job('o-60');
    await h.waitOutcomes(w, 2, 20_000);
    expect(w.outcomes).toEqual(['retried', 'completed']);
    const { rows } = await h.db.pool.query('select order_id from shipments');
    expect(rows).toEqual([{ order_id: 'o-60' }]);
    expect(await h.claim(key)).toMatchObject({
      state: 'completed',
      result: { ok: true },
      attempts: 2,
    });
  });

  it('survives its PostgreSQL backend being terminated mid-handler: nothing acked, the job completes once', async () => {
    // Found by the chaos soak: the checked-out client's 'error' event crashed the process.
    const app = `jobfleet-tx-${process.pid}-${Date.now()}`;
    const claimsUrl = new URL(h.db.url);
    claimsUrl.searchParams.set('application_name', app);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let runs = 0;
    const w = await h.startWorker({
      mode: 'transactional',
      handlers: {
        ship: async (job, ctx) => {
          if (++runs === 1) await gate;
          await ctx.tx!.query('insert into effects (key, attempt) values ($1, $2)', [
            job.key,
            job.attempt,
          ]);
          return { ok: true };
        },
      },
      config: { claimsUrl: claimsUrl.toString(), leaseSeconds: 5 },
    });
    const { key } = await h.job('o-61');
    await eventually('the first run to start', () => Promise.resolve(runs === 1 || undefined));
    const { rows } = await h.db.pool.query<{ n: number }>(
      'select count(pg_terminate_backend(pid))::int as n from pg_stat_activity where application_name = $1',
      [app],
    );
    expect(rows[0]?.n).toBeGreaterThan(0);
    release();
    await eventually(
      'the job completed',
      async () => ((await h.claim(key))?.state === 'completed' ? true : undefined),
      30_000,
    );
    // Held, not returned to the broker: tried again once the store answered,
    // it met its own unexpired claim and waited for the lease ('delayed').
    expect(w.outcomes[0]).toBe('delayed');
    expect(w.outcomes).not.toContain('requeued');
    expect(await h.effects(key)).toBe(1);
    expect(runs).toBe(2);
  });
});

describe('quorum queues', () => {
  it('declares a quorum topology and runs the same state machine, retries included', async () => {
    let calls = 0;
    const w = await h.startWorker({
      config: { queue: 'orders.quorum', queueType: 'quorum' },
      handlers: {
        ship: h.effectHandler(() => {
          if (++calls === 1) throw new Error('once');
        }),
      },
    });
    const q = await h.rabbit.mgmt.get<{ type: string }>(
      `/queues/${encodeURIComponent(h.rabbit.vhost)}/orders.quorum`,
    );
    expect(q.type).toBe('quorum');
    const tier = await h.rabbit.mgmt.get<{ type: string; arguments: Record<string, unknown> }>(
      `/queues/${encodeURIComponent(h.rabbit.vhost)}/orders.quorum.retry.1s`,
    );
    expect(tier.arguments['x-dead-letter-strategy']).toBe('at-least-once');
    const { publish } = await import('../../worker/index.js');
    const { key } = await publish(h.ch, 'orders.quorum', {
      type: 'ship',
      schemaVersion: 1,
      payload: { orderId: 'q-1' },
      keyRule: 'order:{orderId}:ship',
    });
    // A quorum queue dead-letters at least once: the retry tier may hand the
    // work queue a second copy, which meets the first's claim and waits
    // ('delayed') before it is acked as a duplicate. That wait is no run.
    const runs = () => w.outcomes.filter((o) => o !== 'delayed');
    await eventually(
      'a retry, then the completion',
      () => Promise.resolve(runs().length >= 2 ? true : undefined),
      20_000,
    );
    expect(runs().slice(0, 2)).toEqual(['retried', 'completed']);
    expect(await h.effects(key)).toBe(1);
  });
});
