// Property-based fuzzing of the delivery path against real RabbitMQ and
// PostgreSQL: random envelopes, headers, keys, bodies and encodings through
// one real worker. For every generated message it asserts that it ends in
// exactly one terminal state (completed once, or exactly one dead letter
// with a reason and exactly one DLQ copy), that nothing was requeued or
// redelivered, that no message ran more than the attempt ceiling, and that
// the worker stayed ready throughout.
//
// Seeded and reproducible: the seed is printed; rerun a failure with
//   JOBFLEET_FUZZ_SEED=<seed> npx vitest run test/integration/poison-fuzz.test.ts
// (JOBFLEET_FUZZ_COUNT sets the number of messages, 2,000 by default).
import { isUtf8 } from 'node:buffer';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HEADERS, Permanent, Throttled, type DeliveryResult } from '../../worker/index.js';
import { isStorableText } from '../../worker/storable.js';
import { eventually } from '../ground/eventually.js';
import { QUEUE, harness, metricValue, type Harness, type TestWorker } from './worker-harness.js';

const SEED = Number(process.env.JOBFLEET_FUZZ_SEED ?? Date.now() % 2 ** 31);
const COUNT = Number(process.env.JOBFLEET_FUZZ_COUNT ?? 2000);
const MAX_ATTEMPTS = 3;
const MAX_BYTES = 16 * 1024;
const DLQ = `${QUEUE}.dlq`;

/** What a handler does with a valid job, chosen by the generator. */
type Behaviour = 'ok' | 'permanent' | 'transient' | 'always' | 'throttled' | 'odd-result';

interface Generated {
  body: Buffer;
  messageId: string;
  headers: Record<string, unknown>;
  contentType: string | undefined;
  /** envelope fields PostgreSQL cannot store: the dead-letter reason must name each */
  unstorable: string[];
  /** the oracle: what must happen, where it is certain */
  expect: 'completed' | 'not_json' | 'body_too_large' | 'dead_lettered' | 'either';
}

// Text with everything PostgreSQL and JSON tooling trip on.
const hostileChar = fc.constantFrom(
  '\u0000',
  '\ud800',
  '\udfff',
  '🚚',
  'é',
  "'",
  '"',
  '\\',
  ';--',
  '%',
  '\n',
  '\u2028',
  '\ufeff',
  '{orderId}',
);
const hostileText = fc
  .array(fc.oneof(fc.string({ maxLength: 8 }), hostileChar), { maxLength: 6 })
  .map((parts) => parts.join(''));
const hostileNumber = fc.constantFrom(
  0,
  -1,
  1.5,
  2,
  3e9,
  2 ** 31 - 1,
  2 ** 31,
  2 ** 53 + 1,
  1e300,
  -1e300,
  Number.MIN_VALUE,
);
const anyJson = fc.oneof(fc.jsonValue({ maxDepth: 2 }), hostileText, hostileNumber);

