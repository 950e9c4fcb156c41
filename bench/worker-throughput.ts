// Worker throughput (`make bench BENCH=worker`): jobfleet beside raw amqplib
// and the queue libraries people would pick instead (pg-boss,
// graphile-worker, and BullMQ when Redis answers), in one run, on the same
// RabbitMQ, PostgreSQL and Redis. Every consumer runs in its own process
// (bench/peers/child.ts) so that one event loop cannot slow another and CPU
// is attributable; this process fills queues first, then starts the consumer
// and collects its figures. bench/peers/ holds one module per system.
//
//   node --import tsx bench/worker-throughput.ts [--jobs 20000] [--runs 3]
//        [--latency-seconds 10] [--rate 500] [--heap-jobs 500000] [--only id,id]
//        [--match text] [--quick]
// --match keeps the rows whose label contains the text (raw amqplib always runs).
// prints the RESULTS.md section (bench/worker-report.ts); `make bench BENCH=worker` writes it.
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { freePort } from '../test/ground/control-plane.js';
import { rabbitmq4Root, startRabbitNode, type RabbitNode } from '../test/ground/rabbitmq-node.js';
import { configuredUrls } from '../test/ground/services.js';
import { BenchDatabase, type PgCounters } from './peers/bench-database.js';
import { redisFacts, redisPersistence } from './peers/bullmq.js';
import { ConsumerProcess } from './peers/consumer-process.js';
import { producePaced } from './peers/paced-producer.js';
import { median, percentile } from './stats.js';
import type { ChildReport } from './peers/protocol.js';
import {
  perServer,
  SERVERS,
  serversNotSeen,
  type Server,
  type ServerCpu,
} from './peers/server-cpu.js';
import { systems } from './peers/registry.js';
import type { Services, SystemId } from './peers/system.js';
import {
  renderWorkerSection,
  type HeapRun,
  type Latency,
  type ResultRow,
  type WorkerBenchOptions,
  type WorkerBenchResult,
} from './worker-report.js';

export function workerBenchOptions(argv: string[]): WorkerBenchOptions {
  const { values: o } = parseArgs({
    args: argv,
    strict: false,
    options: {
      jobs: { type: 'string' },
      runs: { type: 'string' },
      'latency-seconds': { type: 'string' },
      rate: { type: 'string' },
      only: { type: 'string' },
      match: { type: 'string' },
      'heap-jobs': { type: 'string' },
      quick: { type: 'boolean', default: false },
      'in-doubt': { type: 'boolean', default: false },
    },
  });
  const num = (v: unknown, dflt: number) => (typeof v === 'string' ? Number(v) : dflt);
  const opts: WorkerBenchOptions = {
    jobs: num(o.jobs, o.quick ? 2000 : 20_000),
    runs: num(o.runs, o.quick ? 1 : 3),
    latencySeconds: num(o['latency-seconds'], o.quick ? 3 : 10),
    rate: num(o.rate, 500),
    heapJobs: num(o['heap-jobs'], o.quick ? 20_000 : 500_000),
    only: typeof o.only === 'string' ? (o.only.split(',') as SystemId[]) : undefined,
    match: typeof o.match === 'string' ? o.match : undefined,
    inDoubt: o['in-doubt'] === true,
  };
  // the in-doubt rows are throughput only: no latency or heap run
  if (opts.inDoubt) opts.heapJobs = 0;
  if (!(opts.jobs > 0 && opts.runs > 0 && opts.rate > 0 && opts.latencySeconds >= 2))
    throw new Error('--jobs, --runs and --rate must be positive, --latency-seconds at least 2');
  if (!(opts.heapJobs === 0 || opts.heapJobs >= 10))
    throw new Error('--heap-jobs: 0 (no heap run) or at least 10');
  const unknown = opts.only?.filter((id) => !(id in systems));
  if (unknown?.length)
    throw new Error(`--only: no system ${unknown.join(', ')} (${Object.keys(systems).join(', ')})`);
  return opts;
}

interface Row {
  system: SystemId;
  config: string;
  options: Record<string, number>;
  processes: number;
  /** also measured in the latency run */
  latency?: boolean;
  /** RabbitMQ 4 from the test ground's chroot, with this queue type (the machine's broker otherwise) */
  rabbitmq4?: 'classic' | 'quorum';
}

