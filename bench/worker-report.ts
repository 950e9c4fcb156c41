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
  /**
   * --in-doubt: instead of the peer table, what in-doubt handling costs a
   * job (a handler with a reconcile, ctx.intend, ctx.step) against the same
   * no-op handler, side by side in each repetition (its own section)
   */
  inDoubt?: boolean;
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
  /** --in-doubt: the plain handler and the one with a reconcile, run at once, each repetition */
  paired?: Array<{ plain: number; reconcile: number }>;
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

/** The in-doubt section (make bench BENCH=worker BENCH_ARGS=--in-doubt): each row against the plain handler, run by run. */
export function renderInDoubtCostSection(r: WorkerBenchResult): string {
  const base = r.rows.find((x) => x.system === 'jobfleet' && x.config === 'prefetch 64');
  const rows = r.rows.filter((x) => x.system === 'jobfleet');
  if (!base) return 'The baseline row (jobfleet, prefetch 64) did not run.';
  const f = (n: number | undefined, d = 2) =>
    n === undefined || !Number.isFinite(n) ? '—' : n.toFixed(d);
  const ratios = (x: ResultRow) =>
    x.perRun.map((p, i) => p.jobsPerSec / (base.perRun[i]?.jobsPerSec ?? NaN));
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;
  const lines = rows.map((x) => {
    const rs = ratios(x);
    return `| ${x.config} | ${x.perRun.map((p) => Math.round(p.jobsPerSec)).join(', ')} | ${Math.round(x.jobsPerSec)} | ${rs.map((v) => f(v, 3)).join(', ')} | **${f(median(rs), 3)}** | ${f(x.cpuMsPer1k, 0)} | ${f(x.pgTransactionsPerJob)} | ${f(x.pgRowsPerJob)} | ${f(x.pgRowsPerJob === undefined || base.pgRowsPerJob === undefined ? undefined : x.pgRowsPerJob - base.pgRowsPerJob)} |`;
  });
  return `${r.opts.jobs} no-op jobs per run on the machine's RabbitMQ (classic queue), one worker process, prefetch 64;
${r.opts.runs} repetitions, the rows interleaved in each, in reverse order every other repetition. "vs plain" is a row's jobs/s over the plain handler's in the same
repetition: each repetition's ratio, then their median. The handlers: \`plain\` returns at once; \`with a reconcile\` is the
same handler with a \`reconcile\` beside it, never called (no attempt is in doubt); \`ctx.intend\` records an intent
first; \`2 ctx.step\` runs two steps (each records its start and its result).

| handler | jobs/s per run | median jobs/s | vs plain per run | vs plain (median) | worker CPU ms / 1k jobs | PostgreSQL transactions / job | rows written / job | extra row writes / job |
|---|---|---:|---|---:|---:|---:|---:|---:|
${lines.join('\n')}

${pairedLines(r)}- The plain row alone ran at ${Math.round(Math.min(...base.perRun.map((p) => p.jobsPerSec)))}–${Math.round(Math.max(...base.perRun.map((p) => p.jobsPerSec)))} jobs/s across the
  repetitions: a ratio's run-to-run spread is of that order, and a difference of a few per cent between two rows is
  within it.
- Rows written count every heap tuple inserted or updated (\`pg_stat_database\`), as the peer table does; an update of
  the claim row (ctx.intend, a step's start or result) is a write of its own and, outside group commit, a statement
  and a transaction of its own.
`;
}

/** The paired comparison: both handlers consuming at the same time, each repetition's ratio and their median. */
function pairedLines(r: WorkerBenchResult): string {
  if (!r.paired?.length) return '';
  const ratios = r.paired.map((p) => p.reconcile / p.plain);
  const median = [...ratios].sort((a, b) => a - b)[Math.floor(ratios.length / 2)] ?? NaN;
  return `- **Paired**, the handler with a reconcile against the plain one, both consuming at the same time (two queues, two
  schemas, one process each, who starts first alternating; ${r.opts.jobs} jobs each), ${r.paired.length} repetitions: jobs/s
  ${r.paired.map((p) => `${Math.round(p.reconcile)} against ${Math.round(p.plain)}`).join('; ')}; ratios
  ${ratios.map((x) => x.toFixed(3)).join(', ')}, median **${median.toFixed(3)}**.
`;
}
