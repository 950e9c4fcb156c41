// The worker benchmark's figures and their RESULTS.md section
// (bench/worker-throughput.ts measures them).
import type { PgCounters } from './peers/bench-database.js';
import type { ServerCpu } from './peers/server-cpu.js';
import { systems } from './peers/registry.js';
import type { SystemId } from './peers/system.js';

export interface WorkerBenchOptions {
  jobs: number;
  runs: number;
  latencySeconds: number;
  rate: number;
  /** jobs in the heap run (0: none) */
  heapJobs: number;
  /** run only these systems (dev runs); raw is always kept, the ratios need it */
  only?: SystemId[];
  match?: string;
}

export interface Latency {
  p50: number;
  p99: number;
  measured: number;
  /** sends accepted per second, over the whole paced run */
  acceptedRate: number;
  /** how long the producer's send took to be accepted (part of the latency) */
  sendP50: number;
  sendP99: number;
}

export interface ResultRow {
  system: SystemId;
  label: string;
  version: string;
  config: string;
  processes: number;
  jobsPerSec: number;
  vsRaw: number;
  /** each repetition's jobs/s and its ratio to raw amqplib's in the same repetition, in run order */
  perRun: Array<{ jobsPerSec: number; vsRaw: number }>;
  cpuMsPer1k: number;
  /** what PostgreSQL, RabbitMQ and Redis used over the same window, per 1k jobs */
  serverCpuMsPer1k: ServerCpu;
  /** the consumer's CPU and its servers', per 1k jobs */
  allCpuMsPer1k: number;
  /** per job, start-up and shutdown taken out; undefined when the system does not use PostgreSQL */
  pgTransactionsPerJob?: number;
  pgRowsPerJob?: number;
  /** what an empty run of the same consumer cost (start-up and shutdown) */
  pgOverhead?: PgCounters;
  latency?: Latency;
}

export interface HeapRun {
  config: string;
  readings: Array<{ jobs: number; heapBytes: number }>;
}

export interface WorkerBenchResult {
  opts: WorkerBenchOptions;
  heap?: HeapRun;
  rows: ResultRow[];
  skipped: Array<{ label: string; why: string }>;
  durability: { postgres: string; redis?: { durable: boolean; words: string } };
  /** the RabbitMQ 4 the "RabbitMQ 4" rows ran on, when it ran */
  rabbitmq4Version?: string;
}

