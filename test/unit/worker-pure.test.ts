// Pure worker logic, by tables: backoff, delay tiers, Retry-After, the key
// rule, envelope decoding, config validation and reason compaction.
import pgUtils from 'pg/lib/utils.js';
import { describe, expect, it } from 'vitest';
import { delayTiersMs, retryDelayMs, tierFor } from '../../worker/backoff.js';
import { ConfigError, loadConfig } from '../../worker/config.js';
import {
  contractMismatches,
  keyRuleProblem,
  parseSchemaVersions,
  renderKey,
} from '../../worker/contract.js';
import {
  compactReason,
  decodeDelivery,
  envelopeSchema,
  parseEnvelope,
  plainEnvelope,
} from '../../worker/envelope.js';
import { parseRetryAfter, Throttled } from '../../worker/errors.js';
import { numberArray, textArray } from '../../worker/pg-arrays.js';
import { isStorableText, storable, storableJson } from '../../worker/storable.js';
import { isConnectionError, isMessageDataError, isStoreError } from '../../worker/store-errors.js';
import { topology } from '../../worker/topology.js';

const policy = { initialDelayMs: 1000, maxDelayMs: 600_000 };

describe('retryDelayMs', () => {
  it.each([
    // attempt, random, expected
    [1, 0.5, 1000], // cap 1 s; never below the initial delay
    [2, 0.5, 1000], // cap 2 s × 0.5
    [3, 0.75, 3000], // cap 4 s × 0.75
    [10, 0.5, 256_000], // cap 512 s
    [11, 0.999, 599_400], // cap 600 s (maxDelay), not 1024 s
    [30, 0.999, 599_400],
  ])('attempt %i with random %f → %i ms', (attempt, r, ms) => {
    expect(retryDelayMs(policy, attempt, undefined, () => r)).toBe(ms);
  });

  it('a valid Retry-After wins over the computed backoff, even a shorter one', () => {
    expect(retryDelayMs(policy, 9, 5000, () => 0.9)).toBe(5000);
    expect(retryDelayMs(policy, 1, 120_000, () => 0.1)).toBe(120_000);
  });

  it('is bounded by maxDelay and spreads out (full jitter)', () => {
    const seen = new Set<number>();
    for (let i = 0; i < 200; i++) {
      const d = retryDelayMs(policy, 12, undefined);
      expect(d).toBeGreaterThanOrEqual(1000);
      expect(d).toBeLessThanOrEqual(600_000);
      seen.add(Math.floor(d / 60_000));
    }
    expect(seen.size).toBeGreaterThan(5);
  });
});

describe('delay tiers', () => {
  it('span the initial to the max delay on a fixed ladder', () => {
    expect(
      delayTiersMs({ initialDelayMs: 1000, maxDelayMs: 600_000 }).map((t) => t / 1000),
    ).toEqual([1, 2, 5, 10, 20, 30, 60, 120, 300, 600]);
    expect(delayTiersMs({ initialDelayMs: 1000, maxDelayMs: 4000 }).map((t) => t / 1000)).toEqual([
      1, 2, 4,
    ]);
    expect(delayTiersMs({ initialDelayMs: 200, maxDelayMs: 200 })).toEqual([1000]);
  });

  it.each([
    [0, 1000],
    [1000, 1000],
    [1001, 2000],
    [2999, 5000],
    [599_999, 600_000],
    [7_200_000, 600_000], // longer than every tier: waits in the longest, then again
  ])('a %i ms delay waits in the %i ms tier (never shorter)', (delay, tier) => {
    expect(tierFor(delayTiersMs(policy), delay)).toBe(tier);
  });

  it('tier queues dead-letter back to the work queue after their TTL', () => {
    const t = topology({
      queue: 'q',
      deadLetterQueue: 'q.dlq',
      queueType: 'classic',
      initialDelaySeconds: 1,
      maxDelaySeconds: 4,
    });
    expect(
      [...t.tiers.values()].map((q) => [
        q.name,
        q.options.arguments['x-message-ttl'],
        q.options.arguments['x-dead-letter-routing-key'],
      ]),
    ).toEqual([
      ['q.retry.1s', 1000, 'q'],
      ['q.retry.2s', 2000, 'q'],
      ['q.retry.4s', 4000, 'q'],
    ]);
  });
});

