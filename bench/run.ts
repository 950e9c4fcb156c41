// `make bench`: runs the benchmarks and writes each one's section of
// bench/RESULTS.md (with the command, date and machine), leaving the other
// sections as they were. `make bench BENCH=worker` runs one; BENCH_ARGS are
// passed on (e.g. BENCH_ARGS="--jobs 2000 --runs 1").
import amqp from 'amqplib';
import { header, resultsFile, writeSection } from './results.js';
import { runOperatorBench } from './operator-scale.js';
import { renderOperatorSection } from './operator-report.js';
import { DEFAULT_RESYNC_SECONDS } from '../src/operator.js';
import { MODEL } from './scaling-model.js';
import {
  JOBFLEET_CLASSIC,
  JOBFLEET_ESTIMATED,
  JOBFLEET_QUORUM,
  median,
  runScalingSim,
} from './scaling-sim.js';
import { renderClaimSection, runClaimBench } from './claim-latency.js';
import { renderStatusWriteSection, runStatusWriteBench } from './status-write-cost.js';
import { renderInDoubtCostSection, renderWorkerSection } from './worker-report.js';
import { runWorkerBench, workerBenchOptions } from './worker-throughput.js';
import { renderOutboxSection, runOutboxBench } from './outbox-bench.js';

const only = process.env.BENCH;

if (!only || only === 'worker') {
  const args = process.argv.slice(2);
  const opts = workerBenchOptions(args);
  const r = await runWorkerBench(opts);
  const cmd = `make bench BENCH=worker${args.length ? ` BENCH_ARGS="${args.join(' ')}"` : ''}`;
  if (opts.inDoubt)
    writeSection(
      'worker-in-doubt',
      `${header('What in-doubt handling costs a job: a reconcile, ctx.intend, ctx.step', cmd)}
${renderInDoubtCostSection(r)}`,
    );
  else
    writeSection(
      'worker',
      `${header('Worker throughput: jobfleet vs raw amqplib and peer queue libraries', cmd)}
${renderWorkerSection(r)}`,
    );
}
if (!only || only === 'outbox') {
  const args = process.argv.slice(2);
  const arg = (name: string, d: number) => {
    const i = args.indexOf(name);
    return i >= 0 ? Number(args[i + 1]) : d;
  };
  const r = await runOutboxBench({
    jobs: arg('--jobs', 20_000),
    runs: arg('--runs', 3),
    rate: arg('--rate', 500),
    seconds: arg('--seconds', 20),
  });
  const cmd = `make bench BENCH=outbox${args.length ? ` BENCH_ARGS="${args.join(' ')}"` : ''}`;
  writeSection(
    'outbox',
    `${header('The outbox: relay throughput against direct publishing, and enqueue-to-handler latency', cmd)}
${renderOutboxSection(r)}`,
  );
}
if (!only || only === 'claims') {
  const r = await runClaimBench({ quick: process.argv.includes('--quick') });
  writeSection(
    'claims',
    `${header('Claim store: claim latency and named statements', 'make bench BENCH=claims')}
${renderClaimSection(r)}`,
  );
}