function message(i: number) {
  const behaviour = fc.constantFrom<Behaviour>(
    'ok',
    'ok',
    'ok',
    'permanent',
    'transient',
    'always',
    'throttled',
    'odd-result',
  );
  const orderId = fc.oneof(fc.string({ maxLength: 12 }), hostileText).map((s) => `${s}~${i}`);
  const base = fc.record({ orderId, behaviour }).map(({ orderId, behaviour }) => ({
    id: `job#${i}`,
    key: `order:${orderId}:ship`,
    type: 'ship',
    schemaVersion: 1,
    payload: { orderId, behaviour },
    createdAt: new Date().toISOString(),
  }));
  const field = fc.constantFrom('id', 'key', 'type', 'schemaVersion', 'createdAt', 'payload');
  // Envelope-level mutations: replace, drop, or poison one field (or none).
  const envelope = fc
    .tuple(
      base,
      fc.oneof(
        { weight: 8, arbitrary: fc.constant({ kind: 'none' as const }) },
        fc.record({ kind: fc.constant('replace' as const), field, value: anyJson }),
        fc.record({ kind: fc.constant('drop' as const), field }),
        fc.record({
          kind: fc.constant('poison' as const),
          field: fc.constantFrom('id', 'key', 'type'),
          text: hostileText,
        }),
        fc.record({ kind: fc.constant('version' as const), value: hostileNumber }),
        fc.record({ kind: fc.constant('proto' as const) }),
      ),
    )
    .map(([env, m]) => {
      const e: Record<string, unknown> = { ...env };
      if (m.kind === 'replace') e[m.field] = m.value;
      if (m.kind === 'drop') delete e[m.field];
      if (m.kind === 'poison') e[m.field] = `${String(e[m.field])}${m.text}`;
      if (m.kind === 'version') e.schemaVersion = m.value;
      let text = JSON.stringify(e);
      if (m.kind === 'proto') text = text.replace('{', '{"__proto__":{"polluted":1},');
      const storableKey = isStorableText(env.payload.orderId);
      // fields PostgreSQL cannot hold: their dead letter must name them
      const unstorable = (['id', 'key', 'type'] as const).filter(
        (f) => typeof e[f] === 'string' && !isStorableText(e[f]),
      );
      return {
        unstorable,
        text,
        valid: storableKey && (m.kind === 'none' || (m.kind === 'version' && m.value === 1)),
      };
    });
  // Body-level mutations: encodings, invalid bytes, truncation, size.
  const body = fc
    .tuple(
      envelope,
      fc.oneof(
        { weight: 8, arbitrary: fc.constant({ kind: 'utf8' as const }) },
        fc.record({
          kind: fc.constant('invalid-byte' as const),
          at: fc.nat(),
          byte: fc.constantFrom(0x80, 0xbf, 0xc0, 0xc3, 0xe2, 0xf5, 0xfe, 0xff),
        }),
        fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
        fc.record({
          kind: fc.constant('encoding' as const),
          enc: fc.constantFrom('utf16le', 'latin1'),
        }),
        fc.record({ kind: fc.constant('bom' as const) }),
        fc.record({
          kind: fc.constant('binary' as const),
          bytes: fc.uint8Array({ maxLength: 64 }),
        }),
        fc.record({ kind: fc.constant('empty' as const) }),
        fc.record({ kind: fc.constant('huge' as const) }),
      ),
    )
    .map(([{ text, valid, unstorable }, m]) => {
      let b = Buffer.from(text, 'utf8');
      if (m.kind === 'invalid-byte') {
        const at = m.at % (b.length + 1);
        b = Buffer.concat([b.subarray(0, at), Buffer.from([m.byte]), b.subarray(at)]);
      }
      if (m.kind === 'truncate') b = b.subarray(0, m.at % b.length);
      if (m.kind === 'encoding') b = Buffer.from(text, m.enc as BufferEncoding);
      if (m.kind === 'bom') b = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), b]);
      if (m.kind === 'binary') b = Buffer.from(m.bytes);
      if (m.kind === 'empty') b = Buffer.alloc(0);
      if (m.kind === 'huge') b = Buffer.concat([b, Buffer.alloc(MAX_BYTES, 0x20)]);
      const unchanged =
        m.kind === 'utf8' || (m.kind === 'encoding' && m.enc === 'latin1' && isAscii(text));
      return { body: b, unchanged, valid, unstorable: unchanged ? unstorable : [] };
    });
  const now = Date.now();
  const headerValue = fc.oneof(
    hostileNumber,
    hostileText,
    fc.constantFrom(now - 60_000, now + 1500, 1e15, -5, 'tomorrow', ''),
  );
  const headers = fc.dictionary(
    fc.constantFrom(HEADERS.attempt, HEADERS.notBefore, HEADERS.firstSeen, 'x-custom'),
    headerValue,
    { maxKeys: 3 },
  );
  return fc
    .record({
      body,
      headers,
      idSuffix: fc.oneof({ weight: 4, arbitrary: fc.constant('') }, hostileText),
      contentType: fc.constantFrom(undefined, 'application/json', 'application/gzip', 'text/plain'),
    })
    .map(
      ({
        body: { body: b, unchanged, valid, unstorable },
        headers: hs,
        idSuffix,
        contentType,
      }): Generated => {
        const behaviour = behaviourOf(b);
        return {
          body: b,
          messageId: `fz-${i}.${idSuffix}`,
          headers: hs,
          contentType,
          unstorable: b.length > MAX_BYTES ? [] : unstorable,
          expect:
            b.length > MAX_BYTES
              ? 'body_too_large'
              : !isUtf8(b)
                ? 'not_json'
                : valid && unchanged && behaviour !== undefined
                  ? behaviour === 'permanent' || behaviour === 'always'
                    ? 'dead_lettered'
                    : 'completed'
                  : 'either',
        };
      },
    );
}

