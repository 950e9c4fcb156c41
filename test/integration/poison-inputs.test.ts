// Messages whose own content the claim store cannot hold, on real RabbitMQ and
// PostgreSQL: each ends as exactly one dead letter (one DLQ copy, one row with
// a reason naming the field), the worker stays ready, nothing loops.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HEADERS, Permanent } from '../../worker/index.js';
import { eventually } from '../ground/eventually.js';
import { QUEUE, harness, metricValue, type Harness, type TestWorker } from './worker-harness.js';

const DLQ = `${QUEUE}.dlq`;
const run = promisify(execFile);
let h: Harness;
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  await h?.cleanup();
});

const envelope = (o: Record<string, unknown>) => ({
  id: 'j-1',
  key: 'order:o-1:ship',
  type: 'ship',
  schemaVersion: 1,
  payload: { orderId: 'o-1' },
  createdAt: new Date().toISOString(),
  ...o,
});

interface DeadLetterRow {
  delivery_id: string;
  key: string | null;
  schema_version: number | null;
  attempts: number;
  failure_class: string;
  reason: string;
}

const deadLetterRows = async () =>
  (await h.db.pool.query<DeadLetterRow>('select * from jobfleet_dead_letters order by id')).rows;

/** Waits for `n` dead-letter rows, then checks that the worker settled each delivery once. */
async function expectDeadLetters(w: TestWorker, n: number): Promise<DeadLetterRow[]> {
  const rows = await eventually(
    `${n} dead-letter rows`,
    async () => ((await deadLetterRows()).length >= n ? deadLetterRows() : undefined),
    15_000,
  );
  await h.waitOutcomes(w, n);
  expect(rows).toHaveLength(n);
  expect(w.outcomes).toEqual(Array(n).fill('dead_lettered'));
  expect((await h.drainQueue(DLQ)).length).toBe(n); // one copy per dead letter, no more
  expect(await h.messages(QUEUE)).toBe(0);
  expect(await metricValue(w, 'jobfleet_redeliveries_total')).toBe(0);
  expect(w.ready()).toBe(true);
  return rows;
}

