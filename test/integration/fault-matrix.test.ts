// The fault matrix (issue 4): workers as separate OS processes, killed,
// stopped, cut off and signalled at named points, on real RabbitMQ and
// PostgreSQL. Business effects are counted in the table the handler writes.
import type { ChildProcess } from 'node:child_process';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually } from '../ground/eventually.js';
import { startTcpProxy, viaProxy, type TcpProxy } from '../ground/tcp-proxy.js';
import { spawnEffectWorker, type WorkerProcess } from '../fixtures/spawn-effect-worker.js';
import { QUEUE, harness, type Harness } from './worker-harness.js';
import { queueType } from '../ground/index.js';

let h: Harness;
const procs: ChildProcess[] = [];
const proxies: TcpProxy[] = [];
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  for (const p of procs.splice(0)) {
    if (p.exitCode === null && p.signalCode === null) {
      p.kill('SIGCONT');
      p.kill('SIGKILL');
    }
  }
  for (const p of proxies.splice(0)) await p.close();
  await h?.cleanup();
});

/** An effect worker on this test's vhost and schema: 5 s lease, retry delays 1–4 s. */
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

const effects = (key: string) => h.effects(key);
const queueEmpty = () =>
  eventually(
    'the work queue empty',
    async () => ((await h.messages(QUEUE)) === 0 ? true : undefined),
    30_000,
  );

