// Group commit on real PostgreSQL and RabbitMQ: concurrent claims and
// completions go as one statement each, and every delivery still gets its
// own outcome — claims the answer leaves out (new ones), a key a concurrent
// claim inserted, two workers racing for the same fresh keys, the same key
// twice in a batch, one row fenced out among others, the store failing
// mid-batch, a value one message's own that the store refuses, and a worker
// killed between a batch's commit and its acks.
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ClaimStore } from '../../worker/claim-store.js';
import { spawnEffectWorker, type WorkerProcess } from '../fixtures/spawn-effect-worker.js';
import { eventually } from '../ground/eventually.js';
import { startTcpProxy, viaProxy, type TcpProxy } from '../ground/tcp-proxy.js';
import { QUEUE, harness, metricValue, type Harness } from './worker-harness.js';
import { queueType } from '../ground/index.js';

let h: Harness;
let store: ClaimStore;
let pool: pg.Pool;
const procs: WorkerProcess[] = [];
const proxies: TcpProxy[] = [];
beforeEach(async () => {
  h = await harness();
  pool = new pg.Pool({ connectionString: h.db.url, max: 4 });
  store = new ClaimStore(pool);
  await store.migrate();
});
afterEach(async () => {
  for (const w of procs.splice(0)) if (w.proc.exitCode === null) w.proc.kill('SIGKILL');
  for (const p of proxies.splice(0)) await p.close();
  await pool.end();
  await h?.cleanup();
});

const claimAll = (keys: string[]) =>
  Promise.all(keys.map((k) => store.claim(k, 30, `j-${k}`, 't')));