describe('a message the claim store cannot hold is one dead letter, never a loop', () => {
  it.each([1.5, 3e9, 2 ** 53 + 1, 1e300])(
    'schemaVersion %s (not a 32-bit integer)',
    async (schemaVersion) => {
      const w = await h.startWorker();
      await h.publishRaw(JSON.stringify(envelope({ schemaVersion })), { messageId: 'm-1' });
      const [row] = await expectDeadLetters(w, 1);
      expect(row).toMatchObject({
        delivery_id: 'm-1',
        failure_class: 'invalid_envelope',
        schema_version: null,
      });
      expect(row?.reason).toMatch(/schemaVersion/);
    },
  );

  it('a key containing NUL', async () => {
    const w = await h.startWorker();
    await h.publishRaw(JSON.stringify(envelope({ key: 'order:o-1\u0000:ship' })), {
      messageId: 'm-nul',
    });
    const [row] = await expectDeadLetters(w, 1);
    expect(row).toMatchObject({ failure_class: 'invalid_envelope', key: 'order:o-1\\u0000:ship' });
    expect(row?.reason).toMatch(/key: must not contain NUL/);
    expect(await h.effects()).toBe(0);
  });

  it('keys that differ only in an invalid UTF-8 byte are two dead letters, not one job and a duplicate', async () => {
    const w = await h.startWorker();
    const body = (byte: number) =>
      Buffer.concat([
        Buffer.from(`{"id":"j-${byte}","key":"order:o-1:ship`),
        Buffer.from([byte]),
        Buffer.from(
          `","type":"ship","schemaVersion":1,"payload":{"orderId":"o-1"},"createdAt":"${new Date().toISOString()}"}`,
        ),
      ]);
    await h.publishRaw(body(0xff), { messageId: 'm-ff' });
    await h.publishRaw(body(0xfe), { messageId: 'm-fe' });
    // the two are dead-lettered side by side: their rows come in either order
    const rows = (await expectDeadLetters(w, 2)).sort((a, b) =>
      a.delivery_id < b.delivery_id ? -1 : 1,
    );
    expect(rows.map((r) => [r.delivery_id, r.failure_class])).toEqual([
      ['m-fe', 'not_json'],
      ['m-ff', 'not_json'],
    ]);
    for (const r of rows) expect(r.reason).toMatch(/not valid UTF-8/);
    expect(await h.effects()).toBe(0);
    expect(await h.claim('order:o-1:ship')).toBeUndefined();
  });

  it('forged headers (attempt, first-seen, not-before out of range) and a NUL message id', async () => {
    const w = await h.startWorker();
    // not JSON, with an attempt count no integer column holds
    await h.publishRaw('garbage', {
      messageId: 'm\u0000x',
      headers: { [HEADERS.attempt]: 3e9, [HEADERS.firstSeen]: 1e300 },
    });
    const [row] = await expectDeadLetters(w, 1);
    expect(row).toMatchObject({ delivery_id: 'm\\u0000x', attempts: 0, failure_class: 'not_json' });
    // a valid job whose not-before is centuries away runs now instead of waiting forever
    await h.publishRaw(JSON.stringify(envelope({})), {
      messageId: 'm-2',
      headers: { [HEADERS.notBefore]: 1e15 },
    });
    await h.waitOutcomes(w, 2);
    expect(w.outcomes[1]).toBe('completed');
    expect(await h.effects('order:o-1:ship')).toBe(1);
  });

  it("a handler's result or error that the store cannot hold still ends the job once", async () => {
    const runs = new Map<string, number>();
    const w = await h.startWorker({
      handlers: {
        ship: (job) => {
          const { orderId } = job.payload as { orderId: string };
          runs.set(orderId, (runs.get(orderId) ?? 0) + 1);
          if (orderId === 'o-err' && runs.get(orderId) === 1)
            throw new Error('downstream said \u0000\ud800');
          if (orderId === 'o-perm') throw new Permanent('refused: \u0000');
          return Promise.resolve({ echo: 'nul \u0000 and lone \udc00', big: 12n });
        },
      },
    });
    await h.job('o-ok');
    await h.job('o-err');
    await h.job('o-perm');
    await h.waitOutcomes(w, 4);
    expect([...w.outcomes].sort()).toEqual(['completed', 'completed', 'dead_lettered', 'retried']);
    expect(await h.claim('order:o-ok:ship')).toMatchObject({
      state: 'completed',
      result: { echo: 'nul \\u0000 and lone \ufffd', big: '12' },
    });
    expect(await h.claim('order:o-err:ship')).toMatchObject({ state: 'completed', attempts: 2 });
    const [row] = await deadLetterRows();
    expect(row?.reason).toBe('Permanent: refused: \\u0000');
    expect(w.ready()).toBe(true);
  });
});

describe('a consumer cancelled by the broker', () => {
  it('reconnects and closes the old connection: 20 cancels leave one connection', async () => {
    // the consumer's connection alone: no outbox relay (its own connection comes when it is active)
    const w = await h.startWorker({ config: { outboxRelay: 'off' } });
    // This process's open connections to the broker, read live from the kernel
    // (the management API lists connections from sampled statistics).
    const port = new URL(h.rabbit.amqpUrl).port || '5672';
    const connections = async () => {
      const { stdout } = await run('ss', ['-tnpH', 'state', 'established', `( dport = :${port} )`]);
      return stdout.split('\n').filter((l) => l.includes(`pid=${process.pid},`)).length;
    };
    // consumers on the work queue, read live with a passive declare (a missing queue reads 0)
    const consumers = async () => {
      const c = await h.conn.createChannel();
      c.on('error', () => undefined);
      try {
        return (await c.checkQueue(QUEUE)).consumerCount;
      } catch {
        return 0;
      } finally {
        await c.close().catch(() => undefined);
      }
    };
    const consuming = () =>
      eventually('the worker consuming', async () =>
        (await consumers()) === 1 ? true : undefined,
      );
    await consuming();
    const before = await connections(); // the harness's publisher and the worker
    expect(before).toBeGreaterThanOrEqual(2);
    for (let i = 0; i < 20; i++) {
      // Deleting the queue makes the broker cancel its consumer (basic.cancel);
      // the worker reconnects, declares the queue again and consumes.
      await h.ch.deleteQueue(QUEUE);
      await consuming();
    }
    await h.job('o-after');
    await h.waitOutcomes(w, 1);
    expect(w.outcomes).toEqual(['completed']);
    await eventually(
      `the connection count back to ${before}`,
      async () => {
        const now = await connections();
        if (now === before) return true;
        throw new Error(`${now} connections`); // a timeout says how many were left
      },
      20_000,
      250,
    );
  });
});
