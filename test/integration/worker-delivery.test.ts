// The delivery state machine, step by step (issue 3, docs/worker.md), on real
// RabbitMQ and PostgreSQL. Each test asserts the business-effect count, the
// broker state and the claims row.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HEADERS } from '../../worker/index.js';
import { MIGRATIONS } from '../../worker/claims-sql.js';
import { eventually } from '../ground/eventually.js';
import { QUEUE, harness, metricValue, type Harness } from './worker-harness.js';

const DLQ = `${QUEUE}.dlq`;
let h: Harness;
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  await h?.cleanup();
});

describe('step 1: deliveries that cannot run are dead-lettered at once', () => {
  it.each([
    ['not JSON', () => h.publishRaw('{oops', { messageId: 'raw-1' }), 'not_json', /not valid JSON/],
    [
      'too large',
      () => h.publishRaw(JSON.stringify({ pad: 'x'.repeat(3000) }), { messageId: 'raw-2' }),
      'body_too_large',
      /over the 2048-byte limit/,
    ],
    [
      'an invalid envelope',
      () =>
        h.publishRaw(JSON.stringify({ id: 'j', key: 'k', type: 'ship' }), { messageId: 'raw-3' }),
      'invalid_envelope',
      /schemaVersion.*createdAt|createdAt.*schemaVersion/s,
    ],
    [
      'an unknown type',
      () => h.job('o-1', { type: 'refund' }),
      'unknown_type',
      /unknown job type "refund"/,
    ],
    [
      'a schema version outside the contract',
      () => h.job('o-2', { schemaVersion: 7 }),
      'schema_version',
      /schemaVersion 7 is outside .*\[1, 2\]/,
    ],
    [
      'a key that breaks the key rule',
      () => h.job('o-3', { keyRule: undefined, key: 'order:o-999:ship' }),
      'key_mismatch',
      /does not match key rule/,
    ],
  ])('%s', async (_what, send, failureClass, reason) => {
    const w = await h.startWorker({ config: { maxMessageBytes: 2048 } });
    await send();
    await h.waitOutcomes(w, 1);
    expect(w.outcomes).toEqual(['dead_lettered']);
    expect(await h.effects()).toBe(0);
    expect(await h.messages(QUEUE)).toBe(0);

    const [dead, ...more] = await h.drainQueue(DLQ);
    expect(more).toHaveLength(0);
    const headers = dead?.properties.headers ?? {};
    expect(headers[HEADERS.failureClass]).toBe(failureClass);
    expect(String(headers[HEADERS.reason])).toMatch(reason);
    const { rows } = await h.db.pool.query(
      'select failure_class, reason, attempts from jobfleet_dead_letters',
    );
    expect(rows).toEqual([
      { failure_class: failureClass, reason: headers[HEADERS.reason], attempts: 0 },
    ]);

    // The worker is still alive and well: the next valid job completes.
    await h.job('o-ok');
    await h.waitOutcomes(w, 2);
    expect(w.outcomes[1]).toBe('completed');
  });
});

describe('step 2: claiming the idempotency key', () => {
  it('new key: runs once, records the result, then acks', async () => {
    const w = await h.startWorker();
    const { key } = await h.job('o-10');
    await h.waitOutcomes(w, 1);
    expect(w.outcomes).toEqual(['completed']);
    expect(await h.effects(key)).toBe(1);
    expect(await h.messages(QUEUE)).toBe(0);
    const row = await h.claim(key);
    expect(row).toMatchObject({
      state: 'completed',
      attempts: 1,
      result: { shipped: key },
      last_claim: 'new',
    });
    expect(await metricValue(w, 'jobfleet_jobs_total', { outcome: 'completed' })).toBe(1);
  });

  it('completed earlier: acks a duplicate without running it', async () => {
    const w = await h.startWorker();
    const { key } = await h.job('o-11');
    await h.waitOutcomes(w, 1);
    await h.job('o-11'); // the same operation published again
    await h.waitOutcomes(w, 2);
    expect(w.outcomes).toEqual(['completed', 'duplicate']);
    expect(await h.effects(key)).toBe(1);
    expect(await h.messages(QUEUE)).toBe(0);
    expect(await metricValue(w, 'jobfleet_jobs_total', { outcome: 'duplicate' })).toBe(1);
    expect(await h.claim(key)).toMatchObject({ state: 'completed', attempts: 1 });
  });

  it('held by a live lease elsewhere: waits without running or spending an attempt, then takes over when the lease expires', async () => {
    const w = await h.startWorker();
    const key = 'order:o-12:ship';
    // Another worker holds the key for 2 more seconds.
    await h.db.pool.query(
      `insert into jobfleet_claims (key, state, owner, lease_until, attempts, last_claim)
       values ($1, 'running', gen_random_uuid(), now() + interval '2 seconds', 1, 'new')`,
      [key],
    );
    const published = Date.now();
    await h.job('o-12');
    await h.waitOutcomes(w, 1);
    expect(w.outcomes).toEqual(['delayed']);
    expect(await h.effects(key)).toBe(0);
    expect(await h.claim(key)).toMatchObject({ state: 'running', attempts: 1 });
    expect(await metricValue(w, 'jobfleet_claim_conflicts_total')).toBe(1);
    // Waiting in a delay queue, not in the work queue.
    expect(await h.messages(`${QUEUE}.retry.2s`)).toBe(1);
    expect(await h.messages(QUEUE)).toBe(0);

    await h.waitOutcomes(w, 2);
    expect(w.outcomes[1]).toBe('completed');
    const { rows } = await h.db.pool.query<{ at: Date }>('select at from effects where key = $1', [
      key,
    ]);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.at.getTime() - published).toBeGreaterThanOrEqual(1900);
    expect(await h.claim(key)).toMatchObject({
      state: 'completed',
      attempts: 2,
      takeovers: 1,
      last_claim: 'takeover',
    });
  });

  it("expired lease (a dead worker's claim): takes over with a new owner token and completes", async () => {
    const w = await h.startWorker();
    const key = 'order:o-13:ship';
    const dead = '00000000-0000-4000-8000-000000000001';
    await h.db.pool.query(
      `insert into jobfleet_claims (key, state, owner, lease_until, attempts, last_claim)
       values ($1, 'running', $2, now() - interval '1 second', 1, 'new')`,
      [key, dead],
    );
    await h.job('o-13');
    await h.waitOutcomes(w, 1);
    expect(w.outcomes).toEqual(['completed']);
    expect(await h.effects(key)).toBe(1);
    const row = await h.claim(key);
    expect(row).toMatchObject({
      state: 'completed',
      takeovers: 1,
      attempts: 2,
      last_claim: 'takeover',
    });
    expect(row?.owner).not.toBe(dead);
  });
});

