// `jobfleet verify` against a real claims database that real workers wrote:
// clean, it passes; each invariant, broken on purpose in the scratch schema,
// is reported by name with the offending rows and a non-zero exit.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { jobfleet } from '../fixtures/jobfleet-cli.js';
import { eventually } from '../ground/eventually.js';
import { Permanent } from '../../worker/index.js';
import { QUEUE, harness, type Harness } from './worker-harness.js';

let h: Harness;
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  await h?.cleanup();
});

interface Report {
  terminalKeys: number;
  results: Array<{ name: string; violations: number; sample: Record<string, unknown>[] }>;
}

async function verifyJson(extra: string[] = []): Promise<{ code: number | null; report: Report }> {
  const r = await jobfleet([
    'verify',
    '--claims-url',
    h.db.url,
    '--max-attempts',
    '3',
    '--json',
    ...extra,
  ]);
  expect(r.stderr).toBe('');
  return { code: r.code, report: JSON.parse(r.stdout) as Report };
}

const violated = (report: Report) =>
  Object.fromEntries(report.results.filter((r) => r.violations > 0).map((r) => [r.name, r]));

/** Two completed jobs, one retried then completed, one dead-lettered: the ack journal has all four kinds. */
async function realHistory(): Promise<void> {
  const w = await h.startWorker({
    handlers: {
      ship: h.effectHandler((job) => {
        const id = (job.payload as { orderId: string }).orderId;
        if (id === 'bad') throw new Permanent('order bad was cancelled');
        if (id === 'flaky' && job.attempt === 1) throw new Error('downstream reset');
      }),
    },
    config: { maxAttempts: 3 },
  });
  for (const id of ['a', 'b', 'flaky', 'bad']) await h.job(id);
  await h.waitOutcomes(w, 5); // flaky runs twice
  await h.job('a'); // published again: acked as a duplicate
  await h.waitOutcomes(w, 6);
  await w.stop(); // flushes the ack journal
  const { rows } = await h.db.pool.query<{ outcome: string; n: number }>(
    'select outcome, count(*)::int as n from jobfleet_acks group by 1 order by 1',
  );
  expect(Object.fromEntries(rows.map((r) => [r.outcome, r.n]))).toEqual({
    completed: 3,
    dead_lettered: 1,
    duplicate: 1,
    retried: 1,
  });
}