describe('fault matrix', () => {
  /** A proxy to `url`'s host (a real network path this test can hang), and the URL through it. */
  async function through(url: string): Promise<{ proxy: TcpProxy; url: string }> {
    const u = new URL(url);
    const proxy = await startTcpProxy(u.hostname, Number(u.port));
    proxies.push(proxy);
    return { proxy, url: viaProxy(url, proxy) };
  }
  const claimState = (key: string, state: string) =>
    eventually(
      `the claim ${state}`,
      async () => ((await h.claim(key))?.state === state ? true : undefined),
      30_000,
      10,
    );

  // The faults come from outside the worker, as a failing node's would: its broker or
  // effect store stops answering at a point the claims table shows, then SIGKILL.
  it('1. killed after the side effect, before the ack: redelivery, one effect, one duplicate suppressed', async () => {
    const broker = await through(h.rabbit.amqpUrl);
    const doomed = await worker({ JOBFLEET_BROKER_URL: broker.url });
    const { key } = await h.job('f1', { payload: { orderId: 'f1', ms: 300 } });
    await claimState(key, 'running');
    broker.proxy.hang(); // the ack cannot reach the broker now
    await claimState(key, 'completed');
    doomed.proc.kill('SIGKILL');
    expect((await doomed.exited).signal).toBe('SIGKILL');
    broker.proxy.cut(); // its connections die with it, as a dead process's do
    await eventually('unacked: back in the queue', async () =>
      (await h.messages(QUEUE)) === 1 ? true : undefined,
    );
    const next = await worker();
    await eventually('the duplicate', async () =>
      (await next.metric('jobfleet_jobs_total', { outcome: 'duplicate' })) === 1 ? true : undefined,
    );
    await queueEmpty();
    expect(await effects(key)).toBe(1);
    expect(await next.metric('jobfleet_jobs_total', { outcome: 'completed' })).toBe(0);
  });

  it('2. killed after claiming, before the side effect: the lease expires, another worker recovers and completes once', async () => {
    const effectStore = await through(h.db.url);
    effectStore.proxy.hang(); // the handler's first write never arrives
    const doomed = await worker({ JOBFLEET_TEST_EFFECTS_URL: effectStore.url });
    const { key } = await h.job('f2');
    await claimState(key, 'running');
    doomed.proc.kill('SIGKILL');
    expect((await doomed.exited).signal).toBe('SIGKILL');
    expect(await h.claim(key)).toMatchObject({ state: 'running', attempts: 1 });
    expect(await effects(key)).toBe(0);
    await worker();
    await eventually(
      'completed',
      async () => ((await h.claim(key))?.state === 'completed' ? true : undefined),
      30_000,
    );
    expect(await effects(key)).toBe(1);
    expect(await h.claim(key)).toMatchObject({ takeovers: 1, attempts: 2, last_claim: 'takeover' });
    await queueEmpty();
  });

  it('3. 429 with Retry-After: 2 — the job does not run again before 2 s; it spends no attempt; it completes', async () => {
    const w = await worker();
    const published = Date.now();
    const { key } = await h.job('f3', { payload: { orderId: 'f3', throttleOnceSeconds: 2 } });
    await eventually(
      'completed',
      async () => ((await h.claim(key))?.state === 'completed' ? true : undefined),
      30_000,
    );
    const { rows } = await h.db.pool.query<{ at: Date; attempt: number }>(
      'select at, attempt from effects where key = $1',
      [key],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.attempt).toBe(1);
    expect(rows[0]!.at.getTime() - published).toBeGreaterThanOrEqual(2000);
    expect(await w.metric('jobfleet_retries_total', { reason: 'throttled' })).toBe(1);
    expect(await h.claim(key)).toMatchObject({ attempts: 1, throttled: 1 });
  });

  it('4. a permanently invalid payload reaches the dead-letter queue exactly once and never re-enters the work queue', async () => {
    const w = await worker();
    await h.job('f4', { schemaVersion: 9 });
    await eventually('dead-lettered', async () =>
      (await w.metric('jobfleet_jobs_total', { outcome: 'dead_lettered' })) === 1
        ? true
        : undefined,
    );
    // Give it every chance to come back: longer than the largest retry tier.
    await h.job('f4-after'); // a valid job behind it proves the worker kept consuming
    await eventually('the job behind it', async () =>
      (await effects('order:f4-after:ship')) === 1 ? true : undefined,
    );
    await new Promise((r) => setTimeout(r, 4500));
    expect(await h.messages(QUEUE)).toBe(0);
    expect(await h.messages(`${QUEUE}.dlq`)).toBe(1);
    const { rows } = await h.db.pool.query('select failure_class from jobfleet_dead_letters');
    expect(rows).toEqual([{ failure_class: 'schema_version' }]);
    expect(await w.metric('jobfleet_jobs_total', { outcome: 'dead_lettered' })).toBe(1);
  });

  it('5. claim store outage mid-stream: nothing acked without a record; after recovery every job completes once', async () => {
    const pgUrl = new URL(h.db.url);
    const proxy = await startTcpProxy(pgUrl.hostname, Number(pgUrl.port || 5432));
    proxies.push(proxy);
    await worker({
      JOBFLEET_CLAIMS_URL: viaProxy(h.db.url, proxy),
      JOBFLEET_TEST_EFFECTS_URL: h.db.url,
      JOBFLEET_TEST_HANDLER_MS: '50',
    });
    const keys: string[] = [];
    for (let i = 0; i < 10; i++) keys.push((await h.job(`f5-${i}`)).key);
    proxy.cut(); // mid-stream
    for (let i = 10; i < 20; i++) keys.push((await h.job(`f5-${i}`)).key);
    await new Promise((r) => setTimeout(r, 1500));
    const { rows: during } = await h.db.pool.query<{ n: number }>(
      `select count(*)::int as n from jobfleet_claims where state = 'completed'`,
    );
    expect(during[0]!.n).toBeLessThan(20);
    proxy.restore();
    await eventually(
      'all 20 completed',
      async () => {
        const { rows } = await h.db.pool.query<{ n: number }>(
          `select count(*)::int as n from jobfleet_claims where state = 'completed'`,
        );
        return rows[0]!.n === 20 ? true : undefined;
      },
      60_000,
    );
    for (const key of keys) expect(await effects(key)).toBe(1);
    await queueEmpty();
  });

  it('6. broker connection dropped mid-handler: redelivery, one effect', async () => {
    const w = await worker({ JOBFLEET_TEST_HANDLER_MS: '4000' });
    // The management API lists a connection a few seconds after it opens: find it first.
    const ownPort = (h.conn.connection as unknown as { stream: { localPort: number } }).stream
      .localPort;
    const theirs = await eventually(
      "the worker's connection listed",
      async () => {
        const list =
          await h.rabbit.mgmt.get<Array<{ name: string; vhost: string }>>('/connections');
        const mine = list.filter(
          (c) => c.vhost === h.rabbit.vhost && !c.name.includes(`:${ownPort} ->`),
        );
        return mine.length ? mine : undefined;
      },
      15_000,
    );
    const { key } = await h.job('f6');
    await eventually('running', async () =>
      (await h.claim(key))?.state === 'running' ? true : undefined,
    );
    expect((await h.claim(key))?.state).toBe('running'); // still mid-handler
    for (const c of theirs)
      await h.rabbit.mgmt.request('DELETE', `/connections/${encodeURIComponent(c.name)}`);
    // The handler finishes and records; its ack dies with the connection; the
    // broker redelivers to the reconnected worker, which suppresses it.
    await eventually(
      'redelivered and suppressed',
      async () =>
        (await w.metric('jobfleet_redeliveries_total')) >= 1 &&
        (await w.metric('jobfleet_jobs_total', { outcome: 'duplicate' })) === 1
          ? true
          : undefined,
      30_000,
    );
    await queueEmpty();
    expect(await effects(key)).toBe(1);
    expect(await h.claim(key)).toMatchObject({ state: 'completed', attempts: 1 });
  });

  it('7. SIGTERM with handlers that outlive the drain deadline: in-time ones acked, the rest back unacked and finished once elsewhere; exit within deadline + margin', async () => {
    const w = await worker({
      JOBFLEET_DRAIN_DEADLINE_SECONDS: '2',
      JOBFLEET_PREFETCH: '4',
      JOBFLEET_TEST_HANDLER_MS: '30000',
    });
    const quick = await h.job('f7-quick', { payload: { orderId: 'f7-quick', ms: 500 } });
    const slow = await h.job('f7-slow'); // takes the worker's 30 s
    await eventually('both running', async () =>
      (await h.claim(quick.key)) && (await h.claim(slow.key)) ? true : undefined,
    );
    const t0 = Date.now();
    w.proc.kill('SIGTERM');
    expect((await w.exited).code).toBe(0);
    expect(Date.now() - t0).toBeLessThan(2000 + 5000);
    expect(await h.claim(quick.key)).toMatchObject({ state: 'completed' });
    expect(await h.claim(slow.key)).toMatchObject({ state: 'released', attempts: 0 }); // attempt refunded
    expect(await h.messages(QUEUE)).toBe(1);
    // The slow one finishes elsewhere (quickly, this time), once.
    await h.db.pool.query(`delete from effects where key = $1`, [slow.key]); // the aborted run's partial effect
    await worker({ JOBFLEET_TEST_HANDLER_MS: '0' });
    await eventually(
      'the slow one completed',
      async () => ((await h.claim(slow.key))?.state === 'completed' ? true : undefined),
      60_000,
    );
    expect(await h.claim(slow.key)).toMatchObject({ attempts: 1 }); // the drained run did not count
    expect(await effects(quick.key)).toBe(1);
  });

  it('8. two workers receive the same key at once: one effect, one claim conflict, no lost job', async () => {
    const a = await worker({ JOBFLEET_TEST_HANDLER_MS: '1500' });
    const b = await worker({ JOBFLEET_TEST_HANDLER_MS: '1500' });
    const first = await h.job('f8', { id: 'f8-a' });
    await h.job('f8', { id: 'f8-b' }); // a duplicate publish of the same operation
    await eventually(
      'one completion and one duplicate',
      async () => {
        const done =
          (await a.metric('jobfleet_jobs_total', { outcome: 'completed' })) +
          (await b.metric('jobfleet_jobs_total', { outcome: 'completed' }));
        const dup =
          (await a.metric('jobfleet_jobs_total', { outcome: 'duplicate' })) +
          (await b.metric('jobfleet_jobs_total', { outcome: 'duplicate' }));
        return done === 1 && dup === 1 ? true : undefined;
      },
      30_000,
    );
    const conflicts =
      (await a.metric('jobfleet_claim_conflicts_total')) +
      (await b.metric('jobfleet_claim_conflicts_total'));
    expect(conflicts).toBe(1);
    expect(await effects(first.key)).toBe(1);
    await queueEmpty();
    expect(await h.messages(`${QUEUE}.dlq`)).toBe(0);
  });

  it('9. lease taken over while the old owner is paused (SIGSTOP): the old owner cannot overwrite the new result; the run is counted', async () => {
    // prefetch 1: the broker must not hand the frozen worker the second delivery
    const old = await worker({ JOBFLEET_TEST_HANDLER_MS: '3000', JOBFLEET_PREFETCH: '1' });
    const { key } = await h.job('f9');
    await eventually('running', async () =>
      (await h.claim(key))?.state === 'running' ? true : undefined,
    );
    const oldOwner = (await h.claim(key))!.owner;
    old.proc.kill('SIGSTOP'); // frozen mid-handler: no renewals
    await new Promise((r) => setTimeout(r, 5500)); // past the 5 s lease
    // The same operation arrives again (a redelivery elsewhere) and a new worker takes it over.
    await h.job('f9', { id: 'f9-again' });
    await worker({ JOBFLEET_TEST_HANDLER_MS: '0' });
    const taken = await eventually(
      'taken over and completed',
      async () => {
        const c = await h.claim(key);
        return c?.state === 'completed' && c.owner !== oldOwner ? c : undefined;
      },
      30_000,
    );
    old.proc.kill('SIGCONT');
    // The old owner wakes, finishes its handler, and tries to record: fenced out.
    await new Promise((r) => setTimeout(r, 4000));
    const after = await h.claim(key);
    expect(after).toMatchObject({
      state: 'completed',
      owner: taken.owner,
      takeovers: 1,
      attempts: 2,
    });
    expect(after!.result).toEqual(taken.result);
    await queueEmpty();
    // Both runs happened (the frozen one was already under way): counted, not hidden.
    expect(await effects(key)).toBe(2);
  });
});