if (!only || only === 'operator') {
  const quick = process.argv.includes('--quick');
  const arg = (name: string) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? Number(process.argv[i + 1]) : undefined;
  };
  const runs = arg('--runs') ?? 3;
  const steady = arg('--steady') ?? (quick ? 30 : 300);
  // Each run its own floor and its own operator, back to back; the steady-state window once, in the last.
  // The resync is the operator's default, what a user runs (--resync to stress it).
  const rs = [];
  for (let i = 0; i < runs; i++) {
    const r = await runOperatorBench({
      count: arg('--count') ?? (quick ? 100 : 1000),
      steadySeconds: i === runs - 1 ? steady : 0,
      resyncSeconds: arg('--resync') ?? DEFAULT_RESYNC_SECONDS,
    });
    console.error(r);
    rs.push(r);
  }
  writeSection('operator', renderOperatorSection(rs, process.argv.slice(2)));
}
if (!only || only === 'status-writes') {
  const r = await runStatusWriteBench({ count: 300, rounds: 3 });
  writeSection(
    'status-writes',
    `${header('Operator: what one JobWorker status write costs the control plane', 'make bench BENCH=status-writes')}
${renderStatusWriteSection(r)}`,
  );
}
if (!only || only === 'steady') {
  // Scaling active at steady state: 100 JobWorkers reading the real RabbitMQ's management API
  // (their queue empty, so every fleet sits at its minimum) for 300 s.
  const amqpUrl = 'amqp://guest:guest@127.0.0.1:5672';
  const conn = await amqp.connect(amqpUrl);
  const ch = await conn.createChannel();
  await ch.assertQueue('orders.ship', { durable: true });
  await ch.purgeQueue('orders.ship');
  await conn.close();
  const r = await runOperatorBench({
    count: 100,
    steadySeconds: 300,
    resyncSeconds: 60,
    rabbit: { amqpUrl, mgmtUrl: 'http://guest:guest@127.0.0.1:15672' },
  });
  console.error(r);
  writeSection(
    'steady',
    `${header('Operator: steady state with scaling active', 'make bench BENCH=steady')}
${r.count} JobWorkers (examples/jobworker.yaml, each reading the local RabbitMQ's management API for its queue, which stays
empty) on the test ground's real control plane, kwok marking pods Ready; the operator compiled, polling every 10 s, resync every
${r.resyncSeconds} s. Once all are Healthy, a ${r.steadySeconds} s window: what the operator wrote, by kind. Pod writes are the
pod-deletion-cost marks of scale-downs (idle pods first: docs/scaling.md); a fleet that does not scale down gets none.

| JobWorkers | converged | API writes in ${r.steadySeconds} s steady state | of which Pod (deletion-cost marks) |
|---:|---:|---:|---:|
| ${r.count} | ${r.convergeSeconds.toFixed(1)} s | ${r.steadyWrites}${
      Object.keys(r.steadyByKind).length
        ? ` (${Object.entries(r.steadyByKind)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')})`
        : ''
    } | ${r.steadyByKind.Pod ?? 0} |
`,
  );
}
if (!only || only === 'scaling') {
  const seeds = Number(process.env.SEEDS ?? 10);
  const { traces, validation } = runScalingSim(seeds);
  const span = (xs: number[], f: (x: number) => string) => {
    const lo = Math.min(...xs);
    const hi = Math.max(...xs);
    return lo === hi ? f(lo) : `${f(median(xs))} (${f(lo)}–${f(hi)})`;
  };
  const pct = (x: number) => `${x.toFixed(2)} %`;
  const times = (x: number) => `${x.toFixed(2)}×`;
  const calm = traces.filter((t) => t.trace !== 'throttled');
  const throttled = traces.find((t) => t.trace === 'throttled')!.rows;
  // the spread of one scaler's medians over traces
  const range = (
    ts: typeof traces,
    scaler: string,
    pick: (r: (typeof traces)[number]['rows'][number]) => number[],
    f: (x: number) => string,
  ) => {
    const ms = ts.map((t) => median(pick(t.rows.find((r) => r.scaler.startsWith(scaler))!)));
    const lo = Math.min(...ms);
    const hi = Math.max(...ms);
    return lo === hi ? f(lo) : `${f(lo)}–${f(hi)}`;
  };
  const rows = traces.flatMap((tr) =>
    tr.rows.map(
      (r) =>
        `| ${tr.trace} | ${r.scaler} | ${span(r.overPct, pct)} | ${span(r.vsOracle, times)} | ${median(r.events)} | ${median(r.throttled).toLocaleString('en')} | ${r.capacityError.length ? span(r.capacityError, (x) => `${(100 * x).toFixed(1)} %`) : '–'} |`,
    ),
  );
  const checks = validation.map(
    (v) =>
      `| ${v.trace} | ${v.message.replicaSeconds.toLocaleString('en')} | ${v.fluid.replicaSeconds.toLocaleString('en')} | ${((100 * (v.message.replicaSeconds - v.fluid.replicaSeconds)) / v.fluid.replicaSeconds).toFixed(1)} % | ${v.message.maxAge.toFixed(1)} s / ${v.fluid.maxAge.toFixed(1)} s |`,
  );
  writeSection(
    'scaling',
    `${header('Scaling simulator: age-based vs depth-based vs oracle', 'make bench BENCH=scaling')}
Per-message simulation (bench/scaling-model.ts): Poisson arrivals into a FIFO queue; each replica has ${MODEL.prefetch} slots (prefetch) and
each message holds one for a handler time drawn per message (lognormal, mean 0.8 s → 10 msg/s per replica; σ per trace); pods are
paid for from the moment they are asked for and consume ${MODEL.startDelay} s later; a removed pod drains (takes nothing new, finishes what it
holds) and is paid for until it is empty; objective ${MODEL.objective} s, max ${MODEL.maxReplicas} replicas. The scalers see what they would see live: the
management API's statistics sampled every 5 s (depth, head age, 5 s publish and ack rates), the workers' counters (handler seconds and
runs, jobs completed, in flight) read from the pods at each poll, and throttling as Prometheus' one-minute rate over 15 s scrapes. Age
is what the broker shows (a refused call's retry counts from when it comes back); time over objective counts from a message's first
arrival, so retries cannot hide a late job.
jobfleet = \`decideReplicas\` and \`estimateCapacity\` from src/reconcile/ (the operator's own modules), every 10 s, three times: on a
classic queue with the statistics' head timestamp; on a quorum queue, which has none, with \`queueAge\`'s measurement from each
ready worker's newest delivery (its age when handed over, and when) and idle time, read from the pods at the poll; and on a quorum
queue with no worker reports, \`queueAge\`'s estimate from depth and rates alone (what every quorum queue had before). KEDA-style =
RabbitMQ QueueLength target 20 per replica, polled every 30 s, HPA default behaviour. Oracle = knows every arrival, starts pods
instantly, serves each message at the last second the objective allows at the mean handler time (a lower bound). ${seeds} seeds per trace:
median (min–max). Capacity error = |jobfleet's per-replica estimate ÷ the true one − 1| while the queue was empty (traces whose
capacity does not move with load). Plots (seed 1): bench/scaling-<trace>.svg.

| trace | scaler | time over objective | replica-seconds vs oracle | scale events | throttled calls | capacity error |
|---|---|---:|---:|---:|---:|---:|
${rows.join('\n')}

Traces: ${traces.map((t) => `**${t.trace}** ${t.about}`).join('; ')}.

**Validation** — the per-message model against the fluid one (rates, no messages) where the two must agree: even arrivals,
every message taking exactly the mean, jobfleet scaling both:

| trace | replica-seconds, per-message | fluid | difference | oldest age max, per-message / fluid |
|---|---:|---:|---:|---:|
${checks.join('\n')}

Quorum queues, measured age / classic queues' head timestamps / estimate only (replica-seconds vs oracle, time over objective;
medians): ${traces
      .map((t) => {
        const [c, q, e] = [JOBFLEET_CLASSIC, JOBFLEET_QUORUM, JOBFLEET_ESTIMATED].map((name) =>
          t.rows.find((r) => r.scaler === name)!,
        );
        const both = (r: typeof c) => `${times(median(r!.vsOracle))} ${pct(median(r!.overPct))}`;
        return `${t.trace} ${both(q)} / ${both(c)} / ${both(e)}`;
      })
      .join('; ')}.
The estimate ties here because the simulator never stalls and its arrivals keep to their rates, where Little's law holds; it
is a guess where they do not. test/integration/queue-age.test.ts (truth recorded per message, read every second through
steady load, a burst, a 10 s stall and a drain) prints the largest error of both in every \`make test\`; the runs of
2026-12-03 (\`CI=true make test\` twice, fresh-clone \`.ci/run\` twice; each broker, each run): measured 0.12, 0.13 / 0.18 /
0.13, 0.13 / 0.13, 0.13 s against the estimate alone 7.90, 5.54 / 7.47 / 6.76, 8.04 / 8.95, 5.75 s (machine's RabbitMQ,
RabbitMQ 4; the second \`make test\` was disturbed before its RabbitMQ 4 run).

Reading it: on every trace but the throttled one jobfleet was over the objective ${range(calm, 'jobfleet', (r) => r.overPct, pct)} of the
time (medians), at ${range(calm, 'jobfleet', (r) => r.vsOracle, times)} the oracle's replica-seconds; the depth scaler spent
${range(calm, 'KEDA', (r) => r.vsOracle, times)} and was over the objective ${range(calm, 'KEDA', (r) => r.overPct, pct)} of the time. What the oracle does not
pay — pods that start before they consume, and a burst that must be met before it is measured — is most of the gap on short
bursts. The previous decision (the full 300 s window's maximum; a per-replica rate learnt only from a saturated queue) cost 2.1×
on the spike in the fluid model this one replaces; the window now holds only small steps down, the noise. In the throttled trace
the dependency, not the scaler, sets the time over objective (the oracle's fluid bound: ${pct(median(throttled.find((r) => r.scaler.startsWith('oracle'))!.overPct))});
jobfleet made ${(median(throttled.find((r) => r.scaler.startsWith('KEDA'))!.throttled) / median(throttled.find((r) => r.scaler.startsWith('jobfleet'))!.throttled)).toFixed(0)}× fewer refused calls than the depth scaler. Validation: the two models agree within
${Math.max(...validation.map((v) => Math.abs((100 * (v.message.replicaSeconds - v.fluid.replicaSeconds)) / v.fluid.replicaSeconds))).toFixed(1)} % on replica-seconds.
`,
  );
}
console.error(`wrote ${resultsFile}`);