export function renderWorkerSection(r: WorkerBenchResult): string {
  const f = (n: number | undefined, d = 0) =>
    n === undefined || Number.isNaN(n) ? '—' : n.toFixed(d);
  const { opts } = r;
  const durable: Record<SystemId, string> = {
    raw: 'yes',
    jobfleet: 'yes',
    'pg-boss': 'yes',
    'graphile-worker': 'yes',
    bullmq: r.durability.redis?.durable ? 'yes' : '**no**',
  };
  const table = r.rows
    .map(
      (x) =>
        `| ${x.label} | ${x.config} | ${f(x.jobsPerSec)} | ${f(x.vsRaw, 2)}× | ${f(x.cpuMsPer1k)} | ` +
        `${f(x.serverCpuMsPer1k.postgres)} | ${f(x.serverCpuMsPer1k.rabbitmq)} | ${f(x.serverCpuMsPer1k.redis)} | ` +
        `**${f(x.allCpuMsPer1k)}** | ${f(x.pgTransactionsPerJob, 2)} | ${f(x.pgRowsPerJob, 2)} | ${durable[x.system]} |`,
    )
    .join('\n');
  const runsTable = r.rows
    .map(
      (x) =>
        `| ${x.label} | ${x.config} | ${x.perRun.map((p) => `${f(p.jobsPerSec)} (${f(p.vsRaw, 2)}×)`).join(' | ')} | ${f(x.jobsPerSec)} (${f(x.vsRaw, 2)}×) |`,
    )
    .join('\n');
  const runHeads = Array.from({ length: opts.runs }, (_, i) => `run ${i + 1}`);
  const latencyTable = r.rows
    .filter((x) => x.latency)
    .map(
      (x) =>
        `| ${x.label} | ${x.config} | ${f(x.latency?.p50, 1)} | ${f(x.latency?.p99, 1)} | ` +
        `${f(x.latency?.sendP50, 1)} | ${f(x.latency?.sendP99, 1)} | ${x.latency?.measured} | ${f(x.latency?.acceptedRate)} |`,
    )
    .join('\n');
  const settings = [...new Set(r.rows.map((x) => x.system))]
    .map((id) => `- ${systems[id].label} ${systems[id].version}: ${systems[id].settings}.`)
    .join('\n');
  // One figure per system, per consumer process.
  const overheads = [...new Map(r.rows.filter((x) => x.pgOverhead).map((x) => [x.system, x]))]
    .map(([, x]) => `${x.label} ${f((x.pgOverhead?.transactions ?? NaN) / x.processes)}`)
    .join(', ');
  const bullmqNote = r.rows.some((x) => x.system === 'bullmq')
    ? ` BullMQ's jobs are in ${r.durability.redis?.words ?? 'Redis'}` +
      (r.durability.redis?.durable ? '.' : '; its figures are not for the same guarantee.')
    : '';
  const mib = (b: number) => (b / 2 ** 20).toFixed(1);
  const [early, late] = r.heap?.readings ?? [];
  const heap =
    r.heap && early && late
      ? `\nMemory over a long run: ${late.jobs} jobs through jobfleet (${r.heap.config}, one process, started with
\`--expose-gc\`); heap used after a full GC at ${early.jobs} jobs: ${mib(early.heapBytes)} MiB, at ${late.jobs}: ${mib(late.heapBytes)} MiB
(${late.heapBytes >= early.heapBytes ? '+' : ''}${f((late.heapBytes / early.heapBytes - 1) * 100, 1)} %). Anything kept per job processed would show as growth.\n`
      : '';
  const rabbitmq4 = r.rabbitmq4Version
    ? `\nThe "RabbitMQ 4" rows: RabbitMQ ${r.rabbitmq4Version} (Debian 13's package, from the test ground's chroot, \`make rabbitmq4\`),
one node started by the bench beside the machine's broker; quorum queues are declared as jobfleet declares them
(delivery limit and dead-letter target). Their ratio is against raw amqplib on the same broker and queue type. The
RabbitMQ CPU column sums both brokers' \`beam.smp\` processes: the idle one adds its housekeeping.\n`
    : '';
  const skipped = r.skipped.length
    ? `\nNot in the table: ${r.skipped.map((s) => `${s.label}: ${s.why}`).join('; ')}.\n`
    : '';
  return `${opts.jobs} jobs per run, enqueued before the consumer starts, into a fresh vhost, schema or Redis key prefix per
run; no-op handlers; every consumer in its own process (\`node --import tsx bench/peers/child.ts\`). Figures are the
median of ${opts.runs} run(s) of every row, interleaved; "vs raw" is jobs/s over raw amqplib's in the same repetition.

| system | configuration | jobs/s | vs raw amqplib | worker CPU ms / 1k jobs | PostgreSQL CPU ms / 1k jobs | RabbitMQ CPU ms / 1k jobs | Redis CPU ms / 1k jobs | all CPU ms / 1k jobs | PostgreSQL transactions / job | rows written / job | durable |
|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|
${table}

Each run, jobs/s (vs raw amqplib in the same repetition), and the median the table above shows:

| system | configuration | ${runHeads.join(' | ')} | median |
|---|---|${runHeads.map(() => '---:|').join('')}---:|
${runsTable}
${rabbitmq4}${skipped}
Durable: raw amqplib and jobfleet publish persistent messages with confirms to a durable queue; jobfleet's claims and
pg-boss's and graphile-worker's jobs are in PostgreSQL with ${r.durability.postgres}.${bullmqNote} The consumer,
PostgreSQL, RabbitMQ and Redis share this machine's cores: compare the rows of one run.

Publish → handler-start latency at a fixed offered load of ${opts.rate} jobs/s: a paced producer in the orchestrating process
sends for ${opts.latencySeconds} s to a consumer already running; each job carries its send time, the handler reads the clock as
it starts (the machine's wall clock, sub-millisecond); the first second is dropped as warm-up. "send": how long the
producer's call took to return (commit, confirm, Redis reply), which is inside the latency; "sends accepted/s" below
the offered rate means the system's enqueue path could not keep up.

| system | configuration | p50 (ms) | p99 (ms) | send p50 (ms) | send p99 (ms) | jobs measured | sends accepted/s |
|---|---|---:|---:|---:|---:|---:|---:|
${latencyTable}
${heap}
Versions and settings; each peer is configured for throughput as its own docs describe:
${settings}

How the figures are taken:
- jobs/s: jobs ÷ (last recorded completion − first handler start), across a row's processes, on the wall clock, so start-up
  is outside the window. Recorded completion: raw = ack sent; jobfleet = \`onOutcome('completed')\` (record committed, message
  acked); BullMQ = the worker's \`completed\` event (job moved out in Redis). pg-boss and graphile-worker complete in batches
  out of the handler's sight, so their window closes when \`offWork({ wait: true })\` / \`runner.stop()\` return, i.e. once the
  last completion is committed.
- worker CPU: \`process.cpuUsage()\` of each consumer process over that window, summed over a row's processes. It is
  the consumer's own: what a system has PostgreSQL, RabbitMQ or Redis do for it is in the next three columns.
- PostgreSQL, RabbitMQ, Redis CPU (ms / 1k jobs): user + system time of every process of that server, with its exited children's (\`/proc/PID/stat\`;
  \`postgres\`, \`beam.smp\`, \`redis-server\`) over the same window, read by the consumer process as its first handler
  starts and once it has settled; for a row of several processes, the largest reading (their windows all but coincide).
  A server a system does not use still shows its idle housekeeping (a few ms per second). Resolution 10 ms per process
  and reading: rough for the shortest runs. "all CPU" is the worker's plus the three: what a job costs this machine,
  whose cores every process shares.
- PostgreSQL transactions / job: the change in \`pg_stat_database\` xact_commit + xact_rollback of a database created for
  this benchmark alone, read once every session has ended (a backend flushes its counters on exit), minus the same change
  for an empty run of that consumer (start-up and shutdown, per process: ${overheads || 'none'}). Transactions, not
  statements: pg_stat_statements is installed but not preloaded here, and loading it needs a server restart; a
  transaction is one autocommit statement or one BEGIN … COMMIT block. Rows written: tup_inserted + tup_updated +
  tup_deleted, likewise. "—": the system does not use PostgreSQL.
`;
}