/** amqplib sends integers as int64: larger ones go as the AMQP double another client would send */
const amqpHeaders = (hs: Record<string, unknown>) =>
  Object.fromEntries(
    Object.entries(hs).map(([k, v]) => [
      k,
      typeof v === 'number' && Number.isInteger(v) && Math.abs(v) >= 2 ** 63
        ? { '!': 'double', value: v }
        : v,
    ]),
  );

/** "requeued×300,completed×1": outcomes in the order first seen, counted */
const tally = (xs: readonly string[]) =>
  [...new Set(xs)].map((x) => `${x}×${xs.filter((y) => y === x).length}`).join(',');

const isAscii = (s: string) => /^[\x20-\x7e]*$/.test(s);

function behaviourOf(body: Buffer): Behaviour | undefined {
  try {
    return (JSON.parse(body.toString('utf8')) as { payload?: { behaviour?: Behaviour } }).payload
      ?.behaviour;
  } catch {
    return undefined;
  }
}

const indexOf = (messageId: unknown): number | undefined => {
  const m = typeof messageId === 'string' ? /^fz-(\d+)\./.exec(messageId) : null;
  return m ? Number(m[1]) : undefined;
};

let h: Harness;
beforeAll(async () => {
  h = await harness();
});
afterAll(async () => {
  await h?.cleanup();
});