describe('jobfleet verify', () => {
  it('passes on what real workers wrote, printing the one-result-per-key query with its result', async () => {
    await realHistory();
    const { code, report } = await verifyJson();
    expect(violated(report)).toEqual({});
    expect(code).toBe(0);
    expect(report.terminalKeys).toBe(4);

    // PostgreSQL here trusts local connections: a password in the URL is ignored, and must not be printed.
    const withPassword = new URL(h.db.url);
    withPassword.password = 's3cret-pw';
    const text = await jobfleet([
      'verify',
      '--claims-url',
      withPassword.toString(),
      '--max-attempts',
      '3',
    ]);
    expect(text.code).toBe(0);
    expect(text.stdout).toContain('ok   one-terminal-result-per-key');
    expect(text.stdout).toMatch(/having count\(\*\) > 1\n\s+→ 0 violating rows/);
    expect(text.stdout).toContain('all 5 invariants hold');
    expect(text.stdout).not.toContain('s3cret-pw');
    expect(text.stdout).toContain('postgres://postgres:***@');
  });

  it('detects two terminal results for one key (primary key dropped)', async () => {
    await realHistory();
    const key = 'order:a:ship';
    await h.db.pool.query('alter table jobfleet_claims drop constraint jobfleet_claims_pkey');
    await h.db.pool.query(
      `insert into jobfleet_claims (key, state, attempts) values ($1, 'dead_lettered', 1)`,
      [key],
    );
    const { code, report } = await verifyJson();
    expect(code).toBe(1);
    expect(Object.keys(violated(report))).toEqual(['one-terminal-result-per-key']);
    expect(violated(report)['one-terminal-result-per-key']?.sample).toEqual([
      { key, terminal_results: '2' },
    ]);
  });

  it('detects acked deliveries without a durable record (claim and dead letter deleted)', async () => {
    await realHistory();
    await h.db.pool.query(`delete from jobfleet_claims where key = 'order:b:ship'`);
    await h.db.pool.query(`delete from jobfleet_dead_letters`);
    const { code, report } = await verifyJson();
    expect(code).toBe(1);
    expect(Object.keys(violated(report))).toEqual(['acked-deliveries-recorded']);
    const rows = violated(report)['acked-deliveries-recorded']?.sample ?? [];
    expect(rows.map((r) => [r.outcome, r.key]).sort()).toEqual([
      ['completed', 'order:b:ship'],
      ['dead_lettered', 'order:bad:ship'],
    ]);
  });

  it('cross-checks the business effects by key: one per completed key, and it can fail', async () => {
    await realHistory(); // a, b and flaky completed, one effect each; bad's handler wrote none
    const effects = ['--effects-table', 'effects', '--effects-key', 'key'];
    const clean = await verifyJson(effects);
    expect(violated(clean.report)).toEqual({});
    expect(clean.code).toBe(0);

    // a side effect run twice, one never written, one written by something else
    await h.db.pool.query(`insert into effects (key, attempt) values ('order:b:ship', 2)`);
    await h.db.pool.query(`delete from effects where key = 'order:a:ship'`);
    await h.db.pool.query(`insert into effects (key, attempt) values ('order:zz:ship', 1)`);
    const { code, report } = await verifyJson(effects);
    expect(code).toBe(1);
    expect(Object.keys(violated(report))).toEqual(['one-effect-per-completed-key']);
    const rows = violated(report)['one-effect-per-completed-key']?.sample ?? [];
    expect(rows.map((r) => [r.key, r.problem]).sort()).toEqual([
      ['order:a:ship', 'completed claim without an effect'],
      ['order:b:ship', 'more than one effect'],
      ['order:zz:ship', 'effect without a completed claim'],
    ]);
  });

  it('detects a retry scheduled past the attempt ceiling', async () => {
    await realHistory();
    await h.db.pool.query(
      `insert into jobfleet_claims (key, state, attempts, retry_at) values ('order:c:ship', 'released', 3, now())`,
    );
    const { code, report } = await verifyJson();
    expect(code).toBe(1);
    expect(Object.keys(violated(report))).toEqual(['retries-within-ceiling']);
    expect(violated(report)['retries-within-ceiling']?.sample).toEqual([
      { source: 'claim', key: 'order:c:ship', state: 'released', attempts: 3 },
    ]);
    // The same history is within a higher ceiling.
    expect((await verifyJson(['--max-attempts', '4'])).code).toBe(0);
  });

  it('detects dead letters that lack replay metadata', async () => {
    await realHistory();
    await h.db.pool.query(`update jobfleet_dead_letters set reason = '', payload_hash = 'n/a'`);
    const { code, report } = await verifyJson();
    expect(code).toBe(1);
    expect(Object.keys(violated(report))).toEqual(['dead-letters-replayable']);
    expect(violated(report)['dead-letters-replayable']?.sample).toMatchObject([
      { key: 'order:bad:ship', missing: 'no reason, no payload hash' },
    ]);
  });

  it('detects quarantined entries whose message left the dead-letter queue', async () => {
    await realHistory();
    const mgmt = ['--management-url', h.rabbit.mgmtUrl, '--vhost', h.rabbit.vhost];
    // The management API refreshes queue counts every few seconds: wait for it.
    const verdict = (code: number) =>
      eventually(`verify to exit ${code}`, async () => {
        const r = await verifyJson(mgmt);
        return r.code === code ? r : undefined;
      });
    await verdict(0);
    expect(await h.drainQueue(`${QUEUE}.dlq`)).toHaveLength(1); // someone purged the DLQ
    const { report } = await verdict(1);
    expect(violated(report)['dead-letters-held']?.sample).toEqual([
      { queue: QUEUE, dead_letter_queue: `${QUEUE}.dlq`, quarantined: 1, held: 0 },
    ]);
  });

  it('says what to fix when it cannot run', async () => {
    const missing = await jobfleet(['verify']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('--claims-url is required (or set JOBFLEET_CLAIMS_URL)');
    const empty = await jobfleet(['verify', '--claims-url', h.db.url]);
    expect(empty.code).toBe(2);
    expect(empty.stderr).toMatch(/no jobfleet_claims table in .*: pass --schema/);
    const bad = await jobfleet(['verify', '--claims-url', h.db.url, '--max-attempts', 'x']);
    expect(bad.stderr).toContain('--max-attempts must be a positive integer');
  });
});
