// A consumer process: hosts one system's consumer with a no-op handler, so
// that its event loop is its own and its CPU can be told apart. Spawned by
// bench/peers/consumer-process.ts with the spec as argv[2]; speaks the
// protocol in ./protocol.ts over the IPC channel.
import { cpuSince, perServer, serverCpuMicros, type ServerCpu } from './server-cpu.js';
import type { ChildMessage, ChildReport, ChildSpec, ParentMessage } from './protocol.js';
import { wallMs, type ConsumerHooks, type System } from './system.js';

const spec = JSON.parse(process.argv[2] ?? '') as ChildSpec;

const send = (msg: ChildMessage) =>
  new Promise<void>((resolve) => process.send?.(msg, undefined, {}, () => resolve()));

const fail = async (err: unknown) => {
  await send({
    type: 'failed',
    error: err instanceof Error ? (err.stack ?? err.message) : String(err),
  });
  process.exit(1);
};
process.on('uncaughtException', (err) => void fail(err));
process.on('unhandledRejection', (err) => void fail(err));

let started = 0;
let finished = 0;
let firstStartedAt: number | undefined;
let lastFinishedAt: number | undefined;
let cpuAtFirstStart: NodeJS.CpuUsage | undefined;
let serversAtFirstStart: ServerCpu | undefined;
const latencies: number[] = [];
const heap: Array<{ jobs: number; heapBytes: number }> = [];
const heapAt = new Set(spec.heapAt);
const idle: Array<() => void> = [];
let expect = spec.expect;
let reachedExpect: () => void = () => undefined;
const settleNow = new Promise<void>((resolve) => (reachedExpect = resolve));

const hooks: ConsumerHooks = {
  started: (job) => {
    const now = wallMs();
    if (spec.mode === 'latency') latencies.push(job.n, now - job.at);
    if (started++ === 0) {
      firstStartedAt = now;
      // the servers first: reading /proc costs a few ms of this process's own CPU.
      // Only throughput runs report them; a latency run's first job is not kept waiting.
      if (spec.mode === 'throughput') serversAtFirstStart = serverCpuMicros();
      cpuAtFirstStart = process.cpuUsage();
    }
    if (started === expect) reachedExpect();
  },
  finished: () => {
    finished++;
    lastFinishedAt = wallMs();
    if (heapAt.has(finished)) {
      globalThis.gc?.();
      heap.push({ jobs: finished, heapBytes: process.memoryUsage().heapUsed });
    }
    if (finished >= started) for (const wake of idle.splice(0)) wake();
  },
  finishAll: () => {
    if (finished < started) {
      finished = started;
      lastFinishedAt = wallMs();
    }
    for (const wake of idle.splice(0)) wake();
  },
  allFinished: () =>
    finished >= started ? Promise.resolve() : new Promise<void>((r) => idle.push(r)),
};

const go = new Promise<void>((resolve) => {
  process.on('message', (msg: ParentMessage) => {
    if (msg.type === 'go') resolve();
    if (msg.type === 'settle') {
      if (msg.expect !== undefined) expect = msg.expect;
      if (expect === undefined || started >= expect) reachedExpect();
    }
  });
});

const { system } = (await import(`./${spec.system}.js`)) as { system: System };
const consumer = system.consumer(spec.target, spec.options, hooks);
await consumer.open();
await send({ type: 'ready' });
await go;
if (expect === 0) reachedExpect();
await consumer.start();
await send({ type: 'consuming' });

let lastSent = -1;
const progress = spec.progress
  ? setInterval(() => {
      if (started !== lastSent) void send({ type: 'progress', started: (lastSent = started) });
    }, 25)
  : undefined;

await settleNow;
clearInterval(progress);
await consumer.settle();
const cpu = cpuAtFirstStart ? process.cpuUsage(cpuAtFirstStart) : { user: 0, system: 0 };
const servers = serversAtFirstStart ? cpuSince(serversAtFirstStart) : perServer(() => 0);
const report: ChildReport = {
  started,
  finished,
  firstStartedAt,
  lastFinishedAt,
  cpuMicros: cpu.user + cpu.system,
  serverCpu: servers,
  latencies,
  ...(heap.length && { heap }),
};
await send({ type: 'done', report });
// Closing lets PostgreSQL backends exit (and flush their statistics) before the parent reads them.
await Promise.race([consumer.close(), new Promise((r) => setTimeout(r, 10_000))]);
process.exit(0);
