// Worker runtime benchmark (issue 3): the full state machine with a no-op
// handler vs raw amqplib consume+ack of the same messages, side by side in one
// process, at prefetch 1, 16 and 64; PostgreSQL round trips per job; claim
// latency against 10k and 1M existing claim rows.
//
//   node --import tsx bench/worker-throughput.ts [--jobs N] [--quick]
import amqp from 'amqplib';
import pg from 'pg';
import pino from 'pino';
import { ClaimStore } from '../worker/claim-store.js';
import { SQL } from '../worker/claims-sql.js';
import { createWorker, publish } from '../worker/index.js';
import { createSchema } from '../test/ground/postgres.js';
import { createVhost } from '../test/ground/rabbit.js';
import { configuredUrls } from '../test/ground/services.js';

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const quick = process.argv.includes('--quick');
const JOBS = arg('--jobs', quick ? 500 : 4000);
const urls = configuredUrls();

// Every statement our code sends goes through Client.prototype.query (the
// pool's query included), so counting calls there counts round trips.
let roundTrips = 0;
const proto = pg.Client.prototype as unknown as { query: (...a: unknown[]) => unknown };
const originalQuery = proto.query;
proto.query = function (this: pg.Client, ...a: unknown[]) {
  roundTrips++;
  return originalQuery.apply(this, a);
};

async function fill(amqpUrl: string, queue: string, n: number): Promise<void> {
  const conn = await amqp.connect(amqpUrl);
  const ch = await conn.createConfirmChannel();
  await ch.assertQueue(queue, { durable: true });
  const batch = 200;
  for (let i = 0; i < n; i += batch) {
    await Promise.all(
      Array.from({ length: Math.min(batch, n - i) }, (_, j) =>
        publish(ch, queue, {
          type: 'noop',
          schemaVersion: 1,
          payload: { n: i + j },
          keyRule: 'bench:{n}',
        }),
      ),
    );
  }
  await conn.close();
}

async function rawConsume(
  amqpUrl: string,
  queue: string,
  n: number,
  prefetch: number,
): Promise<number> {
  const conn = await amqp.connect(amqpUrl);
  const ch = await conn.createChannel();
  await ch.prefetch(prefetch);
  const t0 = performance.now();
  await new Promise<void>((resolve) => {
    let seen = 0;
    void ch.consume(queue, (m) => {
      if (!m) return;
      ch.ack(m);
      if (++seen === n) resolve();
    });
  });
  const ms = performance.now() - t0;
  await conn.close();
  return ms;
}

async function jobfleetConsume(
  amqpUrl: string,
  claimsUrl: string,
  queue: string,
  n: number,
  prefetch: number,
) {
  let done = 0;
  let resolveAll!: () => void;
  const all = new Promise<void>((r) => (resolveAll = r));
  const worker = createWorker({
    contract: { keyRule: 'bench:{n}', schemaVersions: [1] },
    handlers: { noop: () => Promise.resolve(null) },
    logger: pino({ level: 'silent' }),
    handleSignals: false,
    onOutcome: (r) => {
      if (r === 'completed' && ++done === n) resolveAll();
    },
    config: { queue, brokerUrl: amqpUrl, claimsUrl, prefetch, metricsPort: 0 },
  });
  // Start consuming only once the topology and migrations are in place, so the
  // clock covers the same work as the raw consumer's.
  const t0 = performance.now();
  const rt0 = roundTrips;
  await worker.start();
  const startedMs = performance.now() - t0;
  const rtStart = roundTrips - rt0;
  await all;
  const ms = performance.now() - t0 - startedMs;
  const perJob = (roundTrips - rt0 - rtStart) / n;
  await worker.stop({ deadlineMs: 1000 });
  return { ms, perJob };
}