const ROWS: Row[] = [
  { system: 'raw', config: 'prefetch 64', options: { prefetch: 64 }, processes: 1, latency: true },
  { system: 'jobfleet', config: 'prefetch 1', options: { prefetch: 1 }, processes: 1 },
  { system: 'jobfleet', config: 'prefetch 16', options: { prefetch: 16 }, processes: 1 },
  {
    system: 'jobfleet',
    config: 'prefetch 64',
    options: { prefetch: 64 },
    processes: 1,
    latency: true,
  },
  // As many deliveries in flight as pg-boss's row holds jobs (4 batches of 64): like for like.
  { system: 'jobfleet', config: 'prefetch 256', options: { prefetch: 256 }, processes: 1 },
  {
    system: 'jobfleet',
    config: '2 processes × prefetch 64',
    options: { prefetch: 64 },
    processes: 2,
  },
  {
    system: 'pg-boss',
    config: 'batchSize 64 × localConcurrency 4',
    options: {},
    processes: 1,
    latency: true,
  },
  {
    system: 'graphile-worker',
    config: 'concurrentJobs 24, localQueue 500',
    options: {},
    processes: 1,
    latency: true,
  },
  { system: 'bullmq', config: 'concurrency 64', options: {}, processes: 1, latency: true },
  // RabbitMQ 4: the same consumers on a classic and on a quorum queue, so that
  // what the replicated type costs reads apart from what the broker's version does.
  ...(['classic', 'quorum'] as const).flatMap((type) =>
    (['raw', 'jobfleet'] as const).map((system): Row => ({
      system,
      config: `RabbitMQ 4 ${type} queue, prefetch 64`,
      options: { prefetch: 64 },
      processes: 1,
      rabbitmq4: type,
    })),
  ),
];

/**
 * --in-doubt: the plain no-op handler beside the same handler with what
 * in-doubt handling adds (docs/in-doubt.md), on the machine's broker.
 */
const IN_DOUBT_ROWS: Row[] = [
  { system: 'raw', config: 'prefetch 64', options: { prefetch: 64 }, processes: 1 },
  { system: 'jobfleet', config: 'prefetch 64', options: { prefetch: 64 }, processes: 1 },
  {
    system: 'jobfleet',
    config: 'prefetch 64, with a reconcile (never called)',
    options: { prefetch: 64, reconcile: 1 },
    processes: 1,
  },
  {
    system: 'jobfleet',
    config: 'prefetch 64, ctx.intend before its call',
    options: { prefetch: 64, intend: 1 },
    processes: 1,
  },
  {
    system: 'jobfleet',
    config: 'prefetch 64, 2 ctx.step',
    options: { prefetch: 64, steps: 2 },
    processes: 1,
  },
];

/** The services a row consumes from: the machine's broker, or RabbitMQ 4 with the row's queue type. */
function rowServices(row: Row, services: Services, rabbitmq4?: BrokerUrls): Services {
  if (!row.rabbitmq4) return services;
  if (!rabbitmq4) throw new Error('RabbitMQ 4 is not running');
  return { ...services, ...rabbitmq4, queueType: row.rabbitmq4 };
}

interface BrokerUrls {
  amqpUrl: string;
  rabbitMgmtUrl: string;
}

const label = (r: Row) => `${systems[r.system].label} (${r.config})`;
/** generous (20 jobs/s): the slowest system must finish, a hung one must not hold the run forever */
const timeoutMs = (jobs: number) => 60_000 + jobs * 50;

interface Measured {
  jobsPerSec: number;
  cpuMsPer1k: number;
  serverCpuMsPer1k: ServerCpu;
  pg?: PgCounters;
}

function delta(a: PgCounters, b: PgCounters): PgCounters {
  return {
    transactions: b.transactions - a.transactions,
    rowsWritten: b.rowsWritten - a.rowsWritten,
  };
}

