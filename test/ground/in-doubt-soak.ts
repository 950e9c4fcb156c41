// The in-doubt soak: jobs whose effect is a booking on a downstream that
// dedupes nothing (./downstream.ts, answering each booking 50 ms after it is
// performed: the window a kill hits), worked by booking-worker processes of
// which one, at random, is SIGKILLed every 1.5–3 s and started again. At the
// end every job must have a terminal record (completed, or held for a
// person), and the downstream's bookings are counted per job. With a
// reconcile there must be no second booking; with the policy's blind re-run
// (no reconcile) the same soak counts the ones it makes, so the check can
// fail. Run short by test/integration/in-doubt-soak.test.ts (make test), and
// in full, three runs a variant, by bench/in-doubt-soak.ts (make soak).
import amqp from 'amqplib';
import { publish } from '../../worker/index.js';
import { topology } from '../../worker/topology.js';
import { spawnBookingWorker, type WorkerProcess } from '../fixtures/spawn-effect-worker.js';
import { startDownstream } from './downstream.js';
import type { PgSchema } from './postgres.js';
import { prng } from './prng.js';
import type { RabbitVhost } from './rabbit.js';

export interface SoakOptions {
  rabbit: RabbitVhost;
  db: PgSchema;
  queueType: 'classic' | 'quorum';
  jobs: number;
  /** worker processes kept alive */
  workers: number;
  /** true: the handler's reconcile decides in-doubt attempts; false: the policy re-runs them */
  reconcile: boolean;
  /** jobs published per second */
  rate: number;
  seed: number;
  /** give up waiting for the last terminal records after this long */
  timeoutMs: number;
}

export interface SoakFigures {
  variant: 'reconcile' | 'rerun';
  seed: number;
  published: number;
  completed: number;
  /** held for a person (in_doubt dead letters) */
  held: number;
  /** dead letters of any other class */
  otherDeadLetters: number;
  /** jobs without a terminal record when the soak ended */
  lost: number;
  /** bookings beyond the first, summed over jobs */
  duplicates: number;
  /** jobs with more than one booking */
  jobsWithDuplicates: number;
  kills: number;
  takeovers: number;
  seconds: number;
}

const QUEUE = 'bookings';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runInDoubtSoak(o: SoakOptions): Promise<SoakFigures> {
  const random = prng(o.seed);
  const down = await startDownstream();
  down.answerDelayMs = 50;
  const env = {
    JOBFLEET_QUEUE: QUEUE,
    JOBFLEET_QUEUE_TYPE: o.queueType,
    JOBFLEET_BROKER_URL: o.rabbit.amqpUrl,
    JOBFLEET_CLAIMS_URL: o.db.url,
    JOBFLEET_PREFETCH: '8',
    JOBFLEET_MAX_ATTEMPTS: '10',
    JOBFLEET_INITIAL_DELAY_SECONDS: '0.5',
    JOBFLEET_MAX_DELAY_SECONDS: '2',
    JOBFLEET_LEASE_SECONDS: '5',
    JOBFLEET_TEST_DOWNSTREAM_URL: down.url,
    JOBFLEET_TEST_RECONCILE: o.reconcile ? '1' : '0',
  };
  const conn = await amqp.connect(o.rabbit.amqpUrl);
  const started = Date.now();
  const workers: WorkerProcess[] = [];
  let kills = 0;
  let stopping = false;
  /** replacements being started */
  const starting: Array<Promise<void>> = [];
  try {
    const ch = await conn.createConfirmChannel();
    const work = topology({
      queue: QUEUE,
      deadLetterQueue: `${QUEUE}.dlq`,
      initialDelaySeconds: 0.5,
      maxDelaySeconds: 2,
      queueType: o.queueType,
    }).work;
    await ch.assertQueue(work.name, work.options);
    for (let i = 0; i < o.workers; i++) workers.push(await spawnBookingWorker(env));

    // The killer: every 1.5–3 s a random running worker is SIGKILLed, and a new one started in
    // its place (it joins once it is consuming; the killing does not wait for it).
    const killer = (async () => {
      while (!stopping) {
        await sleep(1500 + random() * 1500);
        if (stopping || workers.length === 0) continue;
        const [victim] = workers.splice(Math.floor(random() * workers.length), 1);
        victim?.proc.kill('SIGKILL');
        kills++;
        starting.push(spawnBookingWorker(env).then((w) => void workers.push(w)));
      }
    })();

    const keys: string[] = [];
    for (let n = 0; n < o.jobs; n++) {
      const orderId = `soak-${o.seed}-${n}`;
      keys.push(`order:${orderId}:ship`);
      await publish(ch, QUEUE, {
        type: 'ship',
        schemaVersion: 1,
        payload: { orderId },
        keyRule: 'order:{orderId}:ship',
      });
      if (n % 10 === 9) await sleep((10 * 1000) / o.rate);
    }

    // Until every job has a terminal record (or the time is up). The killer goes on until
    // then, or until half the time is spent: the tail then runs on the survivors.
    const deadline = started + o.timeoutMs;
    let ended = 0;
    while (Date.now() < deadline) {
      const { rows } = await o.db.pool.query<{ n: number }>(
        `select count(*)::int as n from jobfleet_claims where state in ('completed', 'dead_lettered')`,
      );
      ended = rows[0]?.n ?? 0;
      if (ended >= o.jobs) break;
      if (Date.now() - started > o.timeoutMs / 2) stopping = true;
      await sleep(500);
    }
    stopping = true;
    await killer;
    await Promise.allSettled(starting);
    return await figures(o, keys, (ref) => down.calls(ref), kills, started);
  } finally {
    stopping = true;
    await Promise.allSettled(starting);
    for (const w of workers) w.proc.kill('SIGKILL');
    await Promise.all(workers.map((w) => w.exited));
    await conn.close().catch(() => undefined);
    await down.close();
  }
}

async function figures(
  o: SoakOptions,
  keys: string[],
  calls: (ref: string) => number,
  kills: number,
  started: number,
): Promise<SoakFigures> {
  const { rows: states } = await o.db.pool.query<{ state: string; n: number; takeovers: number }>(
    `select state, count(*)::int as n, sum(takeovers)::int as takeovers
     from jobfleet_claims group by state`,
  );
  const { rows: dls } = await o.db.pool.query<{ failure_class: string; n: number }>(
    `select failure_class, count(*)::int as n from jobfleet_dead_letters group by failure_class`,
  );
  const count = (state: string) => states.find((s) => s.state === state)?.n ?? 0;
  const held = dls.find((d) => d.failure_class === 'in_doubt')?.n ?? 0;
  const extra = keys.map((k) => Math.max(0, calls(k) - 1));
  return {
    variant: o.reconcile ? 'reconcile' : 'rerun',
    seed: o.seed,
    published: keys.length,
    completed: count('completed'),
    held,
    otherDeadLetters: dls.reduce((s, d) => s + d.n, 0) - held,
    lost: keys.length - count('completed') - count('dead_lettered'),
    duplicates: extra.reduce((s, n) => s + n, 0),
    jobsWithDuplicates: extra.filter((n) => n > 0).length,
    kills,
    takeovers: states.reduce((s, r) => s + (r.takeovers ?? 0), 0),
    seconds: Math.round((Date.now() - started) / 100) / 10,
  };
}