describe('poison-input fuzz (real RabbitMQ and PostgreSQL)', () => {
  it(`${COUNT} generated messages each end in exactly one terminal state`, async () => {
    console.log(`poison fuzz: seed ${SEED}, ${COUNT} messages`);
    const messages = Array.from(
      { length: COUNT },
      (_, i) => fc.sample(message(i), { seed: SEED + i, numRuns: 1 })[0] as Generated,
    );
    const outcomes = new Map<number, DeliveryResult[]>();
    const w: TestWorker = await h.startWorker({
      handlers: {
        ship: async (job) => {
          await Promise.resolve(); // where a real handler calls its downstream
          const { behaviour } = (job.payload ?? {}) as { behaviour?: Behaviour };
          if (behaviour === 'permanent') throw new Permanent('refused \u0000 by the fuzz');
          if (behaviour === 'always') throw new Error('always fails \ud800');
          if (behaviour === 'transient' && job.attempt === 1) throw new Error('transient');
          if (behaviour === 'throttled' && job.throttled === 0)
            throw new Throttled('slow down', { retryAfterMs: 500 });
          if (behaviour === 'odd-result') return { echo: job.key, nul: '\u0000', big: 7n };
          return { ok: true };
        },
      },
      onOutcome: (result, msg) => {
        const i = indexOf(msg.properties.messageId);
        if (i !== undefined) outcomes.set(i, [...(outcomes.get(i) ?? []), result]);
      },
      config: {
        prefetch: 32,
        maxAttempts: MAX_ATTEMPTS,
        maxMessageBytes: MAX_BYTES,
        initialDelaySeconds: 1,
        maxDelaySeconds: 2,
      },
    });
    const terminal = new Set<DeliveryResult>(['completed', 'dead_lettered', 'duplicate']);
    const unready: number[] = [];
    const readiness = setInterval(() => {
      if (!w.ready()) unready.push(Date.now());
    }, 20);
    try {
      for (const [i, m] of messages.entries()) {
        await h.publishRaw(m.body, {
          messageId: m.messageId,
          headers: amqpHeaders(m.headers),
          ...(m.contentType ? { contentType: m.contentType } : {}),
          timestamp: Math.floor(Date.now() / 1000),
        });
        if (i % 500 === 499) await new Promise((r) => setImmediate(r));
      }
      const settled = () =>
        messages.every((_, i) => (outcomes.get(i) ?? []).some((o) => terminal.has(o)));
      // On a timeout the checks below name the messages that never settled.
      await eventually(
        `every message settled (seed ${SEED})`,
        async () => (settled() && (await h.messages(QUEUE)) === 0 ? true : undefined),
        120_000,
        200,
      ).catch((err: Error) => console.log(`poison fuzz: ${err.message}`));
    } finally {
      clearInterval(readiness);
    }

    const rows = (
      await h.db.pool.query<{ delivery_id: string; reason: string; failure_class: string }>(
        'select delivery_id, reason, failure_class from jobfleet_dead_letters',
      )
    ).rows;
    const copies = await h.drainQueue(DLQ);
    const rowsOf = new Map<number, typeof rows>();
    for (const r of rows) {
      const i = indexOf(r.delivery_id);
      if (i !== undefined) rowsOf.set(i, [...(rowsOf.get(i) ?? []), r]);
    }
    const copiesOf = new Map<number, number>();
    for (const c of copies) {
      const i = indexOf(c.properties.messageId);
      if (i !== undefined) copiesOf.set(i, (copiesOf.get(i) ?? 0) + 1);
    }

    const violations: string[] = [];
    for (const [i, m] of messages.entries()) {
      const seen = outcomes.get(i) ?? [];
      const ends = seen.filter((o) => terminal.has(o));
      const dl = rowsOf.get(i) ?? [];
      const problems: string[] = [];
      if (ends.length !== 1) problems.push(`${ends.length} terminal outcomes`);
      if (seen.includes('requeued')) problems.push('requeued (a loop, or the store marked down)');
      if (seen.includes('duplicate')) problems.push('acked as a duplicate of another message');
      const runs = seen.filter((o) => o !== 'delayed').length;
      if (runs > MAX_ATTEMPTS) problems.push(`${runs} runs > ${MAX_ATTEMPTS}`);
      const end = ends[0];
      if (end === 'dead_lettered') {
        if (dl.length !== 1) problems.push(`${dl.length} dead-letter rows`);
        if ((copiesOf.get(i) ?? 0) !== 1) problems.push(`${copiesOf.get(i) ?? 0} DLQ copies`);
        if (!dl[0]?.reason) problems.push('dead letter without a reason');
      } else if (dl.length || copiesOf.get(i)) {
        problems.push(
          `${end}, yet ${dl.length} dead-letter rows and ${copiesOf.get(i) ?? 0} copies`,
        );
      }
      if (m.expect === 'completed' && end !== 'completed') problems.push(`expected completed`);
      if (m.expect === 'dead_lettered' && end !== 'dead_lettered')
        problems.push('expected a dead letter');
      if (
        (m.expect === 'not_json' || m.expect === 'body_too_large') &&
        dl[0]?.failure_class !== m.expect
      )
        problems.push(`expected a ${m.expect} dead letter`);
      for (const f of m.unstorable)
        if (!dl[0]?.reason.includes(`${f}: must not contain`))
          problems.push(`the dead-letter reason does not name the unstorable ${f}`);
      if (problems.length)
        violations.push(
          `#${i} [${tally(seen)}] ${problems.join('; ')}: body(base64)=${m.body.toString('base64').slice(0, 200)} headers=${JSON.stringify(m.headers)} messageId=${JSON.stringify(m.messageId)}`,
        );
    }
    const summary = {
      seed: SEED,
      messages: COUNT,
      completed: [...outcomes.values()].filter((o) => o.includes('completed')).length,
      deadLettered: rows.length,
      dlqCopies: copies.length,
      redeliveries: await metricValue(w, 'jobfleet_redeliveries_total'),
      unreadySamples: unready.length,
    };
    console.log(`poison fuzz: ${JSON.stringify(summary)}`);
    expect(
      violations.slice(0, 10),
      `seed ${SEED}: ${violations.length} violations (rerun with JOBFLEET_FUZZ_SEED=${SEED})`,
    ).toEqual([]);
    expect(summary.dlqCopies, `seed ${SEED}`).toBe(summary.deadLettered);
    expect(summary.redeliveries, `seed ${SEED}`).toBe(0);
    expect(summary.unreadySamples, `seed ${SEED}: the worker went unready`).toBe(0);
    expect(summary.completed + summary.deadLettered).toBe(COUNT);
  }, 240_000);
});
