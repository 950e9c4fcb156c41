// The in-doubt soak, short form (make soak runs it in full: bench/in-doubt-soak.ts):
// jobs booked on a downstream that dedupes nothing while a worker is
// SIGKILLed every 1.5–3 s. With a reconcile: every job ends, none is booked
// twice. With the policy's blind re-run instead, the same soak books some
// twice: the count can fail. On RabbitMQ 4's quorum queues, the default.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { queueType, usePostgres, useRabbit } from '../ground/index.js';
import { runInDoubtSoak } from '../ground/in-doubt-soak.js';
import type { PgSchema } from '../ground/postgres.js';
import type { RabbitVhost } from '../ground/rabbit.js';

let rabbit: RabbitVhost;
let db: PgSchema;
beforeEach(async () => {
  rabbit = await useRabbit();
  db = await usePostgres();
});
afterEach(async () => {
  await db?.cleanup();
  await rabbit?.cleanup();
});

const soak = (reconcile: boolean) =>
  runInDoubtSoak({
    rabbit,
    db,
    queueType: queueType(),
    jobs: 400,
    workers: 2,
    reconcile,
    rate: 50,
    seed: reconcile ? 62 : 63,
    timeoutMs: 120_000,
  });

describe('in-doubt soak (short form)', () => {
  it('with a reconcile: 400 jobs, a worker SIGKILLed every 1.5–3 s, every job completed, none booked twice', async () => {
    const f = await soak(true);
    expect(f.kills).toBeGreaterThanOrEqual(2);
    expect(f.takeovers).toBeGreaterThan(0); // the kills left in-doubt runs behind
    expect(f).toMatchObject({ published: 400, completed: 400, lost: 0, held: 0, duplicates: 0 });
  }, 180_000);

  it('with the blind re-run instead: the same soak books some jobs twice (what the reconcile prevents)', async () => {
    const f = await soak(false);
    expect(f.kills).toBeGreaterThanOrEqual(2);
    expect(f).toMatchObject({ published: 400, lost: 0 });
    expect(f.duplicates).toBeGreaterThan(0);
  }, 180_000);
});
