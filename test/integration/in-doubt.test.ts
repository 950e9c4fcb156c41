// In-doubt runs (docs/in-doubt.md): workers as OS processes whose effect is a
// call to a downstream that dedupes nothing (test/ground/downstream.ts),
// killed, frozen, cut off and drained at points the downstream reports, on
// real RabbitMQ (both brokers: the integration and integration-rabbitmq4
// projects) and PostgreSQL. Every case counts the downstream's bookings: it
// ends with exactly one, or with none and the job held, never two.
import type { ChildProcess } from 'node:child_process';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually } from '../ground/eventually.js';
import { startDownstream, type Downstream } from '../ground/downstream.js';
import { startTcpProxy, viaProxy, type TcpProxy } from '../ground/tcp-proxy.js';
import { spawnBookingWorker, type WorkerProcess } from '../fixtures/spawn-effect-worker.js';
import { QUEUE, harness, type Harness } from './worker-harness.js';
import { queueType } from '../ground/index.js';
import { jobfleet } from '../fixtures/jobfleet-cli.js';
import { DeadLetterReader } from '../../src/signals/dead-letters.js';

/** What the operator reads of this test's claims database for the queue (status.inDoubt). */
async function operatorRead() {
  const reader = new DeadLetterReader();
  try {
    return (await reader.read(h.db.url, QUEUE, 0)).inDoubt;
  } finally {
    await reader.close();
  }
}

let h: Harness;
let down: Downstream;
const procs: ChildProcess[] = [];
const proxies: TcpProxy[] = [];
beforeEach(async () => {
  h = await harness();
  down = await startDownstream();
});
afterEach(async () => {
  for (const p of procs.splice(0)) {
    if (p.exitCode === null && p.signalCode === null) {
      p.kill('SIGCONT');
      p.kill('SIGKILL');
    }
  }
  for (const p of proxies.splice(0)) await p.close();
  await down?.close();
  await h?.cleanup();
});

/** A booking worker on this test's vhost and schema: 5 s lease, retry delays 1–2 s. */
async function worker(env: Record<string, string> = {}): Promise<WorkerProcess> {
  const w = await spawnBookingWorker({
    JOBFLEET_QUEUE: QUEUE,
    JOBFLEET_QUEUE_TYPE: queueType(),
    JOBFLEET_BROKER_URL: h.rabbit.amqpUrl,
    JOBFLEET_CLAIMS_URL: h.db.url,
    JOBFLEET_INITIAL_DELAY_SECONDS: '1',
    JOBFLEET_MAX_DELAY_SECONDS: '2',
    JOBFLEET_LEASE_SECONDS: '5',
    JOBFLEET_TEST_DOWNSTREAM_URL: down.url,
    ...env,
  });
  procs.push(w.proc);
  return w;
}

async function through(url: string): Promise<{ proxy: TcpProxy; url: string }> {
  const u = new URL(url);
  const proxy = await startTcpProxy(u.hostname, Number(u.port));
  proxies.push(proxy);
  return { proxy, url: viaProxy(url, proxy) };
}

const keyOf = (orderId: string) => `order:${orderId}:ship`;

const claimState = (key: string, state: string, ms = 40_000) =>
  eventually(
    `the claim ${state}`,
    async () => {
      const c = await h.claim(key);
      return c?.state === state ? c : undefined;
    },
    ms,
    20,
  );

const queueEmpty = () =>
  eventually(
    'the work queue empty',
    async () => ((await h.messages(QUEUE)) === 0 ? true : undefined),
    30_000,
  );

const killed = async (w: WorkerProcess) => {
  w.proc.kill('SIGKILL');
  expect((await w.exited).signal).toBe('SIGKILL');
};