describe('Retry-After', () => {
  const now = Date.parse('2026-11-29T12:00:00Z');
  it.each([
    ['120', 120_000],
    [' 0 ', 0],
    ['Sun, 29 Nov 2026 12:00:30 GMT', 30_000],
    ['Sun, 29 Nov 2026 11:00:00 GMT', 0], // a date in the past: now
    ['soon', undefined],
    ['-5', undefined],
    ['1.5', undefined],
    ['', undefined],
    [null, undefined],
    ['999999999', undefined], // absurd: ignored, computed backoff applies
  ])('%j → %j ms', (value, ms) => {
    expect(parseRetryAfter(value, now)).toBe(ms);
  });

  it('429 and 503 responses map to Throttled; others do not', () => {
    const res = (status: number, ra?: string) => ({
      status,
      headers: new Headers(ra ? { 'retry-after': ra } : {}),
    });
    expect(Throttled.fromResponse(res(429, '7'))?.retryAfterMs).toBe(7000);
    expect(Throttled.fromResponse(res(503))?.retryAfterMs).toBeUndefined();
    expect(Throttled.fromResponse(res(500, '7'))).toBeUndefined();
  });
});

describe('the key rule', () => {
  it.each([
    ['invoice:{invoiceId}:send', { invoiceId: 'inv-9' }, 'invoice:inv-9:send'],
    ['{tenant}/{order.id}', { tenant: 't1', order: { id: 42 } }, 't1/42'],
  ])('%s renders from the payload', (rule, payload, key) => {
    expect(renderKey(rule, payload)).toEqual({ ok: true, key });
  });

  it('names the missing fields', () => {
    expect(renderKey('a:{x}:{y.z}', { x: '' })).toEqual({
      ok: false,
      problem:
        'payload lacks x, y.z (a non-empty string or number) needed by key rule "a:{x}:{y.z}"',
    });
  });

  it.each([
    ['static-key', /no \{placeholder\}/],
    ['a:{b', /unbalanced/],
    ['', /empty/],
    ['a:{b}', undefined],
  ])('%j → %s', (rule, problem) => {
    const p = keyRuleProblem(rule);
    if (problem) expect(p).toMatch(problem);
    else expect(p).toBeUndefined();
  });

  it('contract mismatches name both values', () => {
    expect(
      contractMismatches(
        { keyRule: 'a:{x}', schemaVersions: [2, 3] },
        { keyRule: 'a:{x}', schemaVersions: [3, 2] },
      ),
    ).toEqual([]);
    expect(
      contractMismatches(
        { keyRule: 'a:{x}', schemaVersions: [2] },
        { keyRule: 'b:{x}', schemaVersions: [2, 3] },
      ),
    ).toEqual([
      'idempotency key rule differs: the worker code uses "a:{x}" but JOBFLEET_KEY_RULE is "b:{x}"',
      'schema versions differ: the worker code accepts [2] but JOBFLEET_SCHEMA_VERSIONS is [2, 3]',
    ]);
    expect(parseSchemaVersions('[2, 3]')).toEqual([2, 3]);
    expect(() => parseSchemaVersions('2,x')).toThrow(/"2,x" must be a comma-separated list/);
  });
});