describe('group commit in the claim store', () => {
  it('claims made in one turn go as one statement, each with its own outcome', async () => {
    await pool.query(
      `insert into jobfleet_claims (key, state, attempts, completed_at) values ('done', 'completed', 1, now())`,
    );
    const before = store.batchStats.batches;
    const out = await claimAll(['a', 'b', 'done', 'c']);
    expect(store.batchStats.batches - before).toBe(1);
    expect(out.map((o) => o.outcome)).toEqual(['new', 'new', 'completed', 'new']);
  });

  it("a claim the answer does not name is new, with its row's own values; retries and takeovers carry theirs", async () => {
    await pool.query(
      `insert into jobfleet_claims (key, state, attempts, throttled, last_error, first_seen_at)
       values ('again', 'released', 2, 1, 'boom', '2026-01-01T00:00:00Z')`,
    );
    const staleOwner = '5ca1ab1e-0000-4000-8000-000000000001';
    await pool.query(
      `insert into jobfleet_claims (key, state, owner, lease_until, attempts, first_seen_at)
       values ('stale', 'running', $1, now() - interval '1 s', 1, '2026-01-02T00:00:00Z')`,
      [staleOwner],
    );
    const [fresh, again, stale] = await claimAll(['fresh', 'again', 'stale']);
    const { rows } = await pool.query<{ key: string; owner: string; first_seen_at: Date }>(
      'select key, owner, first_seen_at from jobfleet_claims order by key',
    );
    const row = (k: string) => rows.find((r) => r.key === k);
    expect(fresh).toEqual({
      outcome: 'new',
      owner: row('fresh')?.owner,
      attempts: 1,
      throttled: 0,
      lastError: null,
      firstSeenAt: row('fresh')?.first_seen_at,
      history: { steps: {} },
    });
    expect(again).toEqual({
      outcome: 'retry',
      owner: row('again')?.owner,
      attempts: 3,
      throttled: 1,
      lastError: 'boom',
      firstSeenAt: new Date('2026-01-01T00:00:00Z'),
      // what ctx.previous shows: a row from before migration 9 says only that it failed
      history: {
        steps: {},
        previous: {
          attempt: 2,
          owner: null,
          startedAt: null,
          intent: null,
          step: null,
          ended: 'failed',
          error: 'boom',
        },
      },
    });
    // a running claim taken over: its run is in doubt until the next attempt decides it
    expect(stale).toMatchObject({
      outcome: 'takeover',
      owner: row('stale')?.owner,
      attempts: 2,
      history: {
        doubt: { attempt: 1, owner: staleOwner, intent: null, step: null, cause: 'taken_over' },
        previous: { attempt: 1, owner: staleOwner, ended: 'in_doubt' },
      },
    });
  });

  it('a key inserted by a concurrent claim after the statement began reads as held until its lease ends', async () => {
    // Another worker's claim of 'race' is in an open transaction: ours blocks
    // on it, and once it commits ours cannot claim the key, while its own
    // snapshot, taken before that commit, does not show the row.
    const other = await pool.connect();
    let open = false;
    try {
      await other.query('begin');
      open = true;
      await other.query(
        `insert into jobfleet_claims (key, state, owner, lease_until, attempts)
         values ('race', 'running', gen_random_uuid(), now() + interval '30 s', 1)`,
      );
      const { rows: me } = await other.query<{ pid: number }>('select pg_backend_pid() as pid');
      const query = vi.spyOn(pool, 'query');
      const claimed = store.claim('race', 30, 'j-race', 't');
      await eventually('our claim waiting for the other transaction', async () => {
        const { rows } = await pool.query<{ n: number }>(
          'select count(*)::int as n from pg_stat_activity where $1 = any(pg_blocking_pids(pid))',
          [me[0]?.pid],
        );
        return rows[0]?.n === 1 ? true : undefined;
      });
      await other.query('commit');
      open = false;
      const { rows } = await pool.query<{ lease_until: Date }>(
        `select lease_until from jobfleet_claims where key = 'race'`,
      );
      expect(await claimed).toEqual({ outcome: 'held', until: rows[0]?.lease_until, attempts: 1 });
      // the answer named it 'unseen', and the second read said until when
      const names = query.mock.calls.map(([q]) => (q as { name?: string }).name);
      expect(names).toContain('jobfleet_peek');
      query.mockRestore();
    } finally {
      if (open) await other.query('rollback').catch(() => undefined);
      other.release();
    }
  });

  it('two workers claiming the same fresh keys at once: each key is new to exactly one of them', async () => {
    const otherPool = new pg.Pool({ connectionString: h.db.url, max: 4 });
    try {
      const otherStore = new ClaimStore(otherPool);
      await Promise.all([store.ping(), otherStore.ping()]); // both connected: the statements overlap
      for (let round = 0; round < 10; round++) {
        const keys = Array.from({ length: 100 }, (_, i) => `both-${round}-${i}`);
        const [mine, theirs] = await Promise.all([
          Promise.all(keys.map((k) => store.claim(k, 30, `j-${k}`, 't'))),
          Promise.all(keys.map((k) => otherStore.claim(k, 30, `j-${k}`, 't'))),
        ]);
        const { rows } = await pool.query<{ key: string; owner: string }>(
          'select key, owner from jobfleet_claims where key = any($1)',
          [keys],
        );
        const owner = new Map(rows.map((r) => [r.key, r.owner]));
        keys.forEach((k, i) => {
          const won = [mine[i], theirs[i]].filter((o) => o?.outcome === 'new');
          expect(won, k).toHaveLength(1);
          // the owner it was told is the row's owner
          expect(won[0] && 'owner' in won[0] ? won[0].owner : undefined).toBe(owner.get(k));
        });
      }
    } finally {
      await otherPool.end();
    }
  });

  it('the same key twice in a batch: the second waits for the next statement and finds it held', async () => {
    const out = await claimAll(['k', 'k']);
    expect(out.map((o) => o.outcome)).toEqual(['new', 'held']);
    expect((await pool.query(`select attempts from jobfleet_claims where key = 'k'`)).rows).toEqual(
      [{ attempts: 1 }],
    );
  });

  it('one row fenced out among others: only that completion is refused', async () => {
    const claims = await claimAll(['x', 'y', 'z']);
    const owners = claims.map((c) => ('owner' in c ? c.owner : ''));
    // y's lease was taken over by another worker meanwhile
    await pool.query(`update jobfleet_claims set owner = gen_random_uuid() where key = 'y'`);
    const before = store.batchStats.batches;
    const recorded = await Promise.all(
      ['x', 'y', 'z'].map((k, i) => store.complete(k, owners[i] as string, { k })),
    );
    expect(store.batchStats.batches - before).toBe(1);
    expect(recorded).toEqual([true, false, true]);
    const { rows } = await pool.query<{ key: string; state: string }>(
      'select key, state from jobfleet_claims order by key',
    );
    expect(rows).toEqual([
      { key: 'x', state: 'completed' },
      { key: 'y', state: 'running' },
      { key: 'z', state: 'completed' },
    ]);
  });

  it('completions and claims made in one turn share one statement', async () => {
    const [first] = await claimAll(['c-1']);
    const owner = first && 'owner' in first ? first.owner : '';
    const before = store.batchStats.batches;
    const [recorded, claimed] = await Promise.all([
      store.complete('c-1', owner, { ok: true }),
      store.claim('c-2', 30, 'j-c-2', 't'),
    ]);
    expect(store.batchStats.batches - before).toBe(1);
    expect(recorded).toBe(true);
    expect(claimed.outcome).toBe('new');
  });

  it("the ack journal's rows ride with claims in one statement, and go alone when nothing else does", async () => {
    const ack = (id: string) => ({
      deliveryId: id,
      jobId: id,
      key: id,
      outcome: 'completed' as const,
      attempt: 1,
      ackedAt: Date.parse('2026-01-01T00:00:00Z'),
    });
    const before = store.batchStats.batches;
    const [, claimed] = await Promise.all([
      store.journalAcks([ack('d-1'), ack('d-2')], 60_000),
      store.claim('r-1', 30, 'j-r-1', 't'),
    ]);
    expect(store.batchStats.batches - before).toBe(1);
    expect(claimed.outcome).toBe('new');
    // alone (nothing else to ride with), a short wait sends them by themselves
    await store.journalAcks([ack('d-3')], 10);
    expect(store.batchStats.batches - before).toBe(2);
    const { rows } = await pool.query<{ delivery_id: string; acked_at: Date }>(
      'select delivery_id, acked_at from jobfleet_acks order by delivery_id',
    );
    expect(rows.map((r) => r.delivery_id)).toEqual(['d-1', 'd-2', 'd-3']);
    expect(rows[0]?.acked_at.toISOString()).toBe('2026-01-01T00:00:00.000Z');
  });

  it("a key's completion and a new claim of it in one turn go one after the other: the claim sees it completed", async () => {
    const [first] = await claimAll(['same']);
    const owner = first && 'owner' in first ? first.owner : '';
    const before = store.batchStats.batches;
    const [recorded, again] = await Promise.all([
      store.complete('same', owner, 'r'),
      store.claim('same', 30, 'j-same-2', 't'),
    ]);
    expect(store.batchStats.batches - before).toBe(2);
    expect(recorded).toBe(true);
    expect(again).toMatchObject({ outcome: 'completed', result: 'r' });
  });

  it('the store failing mid-batch fails every item of that batch, and none is half-done', async () => {
    const url = new URL(h.db.url);
    const proxy = await startTcpProxy(url.hostname, Number(url.port || 5432));
    proxies.push(proxy);
    const viaPool = new pg.Pool({ connectionString: viaProxy(h.db.url, proxy), max: 2 });
    viaPool.on('error', () => undefined);
    const cut = new ClaimStore(viaPool);
    await cut.claim('warm', 30, 'j', 't'); // a pooled connection through the proxy
    proxy.cut();
    const results = await Promise.allSettled(
      ['p', 'q', 'r'].map((k) => cut.claim(k, 30, `j-${k}`, 't')),
    );
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected', 'rejected']);
    expect(
      (await pool.query(`select key from jobfleet_claims where key in ('p', 'q', 'r')`)).rowCount,
    ).toBe(0);
    proxy.restore();
    await viaPool.end().catch(() => undefined);
  });

  it("a value one message's own that the store refuses fails that item alone", async () => {
    // Past the envelope check nothing like this reaches the store; if it did,
    // the other deliveries of the batch must not pay for it.
    const out = await Promise.allSettled(
      ['ok-1', 'bad\u0000', 'ok-2'].map((k) => store.claim(k, 30, 'j', 't')),
    );
    expect(out.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
  });
});

describe('group commit in a worker', () => {
  it('a duplicate in the same burst runs once; the other copy is acked as a duplicate', async () => {
    const w = await h.startWorker({ config: { prefetch: 16 } });
    await Promise.all([h.job('d-1'), h.job('d-1'), h.job('d-2')]);
    // The second d-1 either meets the first's live claim (held: it waits in a delay tier,
    // then finds it completed) or arrives once it completed; both end as a duplicate.
    const ends = () => w.outcomes.filter((o) => o !== 'delayed');
    await eventually('three terminal outcomes', () =>
      Promise.resolve(ends().length >= 3 ? true : undefined),
    );
    expect([...ends()].sort()).toEqual(['completed', 'completed', 'duplicate']);
    expect(await h.effects('order:d-1:ship')).toBe(1);
    const delayed = w.outcomes.filter((o) => o === 'delayed').length;
    expect(await metricValue(w, 'jobfleet_claim_conflicts_total')).toBe(delayed);
  });

  it('SIGKILL between a batch commit and its acks: every job of the batch redelivered, each recorded once, acked as a duplicate', async () => {
    const env = {
      JOBFLEET_QUEUE: QUEUE,
      JOBFLEET_QUEUE_TYPE: queueType(),
      JOBFLEET_BROKER_URL: h.rabbit.amqpUrl,
      JOBFLEET_CLAIMS_URL: h.db.url,
      JOBFLEET_PREFETCH: '16',
      JOBFLEET_LEASE_SECONDS: '5',
    };
    // Published before the worker starts, so that one burst arrives at once.
    const keys = await Promise.all(
      Array.from({ length: 12 }, (_, i) => h.job(`b-${i}`).then((j) => j.key)),
    );
    // The worker's broker goes through a proxy this test hangs once the burst is being
    // handled, so no ack of the batch reaches the broker; then SIGKILL, from outside.
    const u = new URL(h.rabbit.amqpUrl);
    const broker = await startTcpProxy(u.hostname, Number(u.port));
    const doomed = await spawnEffectWorker({
      ...env,
      JOBFLEET_BROKER_URL: viaProxy(h.rabbit.amqpUrl, broker),
      JOBFLEET_TEST_HANDLER_MS: '300',
    });
    procs.push(doomed);
    const count = async (state: string) =>
      (
        await pool.query<{ n: number }>(
          'select count(*)::int as n from jobfleet_claims where state = $1',
          [state],
        )
      ).rows[0]!.n;
    try {
      await eventually(
        'the burst handled',
        async () => ((await count('running')) ? true : undefined),
        30_000,
        10,
      );
      broker.hang();
      await eventually(
        'a batch recorded',
        async () => ((await count('completed')) ? true : undefined),
        30_000,
        10,
      );
      doomed.proc.kill('SIGKILL');
      expect((await doomed.exited).signal).toBe('SIGKILL');
    } finally {
      await broker.close();
    }
    const recorded = await pool.query<{ key: string }>(
      `select key from jobfleet_claims where state = 'completed'`,
    );
    // the batch that carried the first record committed before the kill (often several jobs)
    expect(recorded.rowCount).toBeGreaterThanOrEqual(1);
    const next = await spawnEffectWorker(env);
    procs.push(next);
    // Every job came back to the next worker (none was acked through the hung broker), and it
    // settled each: run, or acked as a duplicate of the record the killed one made.
    const outcome = (o: string) => next.metric('jobfleet_jobs_total', { outcome: o });
    await eventually(
      'every job settled by the next worker',
      async () =>
        (await outcome('completed')) + (await outcome('duplicate')) === keys.length &&
        (await h.messages(QUEUE)) === 0
          ? true
          : undefined,
      30_000,
    );
    const dupes = await next.metric('jobfleet_jobs_total', { outcome: 'duplicate' });
    expect(dupes).toBe(recorded.rowCount); // each committed record's redelivery acked, not run
    for (const key of recorded.rows.map((r) => r.key)) expect(await h.effects(key)).toBe(1);
  });
});