describe('in-doubt fault matrix: one booking per key on a downstream that dedupes nothing', () => {
  it('killed before the call: the next worker reconciles (not done) and books once', async () => {
    const doomed = await worker();
    const key = keyOf('d1');
    const started = down.nextCheckpoint(key, 'started');
    await h.job('d1');
    await started;
    await killed(doomed);
    const rescuer = await worker();
    const c = await claimState(key, 'completed');
    expect(down.calls(key)).toBe(1);
    expect(c).toMatchObject({ attempts: 2, takeovers: 1 });
    expect(
      await rescuer.metric('jobfleet_in_doubt_total', { type: 'ship', resolution: 'not_done' }),
    ).toBe(1);
  });

  it('killed after the call, before the record: the next worker reconciles (done), records it and never calls again', async () => {
    const doomed = await worker();
    const key = keyOf('d2');
    const booked = down.nextBooking(key);
    await h.job('d2');
    // the downstream has performed it and not yet answered: SIGKILL now, as an OOM kill would
    const booking = await booked;
    await killed(doomed);
    const rescuer = await worker();
    const c = await claimState(key, 'completed');
    expect(down.calls(key)).toBe(1);
    expect(c?.result).toEqual({ bookingId: booking.id });
    expect(
      await rescuer.metric('jobfleet_in_doubt_total', { type: 'ship', resolution: 'done' }),
    ).toBe(1);
  });

  it('killed after the record, before the ack: the redelivery is a duplicate, no second call', async () => {
    const broker = await through(h.rabbit.amqpUrl);
    const doomed = await worker({ JOBFLEET_BROKER_URL: broker.url });
    const key = keyOf('d3');
    await h.job('d3');
    await claimState(key, 'running');
    broker.proxy.hang(); // the ack cannot reach the broker now
    await claimState(key, 'completed');
    await killed(doomed);
    broker.proxy.cut();
    const rescuer = await worker();
    await eventually(
      'the redelivery acked as a duplicate',
      async () =>
        (await rescuer.metric('jobfleet_jobs_total', { outcome: 'duplicate' })) === 1
          ? true
          : undefined,
      30_000,
    );
    expect(down.calls(key)).toBe(1);
  });

  it('the connection resets after the effect: InDoubt, then the next attempt reconciles (done)', async () => {
    const w = await worker();
    const key = keyOf('d4');
    down.afterNext(key, 'reset');
    await h.job('d4');
    const c = await claimState(key, 'completed');
    expect(down.calls(key)).toBe(1);
    expect(c).toMatchObject({ attempts: 2, takeovers: 0 });
    expect(await w.metric('jobfleet_retries_total', { reason: 'in_doubt' })).toBe(1);
    expect(await w.metric('jobfleet_in_doubt_total', { resolution: 'done' })).toBe(1);
  });

  it('killed in step 2 of a 3-step handler: step 1 is not called again, step 2 is reconciled (done), step 3 runs once', async () => {
    const doomed = await worker();
    const key = keyOf('d5');
    const hotel = down.nextBooking(`${key}:hotel`);
    await h.job('d5', { type: 'trip' });
    await hotel;
    await killed(doomed);
    await worker();
    const c = await claimState(key, 'completed');
    for (const leg of ['flight', 'hotel', 'car']) expect(down.calls(`${key}:${leg}`)).toBe(1);
    const ids = Object.fromEntries(down.bookings().map((b) => [b.ref.split(':').at(-1), b.id]));
    expect(c?.result).toEqual({
      flight: { bookingId: ids.flight },
      hotel: { bookingId: ids.hotel },
      car: { bookingId: ids.car },
    });
    // jobfleet verify: each step has one recorded result; a second one (a step run twice) fails it
    const verify = () => jobfleet(['verify', '--claims-url', h.db.url]);
    const ok = await verify();
    expect(ok.stdout).toMatch(/^ok {3}one-result-per-step: /m);
    expect(ok.code).toBe(0);
    await h.db.pool.query(
      `update jobfleet_claims set steps = jsonb_set(steps, '{hotel}', steps->'hotel' || '[{"bookingId": 99}]')
       where key = $1`,
      [key],
    );
    const twice = await verify();
    expect(twice.code).toBe(1);
    expect(twice.stdout).toMatch(/^FAIL one-result-per-step: /m);
    expect(twice.stdout).toContain(JSON.stringify({ key, step: 'hotel', results: 2 }));
  });

  it('frozen (SIGSTOP) past its lease before ctx.intend, resumed after another worker completed the key: its intend is refused and it makes no call', async () => {
    // prefetch 1: the broker must not hand the frozen worker the second copy
    const frozen = await worker({ JOBFLEET_PREFETCH: '1' });
    const key = keyOf('d6');
    const started = down.nextCheckpoint(key, 'started');
    await h.job('d6');
    await started;
    frozen.proc.kill('SIGSTOP');
    await new Promise((r) => setTimeout(r, 5500)); // past the 5 s lease
    await h.job('d6', { id: 'd6-again' }); // the same operation again, for the next worker
    await worker();
    await claimState(key, 'completed');
    expect(down.calls(key)).toBe(1);
    const refused = down.nextCheckpoint(key, 'claim-lost');
    frozen.proc.kill('SIGCONT');
    await refused;
    await new Promise((r) => setTimeout(r, 500)); // a call it made anyway would land by now
    expect(down.calls(key)).toBe(1);
  });

  it('a handler past its timeout that ignores the abort and would book late: the retry reconciles first, the late run is fenced out', async () => {
    const w = await worker({ JOBFLEET_HANDLER_TIMEOUT_SECONDS: '2', JOBFLEET_PREFETCH: '4' });
    const key = keyOf('d7');
    const refused = down.nextCheckpoint(key, 'claim-lost');
    await h.job('d7', { payload: { orderId: 'd7', lateMs: 6000 } });
    await claimState(key, 'completed');
    await refused; // the abandoned first run woke, and was told it no longer holds the claim
    await new Promise((r) => setTimeout(r, 500));
    expect(down.calls(key)).toBe(1);
    expect(await w.metric('jobfleet_retries_total', { reason: 'in_doubt' })).toBe(1);
  });

  it('lease renewals failing for longer than the lease (the claims database cut off from that worker alone): its intend is refused, one booking', async () => {
    const claims = await through(h.db.url);
    const cutOff = await worker({ JOBFLEET_CLAIMS_URL: claims.url });
    const key = keyOf('d8');
    const started = down.nextCheckpoint(key, 'started');
    const refused = down.nextCheckpoint(key, 'claim-lost');
    await h.job('d8', { payload: { orderId: 'd8', lateMs: 7000 } });
    await started;
    claims.proxy.hang(); // renewals hang from here; the lease (5 s) runs out on this worker's clock
    await refused;
    expect(down.calls(key)).toBe(0);
    claims.proxy.restore();
    await worker(); // a second worker, as a fleet has
    const c = await claimState(key, 'completed');
    expect(down.calls(key)).toBe(1);
    expect(c).toMatchObject({ takeovers: 1 });
    expect(cutOff.proc.exitCode).toBe(null);
  });

  it('a drain whose handler ignores the abort: its claim is not given back, the next worker decides first, one booking', async () => {
    const draining = await worker({ JOBFLEET_DRAIN_DEADLINE_SECONDS: '1' });
    const key = keyOf('d9');
    const started = down.nextCheckpoint(key, 'started');
    await h.job('d9', { payload: { orderId: 'd9', lateMs: 2500 } });
    await started;
    draining.proc.kill('SIGTERM');
    expect((await draining.exited).code).toBe(0);
    // not released at the drain: the claim runs out instead
    expect(await h.claim(key)).toMatchObject({ state: 'running' });
    await worker();
    await claimState(key, 'completed');
    expect(down.calls(key)).toBe(1);
  });

  it('the downstream cannot tell during reconcile, then can: asked again after a backoff, then done, one booking', async () => {
    const doomed = await worker();
    const key = keyOf('d10');
    const booked = down.nextBooking(key);
    await h.job('d10');
    await booked;
    await killed(doomed);
    down.lookupsDown = true;
    const rescuer = await worker();
    await eventually(
      'reconcile answered unknown',
      async () =>
        (await rescuer.metric('jobfleet_in_doubt_total', { resolution: 'unknown' })) >= 1
          ? true
          : undefined,
      30_000,
    );
    await claimState(key, 'released'); // given back in doubt, to be asked again
    expect(await operatorRead()).toEqual({ deciding: 1, held: 0, heldJobs: [] });
    down.lookupsDown = false;
    await claimState(key, 'completed');
    expect(down.calls(key)).toBe(1);
    expect(await rescuer.metric('jobfleet_in_doubt_total', { resolution: 'done' })).toBe(1);
  });

  it('reconcile unknown until the attempt ceiling: held in the quarantine as in_doubt with its intent, never re-run on its own', async () => {
    const doomed = await worker({ JOBFLEET_MAX_ATTEMPTS: '3' });
    const key = keyOf('d11');
    const booked = down.nextBooking(key);
    await h.job('d11');
    await booked;
    await killed(doomed);
    down.lookupsDown = true;
    await worker({ JOBFLEET_MAX_ATTEMPTS: '3' });
    await claimState(key, 'dead_lettered');
    const { rows } = await h.db.pool.query<{ failure_class: string; reason: string }>(
      'select failure_class, reason from jobfleet_dead_letters where key = $1',
      [key],
    );
    expect(rows).toEqual([
      {
        failure_class: 'in_doubt',
        reason: expect.stringMatching(
          /^held for a person \(replay to re-run, or mark done\): attempt 1 is in doubt: its worker stopped mid-run.*intent \{"ref":"order:d11:ship"\}.*reconcile answered unknown: lookup answered 503 \(attempt 3 of 3\)/,
        ),
      },
    ]);
    // what the operator puts on the JobWorker: held, named with its reason; none left deciding
    expect(await operatorRead()).toEqual({
      deciding: 0,
      held: 1,
      heldJobs: [{ id: expect.any(Number), key, reason: rows[0]?.reason }],
    });
    // jobfleet verify lists it, held, and passes: nothing is broken, a person must decide
    const verify = await jobfleet(['verify', '--claims-url', h.db.url]);
    expect(verify.code).toBe(0);
    expect(verify.stdout).toMatch(
      new RegExp(`1 in-doubt job held for a person[^\\n]*\\n  #\\d+ ${key}: held for a person`),
    );
    await new Promise((r) => setTimeout(r, 3000));
    expect(down.calls(key)).toBe(1);
    expect(await h.messages(`${QUEUE}.dlq`)).toBe(1);
  });

  it('held jobs wait for a person: a replay re-runs one whose effect is not there, --mark-done completes one whose effect is, each decision audited with who made it', async () => {
    const env = { JOBFLEET_MAX_ATTEMPTS: '2' };
    const notBooked = keyOf('d13a');
    const booked = keyOf('d13b');
    down.lookupsDown = true; // the downstream cannot tell: both end held
    const first = await worker(env);
    const started = down.nextCheckpoint(notBooked, 'started');
    await h.job('d13a');
    await started;
    await killed(first); // before its call
    const second = await worker(env);
    const call = down.nextBooking(booked);
    await h.job('d13b');
    await call;
    await killed(second); // after its call
    await worker(env);
    await claimState(notBooked, 'dead_lettered');
    await claimState(booked, 'dead_lettered');
    expect([down.calls(notBooked), down.calls(booked)]).toEqual([0, 1]);

    const conn = ['--claims-url', h.db.url, '--amqp-url', h.rabbit.amqpUrl, '--queue', QUEUE];
    const rerun = await jobfleet([
      'dlq',
      'replay',
      ...conn,
      '--key',
      notBooked,
      '--force',
      '--reason',
      'no booking at the carrier under its reference',
      '--initiator',
      'alice',
    ]);
    expect(rerun.stderr).toBe('');
    expect(rerun.code).toBe(0);
    // a dead letter of another class is not for --mark-done: refused, naming it
    await h.job('d13c', { schemaVersion: 9 });
    await eventually('the bad job dead-lettered', async () => {
      const { rows } = await h.db.pool.query(
        `select 1 from jobfleet_dead_letters where failure_class = 'schema_version'`,
      );
      return rows.length ? true : undefined;
    });
    const refused = await jobfleet([
      'dlq',
      'discard',
      ...conn,
      '--class',
      'schema_version',
      '--mark-done',
      '--reason',
      'x',
    ]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(
      /--mark-done decides held in_doubt dead letters only; \d+ is not/,
    );
    const done = await jobfleet([
      'dlq',
      'discard',
      ...conn,
      '--key',
      booked,
      '--mark-done',
      '--reason',
      'booking 1 is at the carrier',
      '--initiator',
      'bob',
    ]);
    expect(done.stderr).toBe('');
    expect(done.stdout).toMatch(/marked done 1 of 1 selected/);
    await claimState(notBooked, 'completed');
    expect(await h.claim(booked)).toMatchObject({
      state: 'completed',
      result: { markedDoneBy: 'bob', reason: 'booking 1 is at the carrier' },
    });
    const { rows } = await h.db.pool.query<{ key: string; action: string; initiator: string }>(
      'select key, action, initiator from jobfleet_dead_letter_audit order by key',
    );
    expect(rows).toEqual([
      { key: notBooked, action: 'replayed', initiator: 'alice' },
      { key: booked, action: 'marked_done', initiator: 'bob' },
    ]);
    // A later copy of the one marked done is a duplicate: no run, no call.
    await h.job('d13b', { id: 'd13b-again' });
    await queueEmpty();
    expect([down.calls(notBooked), down.calls(booked)]).toEqual([1, 1]);
  });

  it('without reconcile, the hold policy quarantines an in-doubt job at once; rerun (the default) books again', async () => {
    const hold = { JOBFLEET_TEST_RECONCILE: '0', JOBFLEET_IN_DOUBT: 'hold' };
    const doomed = await worker(hold);
    const key = keyOf('d12');
    const booked = down.nextBooking(key);
    await h.job('d12');
    await booked;
    await killed(doomed);
    const holder = await worker(hold);
    await claimState(key, 'dead_lettered');
    expect(await holder.metric('jobfleet_in_doubt_total', { resolution: 'held' })).toBe(1);
    expect(down.calls(key)).toBe(1);
    await killed(holder);

    // rerun: the downstream's second booking is the blind re-run the policy chose
    const again = keyOf('d12b');
    const doomed2 = await worker({ JOBFLEET_TEST_RECONCILE: '0' });
    const booked2 = down.nextBooking(again);
    await h.job('d12b');
    await booked2;
    await killed(doomed2);
    const rerun = await worker({ JOBFLEET_TEST_RECONCILE: '0' });
    await claimState(again, 'completed');
    expect(down.calls(again)).toBe(2);
    expect(await rerun.metric('jobfleet_in_doubt_total', { resolution: 're_run' })).toBe(1);
  });
});