describe('step 7: dead-letter entries carry what an audited replay needs', () => {
  it('job id, key, type, schema version, attempts, timestamps, a compact reason without secrets, and the failure class', async () => {
    const w = await h.startWorker({
      handlers: {
        ship: () => {
          const err = new Error(
            `downstream refused: postgres://app:hunter2@db.internal/x token=abc123 ${'y'.repeat(500)}`,
          );
          return Promise.reject(err);
        },
      },
      config: { maxAttempts: 1, deadLetterOwner: 'team-shipping', revision: '7' },
    });
    const { id, key } = await h.job('o-14', { schemaVersion: 2 });
    await h.waitOutcomes(w, 1);
    expect(w.outcomes).toEqual(['dead_lettered']);
    const [dead] = await h.drainQueue(DLQ);
    const hd = dead!.properties.headers ?? {};
    expect(hd[HEADERS.jobId]).toBe(id);
    expect(hd[HEADERS.key]).toBe(key);
    expect(hd[HEADERS.type]).toBe('ship');
    expect(hd[HEADERS.schemaVersion]).toBe(2);
    expect(hd[HEADERS.attempt]).toBe(1);
    expect(hd[HEADERS.owner]).toBe('team-shipping');
    expect(hd[HEADERS.failureClass]).toBe('attempts_exhausted');
    expect(Number(hd[HEADERS.deadLetteredAt])).toBeGreaterThanOrEqual(
      Number(hd[HEADERS.firstSeen]),
    );
    const reason = String(hd[HEADERS.reason]);
    expect(reason.length).toBeLessThanOrEqual(300);
    expect(reason).not.toContain('hunter2');
    expect(reason).not.toContain('abc123');
    expect(dead!.properties.messageId).toBe(id);
    expect(JSON.parse(dead!.content.toString())).toMatchObject({
      id,
      key,
      payload: { orderId: 'o-14' },
    });

    const { rows } = await h.db.pool.query('select * from jobfleet_dead_letters');
    expect(rows).toEqual([
      expect.objectContaining({
        job_id: id,
        key,
        type: 'ship',
        schema_version: 2,
        attempts: 1,
        failure_class: 'attempts_exhausted',
        owner: 'team-shipping',
        revision: '7',
        reason,
        status: 'quarantined',
        payload_hash: expect.stringMatching(/^[0-9a-f]{64}$/),
      }),
    ]);
    expect(rows[0].first_seen_at).toBeInstanceOf(Date);
    expect(await h.claim(key)).toMatchObject({ state: 'dead_lettered' });
  });
});

describe('worker lifecycle', () => {
  it('refuses to start when the code contract differs from the deployed one, naming both values', async () => {
    await expect(
      h.startWorker({ config: { keyRule: 'order:{orderId}:send', schemaVersions: '1,3' } }),
    ).rejects.toThrow(
      /"order:\{orderId\}:ship" but JOBFLEET_KEY_RULE is "order:\{orderId\}:send"[\s\S]*\[1, 2\] but JOBFLEET_SCHEMA_VERSIONS is \[1, 3\]/,
    );
  });

  it('serves /metrics, /healthz and /readyz', async () => {
    const w = await h.startWorker();
    await h.job('o-20');
    await h.waitOutcomes(w, 1);
    const base = `http://127.0.0.1:${w.port}`;
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    const metrics = await (await fetch(`${base}/metrics`)).text();
    expect(metrics).toContain('jobfleet_jobs_total{type="ship",outcome="completed"} 1');
    expect(metrics).toContain('jobfleet_schema_version_seen_total{version="1"} 1');
    expect(metrics).toMatch(/jobfleet_message_age_seconds_count 1/);
    await w.stop();
    await expect(fetch(`${base}/readyz`)).rejects.toThrow();
  });

  it('applies its migrations safely when several workers start at once', async () => {
    const ws = await Promise.all([h.startWorker(), h.startWorker(), h.startWorker()]);
    const { rows } = await h.db.pool.query('select version from jobfleet_schema_migrations');
    expect(rows).toEqual(MIGRATIONS.map((m) => ({ version: m.version })));
    await Promise.all(['a', 'b', 'c', 'd', 'e', 'f'].map((o) => h.job(o)));
    // the handler writes its effect before the completion record and the ack: wait for both
    const completed = () => ws.flatMap((w) => w.outcomes).filter((o) => o === 'completed').length;
    await eventually('6 completions', () => Promise.resolve(completed() === 6 ? true : undefined));
    expect(await h.effects()).toBe(6);
  });
});