describe('decodeDelivery', () => {
  const opts = {
    maxBytes: 10_000,
    types: new Set(['ship']),
    contract: { keyRule: 'o:{id}', schemaVersions: [1] },
  };
  const env = (o: object) =>
    Buffer.from(
      JSON.stringify({
        id: 'j1',
        key: 'o:1',
        type: 'ship',
        schemaVersion: 1,
        payload: { id: 1 },
        createdAt: '2026-11-29T12:00:00.000Z',
        ...o,
      }),
    );
  it.each([
    [env({}), undefined],
    [Buffer.from('nope'), 'not_json'],
    [env({ pad: 'x'.repeat(20_000) }), 'body_too_large'],
    [env({ createdAt: 'yesterday' }), 'invalid_envelope'],
    [env({ type: 'refund' }), 'unknown_type'],
    [env({ schemaVersion: 2 }), 'schema_version'],
    [env({ key: 'o:2' }), 'key_mismatch'],
  ])('case %#', (body, failureClass) => {
    const d = decodeDelivery(body, opts);
    expect(d.ok ? undefined : d.failureClass).toBe(failureClass);
  });

  // What PostgreSQL cannot store exactly never reaches it: each is a dead letter naming the field.
  it.each([
    ['schemaVersion 1.5', env({ schemaVersion: 1.5 }), /schemaVersion/],
    ['schemaVersion 3e9', env({ schemaVersion: 3e9 }), /schemaVersion: must fit a 32-bit integer/],
    ['schemaVersion 2^53+1', env({ schemaVersion: 2 ** 53 + 1 }), /schemaVersion/],
    ['schemaVersion 1e300', env({ schemaVersion: 1e300 }), /schemaVersion/],
    ['a NUL in the key', env({ key: 'o:1\u0000' }), /key: must not contain NUL/],
    ['a NUL in the id', env({ id: 'j\u00001' }), /id: must not contain NUL/],
    ['a lone surrogate in the type', env({ type: 'ship\ud800' }), /type: .*surrogate/],
  ])('%s is an invalid envelope', (_name, body, reason) => {
    const d = decodeDelivery(body, opts);
    expect(d.ok).toBe(false);
    if (!d.ok) {
      expect(d.failureClass).toBe('invalid_envelope');
      expect(d.reason).toMatch(reason);
      // the salvaged fields are storable: no NUL, no out-of-range integer
      for (const v of Object.values(d.partial ?? {}))
        if (typeof v === 'string') expect(isStorableText(v)).toBe(true);
      if (d.partial?.schemaVersion !== undefined)
        expect(d.partial.schemaVersion).toBeLessThanOrEqual(2 ** 31 - 1);
    }
  });

  it('decodes strictly: keys that differ only in an invalid byte are not one key', () => {
    const raw = (byte: number) =>
      Buffer.concat([
        Buffer.from('{"id":"j1","key":"o:1'),
        Buffer.from([byte]),
        Buffer.from(
          '","type":"ship","schemaVersion":1,"payload":{"id":1},"createdAt":"2026-11-29T12:00:00Z"}',
        ),
      ]);
    for (const b of [0xff, 0xfe, 0xc3]) {
      const d = decodeDelivery(raw(b), opts);
      expect(d.ok ? undefined : [d.failureClass, d.reason]).toEqual([
        'not_json',
        expect.stringMatching(/not valid UTF-8/),
      ]);
    }
    // a valid multi-byte character still decodes
    expect(decodeDelivery(env({ key: 'o:1', id: 'jé🚚' }), opts).ok).toBe(true);
  });

  // Valid envelopes are checked without zod; the result must be zod's, edge by edge.
  it.each([
    ['as sent', {}],
    ['extra fields (dropped)', { pad: 1, keyRule: 'o:{id}' }],
    ['payload null', { payload: null }],
    ['no payload', { payload: undefined }],
    ['an offset', { createdAt: '2026-11-29T12:00:00+05:30' }],
    ['no seconds', { createdAt: '2026-11-29T12:00Z' }],
    ['no offset', { createdAt: '2026-11-29T12:00:00' }],
    ['29 February of a leap year', { createdAt: '2028-02-29T00:00:00Z' }],
    ['29 February of another year', { createdAt: '2026-02-29T00:00:00Z' }],
    ['the longest id', { id: 'j'.repeat(200) }],
    ['an id too long', { id: 'j'.repeat(201) }],
    ['an empty type', { type: '' }],
    ['the largest schemaVersion', { schemaVersion: 2 ** 31 - 1 }],
    ['schemaVersion 0', { schemaVersion: 0 }],
    ['schemaVersion 2^31', { schemaVersion: 2 ** 31 }],
    ['schemaVersion as text', { schemaVersion: '1' }],
    ['a key as a number', { key: 1 }],
    ['astral characters', { id: 'j🚚', key: 'o:é' }],
  ])('%s: parsed as zod parses it', (_name, o) => {
    const json: unknown = JSON.parse(env(o).toString());
    const zod = envelopeSchema.safeParse(json);
    const ours = parseEnvelope(json);
    expect(ours.success).toBe(zod.success);
    if (zod.success && ours.success) expect(ours.data).toStrictEqual(zod.data);
    // every envelope zod accepts here is one the check without zod takes itself
    if (zod.success) expect(plainEnvelope(json)).toStrictEqual(zod.data);
  });

  it('keeps what it can of an invalid envelope for the dead-letter record', () => {
    const d = decodeDelivery(env({ createdAt: 7 }), opts);
    expect(d.ok).toBe(false);
    if (!d.ok) {
      expect(d.reason).toMatch(/createdAt/);
      expect(d.partial).toEqual({ id: 'j1', key: 'o:1', type: 'ship', schemaVersion: 1 });
    }
  });
});

describe('array parameters', () => {
  // The literal pg itself would send for the same array, so PostgreSQL reads the same values.
  it("match pg's own encoding, quotes, backslashes and NULLs included", () => {
    const values = ['o:1', 'a"b', 'c\\d', '\\"', '', 'NULL', '{x,y}', 'é 🚚', null];
    expect(textArray(values)).toBe(pgUtils.prepareValue(values));
    expect(textArray([])).toBe(pgUtils.prepareValue([]));
    const plain = ['o:1', 'é 🚚', '', '{x,y}', 'NULL'];
    expect(textArray(plain)).toBe(pgUtils.prepareValue(plain));
    // a dead letter's journal row: no job id, no key
    expect(textArray(['o:1', null])).toBe(pgUtils.prepareValue(['o:1', null]));
    // pg quotes numbers too; PostgreSQL reads {1} and {"1"} alike
    expect(numberArray([1, 2, 1764633600123.5])).toBe('{1,2,1764633600123.5}');
  });
});

