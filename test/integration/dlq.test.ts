// The quarantine on real RabbitMQ and PostgreSQL, driven through the
// `jobfleet dlq` command: dead-letter → list → replay → completes once;
// skips, refusals, audited edits, the rate limit and the failure threshold.
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Permanent } from '../../worker/index.js';
import { jobfleet } from '../fixtures/jobfleet-cli.js';
import { eventually } from '../ground/eventually.js';
import { QUEUE, harness, type Harness, type TestWorker } from './worker-harness.js';

let h: Harness;
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  await h?.cleanup();
});

const DLQ = `${QUEUE}.dlq`;
/** Orders whose downstream still rejects them; tests "deploy the fix" by clearing it. */
const broken = new Set<string>();

async function worker(extra: Record<string, unknown> = {}): Promise<TestWorker> {
  return h.startWorker({
    handlers: {
      ship: h.effectHandler((job) => {
        const p = job.payload as { orderId: string; qty?: number };
        if (broken.has(p.orderId))
          throw new Permanent(`order ${p.orderId} rejected by the carrier`);
        if (p.qty !== undefined && p.qty < 0) throw new Permanent(`qty ${p.qty} is negative`);
      }),
    },
    config: { deadLetterOwner: 'team-shipping', deadLetterPayloads: 'store', ...extra },
  });
}

const conn = () => ['--claims-url', h.db.url, '--amqp-url', h.rabbit.amqpUrl, '--queue', QUEUE];

async function deadLetters(n: number): Promise<void> {
  await eventually(`${n} dead letters recorded`, async () => {
    const { rows } = await h.db.pool.query<{ n: number }>(
      `select count(*)::int as n from jobfleet_dead_letters where status = 'quarantined'`,
    );
    return (rows[0]?.n ?? 0) >= n ? true : undefined;
  });
}

async function listed(): Promise<Array<Record<string, unknown>>> {
  const r = await jobfleet(['dlq', 'list', ...conn(), '--json']);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return (JSON.parse(r.stdout) as { rows: Array<Record<string, unknown>> }).rows;
}

/**
 * The incident is over: no dead letter arrived within the hold's window, so a
 * replay goes ahead (while failures still arrive it waits: the last test).
 */
const incidentOver = () =>
  h.db.pool.query(
    `update jobfleet_dead_letters set dead_lettered_at = now() - interval '3 minutes'`,
  );

/** verify right after a replay, with the DLQ check through the management API (whose counts are sampled) */
async function verifyExit(): Promise<number | null> {
  const r = await jobfleet([
    'verify',
    '--claims-url',
    h.db.url,
    '--management-url',
    h.rabbit.mgmtUrl,
    '--vhost',
    h.rabbit.vhost,
  ]);
  if (r.code !== 0) console.error(r.stdout, r.stderr);
  return r.code;
}