/** One throughput run of one row: a fresh namespace, filled, drained by the row's processes. */
async function throughputOnce(
  row: Row,
  jobs: number,
  services: Services,
  db: BenchDatabase,
): Promise<Measured> {
  const system = systems[row.system];
  const ns = await system.prepare(services);
  const procs: ConsumerProcess[] = [];
  try {
    await ns.fill(jobs);
    const before = system.usesPostgres ? await db.counters() : undefined;
    const shared = row.processes > 1;
    for (let i = 0; i < row.processes; i++) {
      procs.push(
        new ConsumerProcess(
          {
            system: row.system,
            target: ns.target,
            options: row.options,
            mode: 'throughput',
            expect: shared ? undefined : jobs,
            progress: shared,
          },
          timeoutMs(jobs),
        ),
      );
    }
    await Promise.all(procs.map((p) => p.ready));
    // Processes sharing a queue cannot know their share: the sum of their
    // progress tells when all jobs have started; each then reports when its
    // last completion was recorded.
    let settled = false;
    const settleWhenAllStarted = () => {
      if (settled || procs.reduce((s, p) => s + p.started, 0) < jobs) return;
      settled = true;
      for (const p of procs) p.send({ type: 'settle' });
    };
    for (const p of procs) p.onProgress = settleWhenAllStarted;
    for (const p of procs) p.send({ type: 'go' });
    if (shared) settleWhenAllStarted();
    const reports = await Promise.all(procs.map((p) => p.done));
    await Promise.all(procs.map((p) => p.exited));
    const after = system.usesPostgres ? await db.counters() : undefined;
    return summarise(row, jobs, reports, before && after && delta(before, after));
  } finally {
    for (const p of procs) p.kill();
    await ns.cleanup();
  }
}

function summarise(row: Row, jobs: number, reports: ChildReport[], pg?: PgCounters): Measured {
  const started = reports.reduce((s, r) => s + r.started, 0);
  if (started !== jobs)
    console.error(`${label(row)}: ${started} handler starts for ${jobs} jobs (redeliveries?)`);
  const first = Math.min(...reports.map((r) => r.firstStartedAt ?? Infinity));
  const last = Math.max(...reports.map((r) => r.lastFinishedAt ?? -Infinity));
  const cpuMs = reports.reduce((s, r) => s + r.cpuMicros, 0) / 1000;
  // Each process read the servers over its own window; the windows of a row's
  // processes all but coincide, so the largest reading stands for the row
  // (a sum would count the servers once per process).
  const server = (s: Server) => Math.max(...reports.map((r) => r.serverCpu[s])) / jobs;
  return {
    jobsPerSec: (jobs / (last - first)) * 1000,
    cpuMsPer1k: (cpuMs / jobs) * 1000,
    serverCpuMsPer1k: perServer(server),
    ...(pg && { pg }),
  };
}

/**
 * Two rows at once, each on a queue and schema of its own, started together:
 * both meet the same machine at the same moment, so their ratio is not
 * moved by what the machine does between sequential runs. `first` is sent
 * its go first (alternated by the caller). Each row's jobs/s over its own
 * window; the one that ends first leaves the other a short tail alone.
 */
async function pairedOnce(
  pair: readonly [Row, Row],
  jobs: number,
  services: Services,
  first: 0 | 1,
): Promise<[number, number]> {
  const spaces = await Promise.all(pair.map((row) => systems[row.system].prepare(services)));
  const procs: ConsumerProcess[] = [];
  try {
    await Promise.all(spaces.map((ns) => ns.fill(jobs)));
    for (const [i, row] of pair.entries())
      procs.push(
        new ConsumerProcess(
          {
            system: row.system,
            target: (spaces[i] as (typeof spaces)[number]).target,
            options: row.options,
            mode: 'throughput',
            expect: jobs,
          },
          timeoutMs(jobs),
        ),
      );
    await Promise.all(procs.map((p) => p.ready));
    for (const i of first ? [1, 0] : [0, 1]) procs[i]?.send({ type: 'go' });
    const reports = await Promise.all(procs.map((p) => p.done));
    await Promise.all(procs.map((p) => p.exited));
    const rate = (r: ChildReport) =>
      (jobs / ((r.lastFinishedAt ?? NaN) - (r.firstStartedAt ?? NaN))) * 1000;
    return [rate(reports[0] as ChildReport), rate(reports[1] as ChildReport)];
  } finally {
    for (const p of procs) p.kill();
    await Promise.all(spaces.map((ns) => ns.cleanup()));
  }
}

/** --in-doubt: the plain handler and the one with a reconcile, at once, `runs` times (who starts first alternates). */
async function pairedReconcile(opts: WorkerBenchOptions, services: Services) {
  const pair = [IN_DOUBT_ROWS[1], IN_DOUBT_ROWS[2]] as [Row, Row];
  const out: Array<{ plain: number; reconcile: number }> = [];
  for (let i = 0; i < opts.runs; i++) {
    const [plain, reconcile] = await pairedOnce(pair, opts.jobs, services, (i % 2) as 0 | 1);
    out.push({ plain, reconcile });
    console.error(
      `paired ${i + 1}/${opts.runs}: plain ${plain.toFixed(0)} jobs/s, with a reconcile ${reconcile.toFixed(0)} jobs/s (${(reconcile / plain).toFixed(3)})`,
    );
  }
  return out;
}