describe('compactReason', () => {
  it('is one line, bounded, and masks credentials', () => {
    const r = compactReason(
      `fetch amqp://u:p4ss@h/v failed\n  Authorization: Bearer eyJhbGciOi.x.y password=hunter2 "token":"abc" ${'z'.repeat(400)}`,
    );
    expect(r).not.toMatch(/\n|p4ss|eyJhbGciOi|hunter2|abc"/);
    expect(r.length).toBe(300);
    expect(r.endsWith('…')).toBe(true);
  });
});

describe('storable values', () => {
  it('escapes NUL and replaces lone surrogates; leaves good text alone', () => {
    expect(storable('a\u0000b')).toBe('a\\u0000b');
    expect(storable('x\ud800y')).toBe('x\ufffdy');
    expect(storable('ok é 🚚')).toBe('ok é 🚚');
    expect(storable('abcdef', 3)).toBe('abc');
  });

  it('turns any handler result into JSON that jsonb accepts', () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(JSON.parse(storableJson({ s: 'a\u0000', ['k\u0000']: 1, n: 10n }))).toEqual({
      s: 'a\\u0000',
      'k\\u0000': 1,
      n: '10',
    });
    expect(storableJson(undefined)).toBe('null');
    expect(JSON.parse(storableJson(cyclic))).toEqual({
      unstorableResult: expect.stringMatching(/circular/i),
    });
    expect(storableJson({ at: new Date(0) })).toBe('{"at":"1970-01-01T00:00:00.000Z"}');
  });

  it('tells a value the store refuses from a store that is down', () => {
    const pgError = (code: string) => Object.assign(new Error('x'), { code });
    for (const code of ['22021', '22P05', '22003', '23502', '54000']) {
      expect([isMessageDataError(pgError(code)), isStoreError(pgError(code))]).toEqual([
        true,
        false,
      ]);
    }
    for (const code of ['08006', '57P01', '53300', '42P01', '3F000']) {
      expect([isMessageDataError(pgError(code)), isStoreError(pgError(code))]).toEqual([
        false,
        true,
      ]);
    }
    expect(isStoreError(new Error('connect ECONNREFUSED 127.0.0.1:5432'))).toBe(true);
    expect(isConnectionError(pgError('42P01'))).toBe(false);
    expect(isStoreError(new Error('Channel closed'))).toBe(false);
  });
});

describe('worker config', () => {
  const base = {
    JOBFLEET_QUEUE: 'q',
    JOBFLEET_BROKER_URL: 'amqp://h',
    JOBFLEET_CLAIMS_URL: 'postgres://h/db',
  };
  it('reads JOBFLEET_* with defaults; code overrides win', () => {
    const c = loadConfig(
      { prefetch: 2 },
      { ...base, JOBFLEET_PREFETCH: '16', JOBFLEET_SCHEMA_VERSIONS: '2,3' },
    );
    expect(c).toMatchObject({
      queue: 'q',
      prefetch: 2,
      maxAttempts: 5,
      leaseSeconds: 60,
      deadLetterQueue: 'q.dlq',
      schemaVersions: [2, 3],
      metricsPort: 9464,
    });
  });

  it('names each bad variable and what is wrong', () => {
    let err: unknown;
    try {
      loadConfig(
        {},
        {
          JOBFLEET_QUEUE: 'q',
          JOBFLEET_BROKER_URL: 'http://x',
          JOBFLEET_PREFETCH: '0',
          JOBFLEET_INITIAL_DELAY_SECONDS: '10',
          JOBFLEET_MAX_DELAY_SECONDS: '5',
        },
      );
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    const msg = (err as Error).message;
    expect(msg).toMatch(
      /JOBFLEET_BROKER_URL \(option brokerUrl\) must be an amqp:\/\/ or amqps:\/\/ URL/,
    );
    expect(msg).toMatch(/JOBFLEET_CLAIMS_URL \(option claimsUrl\) is required/);
    expect(msg).toMatch(/JOBFLEET_PREFETCH \(option prefetch\)/);
  });

  it('checks maxDelay ≥ initialDelay', () => {
    expect(() =>
      loadConfig(
        {},
        { ...base, JOBFLEET_INITIAL_DELAY_SECONDS: '10', JOBFLEET_MAX_DELAY_SECONDS: '5' },
      ),
    ).toThrow(
      /JOBFLEET_MAX_DELAY_SECONDS \(option maxDelaySeconds\) must be at least initialDelaySeconds/,
    );
  });
});
