import { describe, expect, it } from 'vitest';
import { RateLimiter } from '../../src/dlq/rate-limiter.js';
import { editBody, ReplayRefused } from '../../src/dlq/replay.js';
import { whereClause } from '../../src/dlq/store.js';

describe('RateLimiter', () => {
  it('lets a burst through, then paces at the rate', () => {
    const r = new RateLimiter(4, 2);
    expect([r.take(0), r.take(0)]).toEqual([0, 0]);
    expect(r.take(0)).toBe(250);
    expect(r.take(250)).toBe(250); // waited its turn; the next is a quarter second later
    expect(r.take(2000)).toBe(0); // refilled, capped at the burst
    expect(r.take(2000)).toBe(0);
    expect(r.take(2000)).toBe(250);
  });

  it('averages the rate over a long run', () => {
    const r = new RateLimiter(10, 1);
    let t = 0;
    for (let i = 0; i < 101; i++) t += r.take(t);
    expect(t).toBe(10_000); // 100 gaps of 100 ms
  });

  it('says when the next token is due without taking it', () => {
    const r = new RateLimiter(0.1, 1);
    expect(r.due(0)).toBe(0);
    expect(r.take(0)).toBe(0);
    expect(r.due(0)).toBe(10_000);
    expect(r.due(4000)).toBe(6000);
    expect(r.due(4000)).toBe(6000); // asking again takes nothing
    expect(r.due(10_000)).toBe(0);
    expect(r.take(10_000)).toBe(0);
  });

  it('takes a new rate mid-run: what refilled at the old rate stays, the next token comes at the new one', () => {
    const r = new RateLimiter(1, 1);
    expect(r.take(0)).toBe(0);
    r.setRate(0.5, 500); // half a token refilled at 1/s, the rest at 0.5/s
    expect(r.due(500)).toBe(1000);
    expect(r.take(1500)).toBe(0);
    expect(() => r.setRate(0, 1500)).toThrow('rate must be above 0');
  });

  it('refuses nonsense settings by name', () => {
    expect(() => new RateLimiter(0, 1)).toThrow('rate must be above 0');
    expect(() => new RateLimiter(1, 0)).toThrow('burst must be at least 1');
  });
});

describe('editBody', () => {
  it('replaces the payload and keeps id, key, type and schema version', () => {
    const original = Buffer.from(
      JSON.stringify({ id: 'j1', key: 'k1', type: 't', schemaVersion: 2, payload: { a: 1 } }),
    );
    expect(JSON.parse(editBody(original, { a: 2 }).toString())).toEqual({
      id: 'j1',
      key: 'k1',
      type: 't',
      schemaVersion: 2,
      payload: { a: 2 },
    });
  });

  it('refuses bodies that are not envelopes with a key', () => {
    expect(() => editBody(Buffer.from('not json'), {})).toThrow(ReplayRefused);
    expect(() => editBody(Buffer.from('{"payload":1}'), {})).toThrow('no idempotency key');
  });
});

describe('whereClause', () => {
  it('narrows by every field given, with parameters (never interpolated)', () => {
    const w = whereClause({
      queue: 'q',
      ids: [1, 2],
      reason: '50%_off',
      failureClass: 'permanent',
      since: new Date(0),
    });
    expect(w.sql).toBe(
      "queue = $1 and status = $2 and id = any($3::bigint[]) and reason ilike '%' || $4 || '%' and failure_class = $5 and dead_lettered_at >= $6",
    );
    expect(w.params).toEqual(['q', 'quarantined', [1, 2], '50\\%\\_off', 'permanent', new Date(0)]);
  });
});