/** Publish → handler start at a fixed offered load, against a consumer already running. */
async function latencyOnce(
  row: Row,
  opts: WorkerBenchOptions,
  services: Services,
): Promise<Latency> {
  const system = systems[row.system];
  const ns = await system.prepare(services);
  let proc: ConsumerProcess | undefined;
  try {
    await ns.fill(0);
    proc = new ConsumerProcess(
      { system: row.system, target: ns.target, options: row.options, mode: 'latency' },
      timeoutMs(opts.rate * opts.latencySeconds),
    );
    await proc.ready;
    proc.send({ type: 'go' });
    await proc.consuming;
    const producer = await ns.openProducer();
    let sent: Awaited<ReturnType<typeof producePaced>>;
    try {
      sent = await producePaced(producer, opts.rate, opts.latencySeconds);
    } finally {
      await producer.close();
    }
    proc.send({ type: 'settle', expect: sent.sent });
    const { latencies } = await proc.done;
    await proc.exited;
    // The first second is warm-up: connections, prepared statements, JIT.
    const warmup = opts.rate;
    const ms: number[] = [];
    for (let i = 0; i < latencies.length; i += 2)
      if ((latencies[i] as number) >= warmup) ms.push(latencies[i + 1] as number);
    ms.sort((a, b) => a - b);
    const sendMs = sent.sendMs.slice(warmup).sort((a, b) => a - b);
    return {
      p50: percentile(ms, 0.5),
      p99: percentile(ms, 0.99),
      measured: ms.length,
      acceptedRate: sent.acceptedRate,
      sendP50: percentile(sendMs, 0.5),
      sendP99: percentile(sendMs, 0.99),
    };
  } finally {
    proc?.kill();
    await ns.cleanup();
  }
}

/** The row whose heap is followed over a long run: jobfleet, one process, prefetch 64. */
const HEAP_ROW: Row = {
  system: 'jobfleet',
  config: 'prefetch 64',
  options: { prefetch: 64 },
  processes: 1,
};

/**
 * Heap after a tenth of the jobs and after all of them (a full GC before each
 * reading): whatever the worker keeps per job processed shows as growth.
 */
async function heapOnce(jobs: number, services: Services): Promise<HeapRun> {
  const system = systems[HEAP_ROW.system];
  const ns = await system.prepare(services);
  let proc: ConsumerProcess | undefined;
  try {
    await ns.fill(jobs);
    proc = new ConsumerProcess(
      {
        system: HEAP_ROW.system,
        target: ns.target,
        options: HEAP_ROW.options,
        mode: 'throughput',
        expect: jobs,
        heapAt: [jobs / 10, jobs],
      },
      timeoutMs(jobs),
    );
    await proc.ready;
    proc.send({ type: 'go' });
    const report = await proc.done;
    await proc.exited;
    return { config: HEAP_ROW.config, readings: report.heap ?? [] };
  } finally {
    proc?.kill();
    await ns.cleanup();
  }
}

async function postgresDurability(pgUrl: string): Promise<string> {
  const c = new pg.Client({ connectionString: pgUrl });
  await c.connect();
  try {
    const { rows } = await c.query<{ name: string; setting: string }>(
      `select name, setting from pg_settings where name in ('fsync', 'synchronous_commit') order by name`,
    );
    return rows.map((r) => `${r.name} ${r.setting}`).join(', ');
  } finally {
    await c.end();
  }
}

/** The rows asked for whose system can run here, and why the others cannot. */
async function availableRows(opts: WorkerBenchOptions, services: Services, rabbitmq4: boolean) {
  const skipped: WorkerBenchResult['skipped'] = [];
  const rows: Row[] = [];
  for (const row of opts.inDoubt ? IN_DOUBT_ROWS : ROWS) {
    if (opts.only && row.system !== 'raw' && !opts.only.includes(row.system)) continue;
    if (opts.match && row.system !== 'raw' && !label(row).includes(opts.match)) continue;
    const why =
      row.rabbitmq4 && !rabbitmq4
        ? 'RabbitMQ 4 is not built: run `make rabbitmq4` (needs root)'
        : await systems[row.system].unavailable?.(services);
    if (why) {
      skipped.push({ label: label(row), why });
      console.error(`skipping ${label(row)}: ${why}`);
    } else rows.push(row);
  }
  return { rows, skipped };
}