async function claimLatency(pgUrl: string, existing: number, samples: number) {
  const db = await createSchema(pgUrl);
  try {
    const store = new ClaimStore(db.pool);
    await store.migrate();
    await db.pool.query(
      `insert into jobfleet_claims (key, state, attempts, completed_at, result)
       select 'existing:' || g, 'completed', 1, now() - (g % 1000) * interval '1 minute', '{"ok":true}'
       from generate_series(1, $1) g`,
      [existing],
    );
    await db.pool.query('analyze jobfleet_claims');
    const times: number[] = [];
    for (let i = 0; i < samples; i++) {
      const t0 = performance.now();
      // Half new keys, half duplicates of existing ones: both paths of the claim.
      const key = i % 2 ? `new:${i}` : `existing:${1 + Math.floor(Math.random() * existing)}`;
      await store.claim(key, 60, `j${i}`, 'noop');
      times.push(performance.now() - t0);
    }
    times.sort((a, b) => a - b);
    const pct = (p: number) =>
      times[Math.min(times.length - 1, Math.floor(p * times.length))] ?? NaN;
    return { p50: pct(0.5), p99: pct(0.99) };
  } finally {
    await db.cleanup();
  }
}

/**
 * claim + record with 16 concurrent callers, as unnamed statements (planned on
 * every call) and as the named ones ClaimStore uses: side by side, one schema.
 */
async function namedVsUnnamed(
  pgUrl: string,
  n: number,
): Promise<{ unnamed: number; named: number }> {
  const db = await createSchema(pgUrl);
  const pool = new pg.Pool({ connectionString: db.url, max: 18 });
  try {
    await new ClaimStore(pool).migrate();
    const run = async (named: boolean) => {
      let i = 0;
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: 16 }, async () => {
          while (i < n) {
            const key = `${named}:${i++}`;
            const owner = crypto.randomUUID();
            const q = (name: 'claimBatch' | 'complete', values: unknown[]) =>
              pool.query(
                named
                  ? { name: `bench_${name}`, text: SQL[name], values }
                  : { text: SQL[name], values },
              );
            await q('claimBatch', [[key], [owner], ['j'], ['t'], 60]);
            await q('complete', [key, owner, 'null']);
          }
        }),
      );
      return (n / (performance.now() - t0)) * 1000;
    };
    return { unnamed: await run(false), named: await run(true) };
  } finally {
    await pool.end();
    await db.cleanup();
  }
}

export interface ThroughputRow {
  prefetch: number;
  rawPerSec: number;
  jobfleetPerSec: number;
  ratio: number;
  roundTripsPerJob: number;
}

export async function runWorkerBench(): Promise<{
  jobs: number;
  rows: ThroughputRow[];
  claims: Array<{ existing: number; p50: number; p99: number }>;
  statements: { unnamed: number; named: number };
}> {
  const rows: ThroughputRow[] = [];
  for (const prefetch of [1, 16, 64]) {
    const vhost = await createVhost(urls.amqpUrl, urls.rabbitMgmtUrl);
    const db = await createSchema(urls.pgUrl);
    try {
      await fill(vhost.amqpUrl, 'raw', JOBS);
      await fill(vhost.amqpUrl, 'jf', JOBS);
      const rawMs = await rawConsume(vhost.amqpUrl, 'raw', JOBS, prefetch);
      const jf = await jobfleetConsume(vhost.amqpUrl, db.url, 'jf', JOBS, prefetch);
      const rawPerSec = (JOBS / rawMs) * 1000;
      const jobfleetPerSec = (JOBS / jf.ms) * 1000;
      rows.push({
        prefetch,
        rawPerSec,
        jobfleetPerSec,
        ratio: jobfleetPerSec / rawPerSec,
        roundTripsPerJob: jf.perJob,
      });
      console.error(
        `prefetch ${prefetch}: raw ${rawPerSec.toFixed(0)}/s, jobfleet ${jobfleetPerSec.toFixed(0)}/s, ${jf.perJob.toFixed(2)} round trips/job`,
      );
    } finally {
      await vhost.cleanup();
      await db.cleanup();
    }
  }
  const claims = [];
  for (const existing of quick ? [10_000] : [10_000, 1_000_000]) {
    const r = await claimLatency(urls.pgUrl, existing, 2000);
    claims.push({ existing, ...r });
    console.error(
      `claim latency with ${existing} rows: p50 ${r.p50.toFixed(2)} ms, p99 ${r.p99.toFixed(2)} ms`,
    );
  }
  const statements = await namedVsUnnamed(urls.pgUrl, JOBS);
  console.error(
    `claim+record, 16 concurrent: unnamed ${statements.unnamed.toFixed(0)}/s, named ${statements.named.toFixed(0)}/s`,
  );
  return { jobs: JOBS, rows, claims, statements };
}
