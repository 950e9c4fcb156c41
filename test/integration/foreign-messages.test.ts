// Messages a producer in another language writes by hand, as docs/wire-format.md
// describes them: bytes through raw amqplib, never the library's publish().
// A well-formed one is run once and acked; a malformed one is quarantined at
// once with a reason naming the field, never retried.
import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually } from '../ground/eventually.js';
import { QUEUE, harness, type Harness } from './worker-harness.js';

let h: Harness;
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  await h?.cleanup();
});

/** The envelope and properties exactly as the wire-format page's table lists them. */
function byHand(orderId: string, change: Record<string, unknown> = {}) {
  const id = randomUUID();
  const now = Date.now();
  const body = {
    id,
    key: `order:${orderId}:ship`, // the key rule order:{orderId}:ship, rendered by the producer
    type: 'ship',
    schemaVersion: 1,
    payload: { orderId },
    createdAt: new Date(now).toISOString(),
    ...change,
  };
  const props = {
    contentType: 'application/json',
    messageId: id,
    timestamp: Math.floor(now / 1000),
    headers: { timestamp_in_ms: now, 'x-jobfleet-attempt': 0 },
  };
  return { body: JSON.stringify(body), props, key: String(body.key) };
}

describe('a message built by hand from the wire format', () => {
  it('is run once, recorded, and acked', async () => {
    const w = await h.startWorker();
    const m = byHand('hand-1');
    await h.publishRaw(m.body, m.props);
    expect(await h.waitOutcomes(w, 1)).toEqual(['completed']);
    expect(await h.effects(m.key)).toBe(1);
    expect(await h.claim(m.key)).toMatchObject({ state: 'completed' });
    expect(await h.messages(QUEUE)).toBe(0);
  });

  it.each([
    ['no type', { type: undefined }, /^invalid envelope: .*\btype\b/],
    [
      'a schemaVersion the contract does not accept',
      { schemaVersion: 7 },
      /^schemaVersion 7 is outside/,
    ],
    [
      'a key that is not the rendered rule',
      { key: 'order:someone-else:ship' },
      /^key "order:someone-else:ship" does not match key rule/,
    ],
    [
      'a createdAt that is no date',
      { createdAt: 'yesterday' },
      /^invalid envelope: .*\bcreatedAt\b/,
    ],
  ])('with %s is quarantined at once, its reason naming the field', async (_, change, field) => {
    const w = await h.startWorker();
    const m = byHand('hand-2', change);
    await h.publishRaw(m.body, m.props);
    expect(await h.waitOutcomes(w, 1)).toEqual(['dead_lettered']);
    const rows = await eventually('the dead-letter row', async () => {
      const r = await h.db.pool.query<{ reason: string; attempts: number }>(
        'select reason, attempts from jobfleet_dead_letters',
      );
      return r.rowCount ? r.rows : undefined;
    });
    expect(rows).toHaveLength(1);
    expect(rows[0]!.reason).toMatch(field);
    expect(rows[0]!.attempts).toBeLessThanOrEqual(1); // never retried
    expect(await h.effects()).toBe(0);
    expect((await h.drainQueue(`${QUEUE}.dlq`)).length).toBe(1);
  });
});