export async function runWorkerBench(opts: WorkerBenchOptions): Promise<WorkerBenchResult> {
  const urls = configuredUrls();
  const redisUrl = process.env.JOBFLEET_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
  const db = await BenchDatabase.create(urls.pgUrl);
  const root = rabbitmq4Root();
  const node = root ? await startBenchRabbitmq4(root) : undefined;
  // Ctrl-C reaches the consumer processes too; the database is ours to remove.
  const onInterrupt = () =>
    void Promise.all([db.drop(), node?.stop()]).finally(() => process.exit(130));
  process.once('SIGINT', onInterrupt);
  try {
    const services: Services = { ...urls, pgUrl: db.url, redisUrl };
    const { rows, skipped } = await availableRows(opts, services, !!node);
    for (const s of serversNotSeen())
      console.error(`no ${s} process in /proc: its CPU column reads 0 (another PID namespace?)`);
    const redis = await redisFacts(redisUrl);
    const durability = {
      postgres: await postgresDurability(urls.pgUrl),
      ...(redis && { redis: redisPersistence(redis) }),
    };
    const result = await measure(opts, rows, services, db, {
      skipped,
      durability,
      ...(node && { rabbitmq4: { amqpUrl: node.amqpUrl, rabbitMgmtUrl: node.mgmtUrl } }),
    });
    return {
      ...result,
      ...(node && rows.some((r) => r.rabbitmq4) && { rabbitmq4Version: node.version }),
    };
  } finally {
    process.off('SIGINT', onInterrupt);
    await db.drop();
    await node?.stop();
    await node?.removeData();
  }
}

/** RabbitMQ 4 from the test ground's chroot, beside the machine's broker, for the bench's rows on it. */
async function startBenchRabbitmq4(root: string): Promise<RabbitNode> {
  const node = await startRabbitNode({
    root,
    name: `bench-${process.pid}`,
    amqpPort: await freePort(),
    mgmtPort: await freePort(),
    distPort: await freePort(),
    epmdPort: await freePort(),
    reapWith: process.pid,
  });
  console.error(`RabbitMQ ${node.version} (chroot) at ${node.amqpUrl.replace(/\/\/.*@/, '//')}`);
  return node;
}

