// The outbox soak, short form (make soak runs it in full: bench/outbox-soak.ts):
// four producer processes commit orders with their jobs enqueued in the same
// transaction (one in ten rolled back) while relay and worker processes are
// SIGKILLed every 1.5–3 s. Every committed order ships exactly once, no
// rolled-back one at all. On RabbitMQ 4's quorum queues, the default.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { queueType, usePostgres, useRabbit } from '../ground/index.js';
import { runOutboxSoak } from '../ground/outbox-soak.js';
import type { PgSchema } from '../ground/postgres.js';
import type { RabbitVhost } from '../ground/rabbit.js';

let rabbit: RabbitVhost;
let db: PgSchema;
let app: PgSchema;
beforeEach(async () => {
  rabbit = await useRabbit();
  db = await usePostgres();
  app = await usePostgres();
});
afterEach(async () => {
  await app?.cleanup();
  await db?.cleanup();
  await rabbit?.cleanup();
});

describe('outbox soak (short form)', () => {
  it('1,000 orders from 4 producers, relays and workers SIGKILLed every 1.5–3 s: each committed order shipped once, none rolled back', async () => {
    const f = await runOutboxSoak({
      rabbit,
      db,
      app,
      queueType: queueType(),
      orders: 1000,
      producers: 4,
      relays: 2,
      workers: 2,
      rate: 100,
      seed: 64,
      timeoutMs: 120_000,
    });
    console.log(JSON.stringify({ outboxSoak: f }));
    expect(f.relayKills + f.workerKills).toBeGreaterThanOrEqual(2);
    expect(f).toMatchObject({
      committed: 900,
      rolledBack: 100,
      missing: 0,
      duplicates: 0,
      phantoms: 0,
    });
    expect(f.shippedOnce).toBe(f.committed);
  }, 180_000);
});