describe('jobfleet dlq', () => {
  it('dead-letter → list → replay: completes once, same key, attempts reset, audited; verify passes', async () => {
    broken.add('o-1');
    await worker();
    const { key } = await h.job('o-1');
    await deadLetters(1);
    const rows = await listed();
    expect(rows).toMatchObject([
      {
        key,
        type: 'ship',
        failure_class: 'permanent',
        reason: 'Permanent: order o-1 rejected by the carrier',
        owner: 'team-shipping',
        attempts: 1,
        status: 'quarantined',
      },
    ]);
    expect(await h.effects(key)).toBe(0);

    await incidentOver();
    broken.delete('o-1'); // the fix is deployed
    const id = String(rows[0]!.id);
    const r = await jobfleet([
      'dlq',
      'replay',
      ...conn(),
      '--id',
      id,
      '--reason',
      'carrier fixed the rejection (INC-7)',
      '--initiator',
      'alice',
      '--wait',
    ]);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain('completed 1, failed again 0, pending 0');
    expect(r.code).toBe(0);

    expect(await h.effects(key)).toBe(1);
    expect(await h.claim(key)).toMatchObject({ state: 'completed', attempts: 1 });
    const { rows: audit } = await h.db.pool.query(
      'select action, initiator, reason, key from jobfleet_dead_letter_audit',
    );
    expect(audit).toEqual([
      {
        action: 'replayed',
        initiator: 'alice',
        reason: 'carrier fixed the rejection (INC-7)',
        key,
      },
    ]);
    expect(await listed()).toEqual([]);
    expect(await h.messages(DLQ)).toBe(0);
    const show = await jobfleet(['dlq', 'show', ...conn(), id]);
    expect(show.stdout).toMatch(/replayed\s+by alice: carrier fixed the rejection/);
    expect(await verifyExit()).toBe(0);
  });

  it('a key that completed meanwhile is skipped and reported, not run again', async () => {
    await worker();
    // A copy with a schema version outside the contract is dead-lettered before any claim…
    const { key } = await h.job('o-2', { schemaVersion: 9 });
    await deadLetters(1);
    // …while the producer's corrected copy completes.
    await h.job('o-2');
    await eventually('the corrected copy to complete', async () =>
      (await h.claim(key))?.state === 'completed' ? true : undefined,
    );
    await incidentOver();
    const r = await jobfleet([
      'dlq',
      'replay',
      ...conn(),
      '--key',
      key,
      '--reason',
      'requeue everything for o-2',
    ]);
    expect(r.stdout).toContain('replayed 0 of 1 selected; skipped 1 already completed');
    expect(r.code).toBe(0);
    expect(await h.effects(key)).toBe(1);
    const { rows } = await h.db.pool.query('select status from jobfleet_dead_letters');
    expect(rows).toEqual([{ status: 'superseded' }]);
    expect(await verifyExit()).toBe(0);
  });

  it('an edited payload: refused without a reason; with one, audited with both hashes, and it completes', async () => {
    await worker();
    const { key } = await h.job('o-3', { payload: { orderId: 'o-3', qty: -1 } });
    await deadLetters(1);
    const [row] = await listed();
    const file = path.join(os.tmpdir(), `jobfleet-edit-${process.pid}.json`);
    writeFileSync(file, JSON.stringify({ orderId: 'o-3', qty: 1 }));

    const refused = await jobfleet([
      'dlq',
      'replay',
      ...conn(),
      '--id',
      String(row!.id),
      '--edit-payload',
      file,
    ]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('replay needs --reason');
    expect(await listed()).toHaveLength(1); // untouched

    // an enumerated option with a typo is refused with the valid values, never matched against nothing
    for (const [flag, value] of [
      ['--class', 'permanant'],
      ['--status', 'replyed'],
    ] as const) {
      const typo = await jobfleet(['dlq', 'replay', ...conn(), flag, value, '--reason', 'typo']);
      expect(typo.code).toBe(2);
      expect(typo.stderr).toContain(`${flag} must be one of`);
      expect(typo.stderr).toContain(flag === '--class' ? 'permanent' : 'replayed');
    }
    expect(await listed()).toHaveLength(1); // untouched

    await incidentOver();
    const r = await jobfleet([
      'dlq',
      'replay',
      ...conn(),
      '--id',
      String(row!.id),
      '--edit-payload',
      file,
      '--reason',
      'support fixed the quantity (TICKET-9)',
      '--wait',
    ]);
    expect(r.code).toBe(0);
    expect(await h.effects(key)).toBe(1);
    const { rows: audit } = await h.db.pool.query<{
      old_payload_hash: string;
      new_payload_hash: string;
      reason: string;
    }>('select old_payload_hash, new_payload_hash, reason from jobfleet_dead_letter_audit');
    expect(audit).toHaveLength(1);
    expect(audit[0]!.old_payload_hash).toBe(row!.payload_hash);
    expect(audit[0]!.new_payload_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(audit[0]!.new_payload_hash).not.toBe(audit[0]!.old_payload_hash);
    expect(audit[0]!.reason).toBe('support fixed the quantity (TICKET-9)');
    // The stored original hashes to the old hash: the audit pins both versions.
    const { rows: stored } = await h.db.pool.query<{ payload: Buffer }>(
      'select payload from jobfleet_dead_letters',
    );
    expect(createHash('sha256').update(stored[0]!.payload).digest('hex')).toBe(
      audit[0]!.old_payload_hash,
    );
    expect(await verifyExit()).toBe(0);
  });

  it('respects the rate limit (measured from the audit timestamps)', async () => {
    const orders = Array.from({ length: 12 }, (_, i) => `r-${i}`);
    for (const o of orders) broken.add(o);
    await worker();
    for (const o of orders) await h.job(o);
    await deadLetters(12);
    await incidentOver();
    for (const o of orders) broken.delete(o);
    const r = await jobfleet([
      'dlq',
      'replay',
      ...conn(),
      '--class',
      'permanent',
      '--rate',
      '4',
      '--burst',
      '1',
      '--max-count',
      '12',
      '--reason',
      'carrier back',
    ]);
    expect(r.code).toBe(0);
    const { rows } = await h.db.pool.query<{ span: number; n: number }>(
      `select extract(epoch from max(at) - min(at))::float8 as span, count(*)::int as n
       from jobfleet_dead_letter_audit where action = 'replayed'`,
    );
    const { span, n } = rows[0]!;
    expect(n).toBe(12);
    // 12 at 4/s with a burst of 1: 11 gaps of 250 ms at least (minus clock granularity).
    expect(span).toBeGreaterThanOrEqual(2.7);
    console.log(
      `rate limit: 12 replays in ${span.toFixed(2)} s = ${(11 / span).toFixed(2)}/s (limit 4/s)`,
    );
    await eventually('every replayed job to complete', async () =>
      (await h.effects()) === 12 ? true : undefined,
    );
  });

  it('stops early when replayed jobs fail again, and says so', async () => {
    const orders = Array.from({ length: 10 }, (_, i) => `f-${i}`);
    for (const o of orders) broken.add(o); // the cause is not fixed
    await worker();
    for (const o of orders) await h.job(o);
    await deadLetters(10);
    await incidentOver();
    const r = await jobfleet([
      'dlq',
      'replay',
      ...conn(),
      '--class',
      'permanent',
      '--rate',
      '3',
      '--burst',
      '1',
      '--failure-threshold',
      '2',
      '--max-count',
      '10',
      '--reason',
      'try again',
    ]);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/stopped early: \d+ replayed jobs failed again \(threshold 2\)/);
    const { rows } = await h.db.pool.query<{ status: string; n: number }>(
      `select status, count(*)::int as n from jobfleet_dead_letters
       where delivery_id not like '%~replay-%' group by status order by status`,
    );
    const by = Object.fromEntries(rows.map((x) => [x.status, x.n]));
    expect(by.replayed).toBeGreaterThanOrEqual(2);
    expect(by.replayed).toBeLessThan(10); // the rest stay quarantined
    expect(by.quarantined).toBe(10 - by.replayed!);
    expect(await h.effects()).toBe(0);
  });

  it('waits while failures still arrive (nothing replayed) and gives up after --hold-timeout; --force replays, audited as forced', async () => {
    broken.add('h-1');
    await worker();
    const { key } = await h.job('h-1');
    await deadLetters(1);
    broken.delete('h-1'); // fixed, maybe: the dead letter is seconds old
    const args = [...conn(), '--class', 'permanent', '--reason', 'carrier says fixed'];
    // A bad argument is refused at once, before any wait for the hold.
    for (const rate of ['0', 'abc']) {
      const refused = await jobfleet(['dlq', 'replay', ...args, '--rate', rate]);
      expect(refused.stderr).toContain(`--rate must be a positive number, got "${rate}"`);
      expect(refused.stderr).not.toContain('held (');
      expect(refused.code).not.toBe(0);
    }
    const held = await jobfleet(['dlq', 'replay', ...args, '--hold-timeout', '1']);
    expect(held.stderr).toMatch(
      /held \(FailuresStillArriving\): 1 dead letters of class permanent arrived in the last 2 minutes/,
    );
    expect(held.stderr).toContain('Nothing was replayed.');
    expect(held.code).toBe(3);
    const audited = async () =>
      (
        await h.db.pool.query<{ reason: string }>(
          "select reason from jobfleet_dead_letter_audit where action = 'replayed'",
        )
      ).rows.map((r) => r.reason);
    expect(await audited()).toEqual([]);
    expect(await h.effects(key)).toBe(0);

    const forced = await jobfleet(['dlq', 'replay', ...args, '--force', '--wait']);
    expect(forced.stderr).toBe('');
    expect(forced.code).toBe(0);
    expect(await audited()).toEqual([
      'carrier says fixed (forced: replayed whatever the incident)',
    ]);
    expect(await h.effects(key)).toBe(1);
  });

  it('discard needs a reason and is recorded; the DLQ copy goes', async () => {
    broken.add('d-1');
    await worker();
    const { key } = await h.job('d-1');
    await deadLetters(1);
    const noReason = await jobfleet(['dlq', 'discard', ...conn(), '--key', key]);
    expect(noReason.code).toBe(2);
    expect(noReason.stderr).toContain('discard needs --reason');
    const r = await jobfleet([
      'dlq',
      'discard',
      ...conn(),
      '--key',
      key,
      '--reason',
      'order cancelled by the customer',
      '--initiator',
      'bob',
    ]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('discarded 1 of 1 selected');
    const { rows } = await h.db.pool.query(
      `select d.status, a.action, a.initiator, a.reason from jobfleet_dead_letters d
       join jobfleet_dead_letter_audit a on a.dead_letter_id = d.id`,
    );
    expect(rows).toEqual([
      {
        status: 'discarded',
        action: 'discarded',
        initiator: 'bob',
        reason: 'order cancelled by the customer',
      },
    ]);
    expect(await h.messages(DLQ)).toBe(0);
    expect(await verifyExit()).toBe(0);
  });
});