/** Empty runs, then the interleaved throughput runs, then the latency runs. */
async function measure(
  opts: WorkerBenchOptions,
  rows: Row[],
  services: Services,
  db: BenchDatabase,
  found: Pick<WorkerBenchResult, 'skipped' | 'durability'> & { rabbitmq4?: BrokerUrls },
): Promise<WorkerBenchResult> {
  // A system that breaks is reported as such; the others still run.
  const failed = new Map<Row, string>();
  const attempt = async <T>(row: Row, what: string, fn: () => Promise<T>) => {
    if (failed.has(row)) return undefined;
    try {
      return await fn();
    } catch (err) {
      console.error(`${label(row)}: ${what} failed:`, err);
      const msg = err instanceof Error ? err.message : JSON.stringify(err);
      failed.set(row, `${what} failed: ${msg.split('\n')[0]}`);
      return undefined;
    }
  };
  // An empty run of each PostgreSQL consumer: what start-up and shutdown
  // cost, taken out of the per-job figure.
  const overhead = new Map<Row, PgCounters>();
  for (const row of rows.filter((r) => systems[r.system].usesPostgres)) {
    const m = await attempt(row, 'empty run', () =>
      throughputOnce(row, 0, rowServices(row, services, found.rabbitmq4), db),
    );
    if (!m?.pg) continue;
    overhead.set(row, m.pg);
    console.error(`${label(row)}: empty run, ${m.pg.transactions} transactions`);
  }
  // Runs interleaved (every row, then every row again) so that a noisy
  // minute on a shared machine spreads over all systems. The in-doubt rows
  // are compared with each other to a few per cent: their order is reversed
  // every other repetition, so that no row always follows the same one (in
  // one order, the second row read 9 % slower in all 3 runs).
  const runs = new Map<Row, Measured[]>(rows.map((r) => [r, []]));
  for (let i = 0; i < opts.runs; i++) {
    for (const row of opts.inDoubt && i % 2 ? [...rows].reverse() : rows) {
      const m = await attempt(row, `run ${i + 1}`, () =>
        throughputOnce(row, opts.jobs, rowServices(row, services, found.rabbitmq4), db),
      );
      if (!m) continue;
      runs.get(row)?.push(m);
      console.error(
        `run ${i + 1}/${opts.runs} ${label(row)}: ${m.jobsPerSec.toFixed(0)} jobs/s, ` +
          `${m.cpuMsPer1k.toFixed(0)} CPU ms/1k (servers: ` +
          SERVERS.map((s) => `${s} ${m.serverCpuMsPer1k[s].toFixed(0)}`).join(', ') +
          ')' +
          (m.pg ? `, ${m.pg.transactions} transactions` : ''),
      );
    }
  }
  const paired = opts.inDoubt ? await pairedReconcile(opts, services) : undefined;
  const latencies = new Map<Row, Latency>();
  for (const row of rows.filter((r) => r.latency)) {
    const l = await attempt(row, 'latency run', () => latencyOnce(row, opts, services));
    if (!l) continue;
    latencies.set(row, l);
    console.error(
      `latency ${label(row)}: p50 ${l.p50.toFixed(1)} ms, p99 ${l.p99.toFixed(1)} ms ` +
        `(${l.measured} jobs; send p50 ${l.sendP50.toFixed(1)} ms, p99 ${l.sendP99.toFixed(1)} ms)`,
    );
  }
  const heapRun =
    opts.heapJobs > 0 && rows.some((r) => r.system === 'jobfleet')
      ? await heapOnce(opts.heapJobs, services).catch((err: unknown) => {
          console.error('heap run failed:', err);
          return undefined;
        })
      : undefined;
  if (heapRun)
    console.error(
      `heap: ${heapRun.readings.map((h) => `${h.jobs} jobs ${(h.heapBytes / 2 ** 20).toFixed(1)} MiB`).join(', ')}`,
    );
  // each row against raw amqplib on the same broker and queue type
  const rawOf = (row: Row) => {
    const rawRow = rows.find((r) => r.system === 'raw' && r.rabbitmq4 === row.rabbitmq4);
    return (rawRow && !failed.has(rawRow) && runs.get(rawRow)) || [];
  };
  const skipped = [
    ...found.skipped,
    ...[...failed].map(([row, why]) => ({ label: label(row), why })),
  ];
  return {
    opts,
    skipped,
    durability: found.durability,
    ...(heapRun && { heap: heapRun }),
    ...(paired && { paired }),
    rows: rows
      .filter((row) => !failed.has(row))
      .map((row) =>
        resultRow(
          row,
          runs.get(row) ?? [],
          rawOf(row),
          opts.jobs,
          overhead.get(row),
          latencies.get(row),
        ),
      ),
  };
}

function resultRow(
  row: Row,
  ms: Measured[],
  raw: Measured[],
  jobs: number,
  overhead?: PgCounters,
  latency?: Latency,
): ResultRow {
  const perJob = (pick: (c: PgCounters) => number) =>
    overhead && median(ms.map((m) => (m.pg ? pick(m.pg) - pick(overhead) : NaN))) / jobs;
  return {
    system: row.system,
    label: systems[row.system].label,
    version: systems[row.system].version,
    config: row.config,
    processes: row.processes,
    jobsPerSec: median(ms.map((m) => m.jobsPerSec)),
    // Against raw amqplib in the same repetition, then the median.
    vsRaw: median(ms.map((m, i) => m.jobsPerSec / (raw[i]?.jobsPerSec ?? NaN))),
    perRun: ms.map((m, i) => ({
      jobsPerSec: m.jobsPerSec,
      vsRaw: m.jobsPerSec / (raw[i]?.jobsPerSec ?? NaN),
    })),
    cpuMsPer1k: median(ms.map((m) => m.cpuMsPer1k)),
    serverCpuMsPer1k: perServer((s) => median(ms.map((m) => m.serverCpuMsPer1k[s]))),
    // the whole machine's cost of a job: the consumer's CPU and its servers', in the same run
    allCpuMsPer1k: median(
      ms.map((m) => SERVERS.reduce((sum, s) => sum + m.serverCpuMsPer1k[s], m.cpuMsPer1k)),
    ),
    pgTransactionsPerJob: perJob((c) => c.transactions),
    pgRowsPerJob: perJob((c) => c.rowsWritten),
    pgOverhead: overhead,
    latency,
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const result = await runWorkerBench(workerBenchOptions(process.argv.slice(2)));
  console.log(renderWorkerSection(result));
}
