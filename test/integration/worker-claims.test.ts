// Claims over time: lease renewal while a long handler runs, and retention
// sweeps that keep the table (and the claim path) from growing without bound.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ClaimStore } from '../../worker/claim-store.js';
import { harness, type Harness } from './worker-harness.js';

let h: Harness;
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  await h?.cleanup();
});

describe('lease renewal', () => {
  it('a handler that outlives its lease keeps the claim: a duplicate arriving meanwhile waits instead of taking over', async () => {
    let calls = 0;
    const w = await h.startWorker({
      config: { leaseSeconds: 5 },
      handlers: {
        ship: h.effectHandler(async () => {
          if (++calls === 1) await new Promise((r) => setTimeout(r, 8000));
        }),
      },
    });
    const { key } = await h.job('o-80');
    await new Promise((r) => setTimeout(r, 6000)); // past the original 5 s lease
    const row = await h.claim(key);
    expect(row).toMatchObject({ state: 'running', takeovers: 0 });
    expect((row!.lease_until as Date).getTime()).toBeGreaterThan(Date.now());
    await h.job('o-80'); // a duplicate publish
    await h.waitOutcomes(w, 3, 30_000);
    expect(w.outcomes).toEqual(['delayed', 'completed', 'duplicate']);
    expect(calls).toBe(1);
    expect(await h.effects(key)).toBe(1);
    expect(await h.claim(key)).toMatchObject({ takeovers: 0, attempts: 1 });
  }, 40_000);
});

describe('retention', () => {
  it('sweeps completed claims past the retention, oldest first through the first_seen_at index; running, quarantined and recent ones stay', async () => {
    const w = await h.startWorker({ config: { claimRetentionSeconds: 3600 } });
    await h.db.pool.query(`
      insert into jobfleet_claims (key, state, attempts, first_seen_at, completed_at)
      select 'old-' || g, 'completed', 1, now() - interval '3 hours', now() - interval '2 hours'
      from generate_series(1, 2500) g`);
    // first seen long ago, completed recently (retried for hours): kept
    await h.db.pool.query(`
      insert into jobfleet_claims (key, state, attempts, first_seen_at, completed_at)
      select 'new-' || g, 'completed', 1, now() - interval '3 hours', now() - interval '10 minutes'
      from generate_series(1, 10) g`);
    await h.db.pool.query(`
      insert into jobfleet_claims (key, state, owner, lease_until, attempts, first_seen_at)
      values ('busy', 'running', gen_random_uuid(), now() - interval '3 hours', 1, now() - interval '4 hours'),
             ('poison', 'dead_lettered', null, null, 5, now() - interval '4 hours')`);
    // ack-journal rows of swept keys go with them (verify must not miss a record swept on purpose)
    await h.db.pool.query(`
      insert into jobfleet_acks (delivery_id, key, outcome, attempt, acked_at)
      select 'd-' || k, k, 'completed', 1, now() from (values ('old-1'), ('old-2'), ('new-1')) v(k)`);
    await h.db.pool.query('analyze jobfleet_claims');

    const plan = await h.db.pool.query<{ 'QUERY PLAN': string }>(
      `explain select key from jobfleet_claims where first_seen_at < now() - interval '1 hour' and state = 'completed' and completed_at < now() - interval '1 hour' order by first_seen_at limit 1000`,
    );
    expect(plan.rows.map((r) => r['QUERY PLAN']).join('\n')).toContain(
      'jobfleet_claims_first_seen_at',
    );

    expect(await w.sweepClaims()).toBe(2500);
    const { rows } = await h.db.pool.query<{ state: string; n: number }>(
      `select state, count(*)::int as n from jobfleet_claims group by state order by state`,
    );
    expect(rows).toEqual([
      { state: 'completed', n: 10 },
      { state: 'dead_lettered', n: 1 },
      { state: 'running', n: 1 },
    ]);
    const journal = await h.db.pool.query<{ key: string }>('select key from jobfleet_acks');
    expect(journal.rows).toEqual([{ key: 'new-1' }]);
    // A batch at a time.
    const store = new ClaimStore(h.db.pool);
    await h.db.pool.query(
      `update jobfleet_claims set completed_at = now() - interval '2 hours' where state = 'completed'`,
    );
    expect(await store.sweepCompleted(3600, 4)).toBe(4);
  });
});
