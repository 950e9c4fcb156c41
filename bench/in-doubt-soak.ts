// `make soak`: the in-doubt soak in full (test/ground/in-doubt-soak.ts; make
// test runs a short form). Per run, 2,000 jobs booked on a downstream that
// dedupes nothing, a worker SIGKILLed every 1.5–3 s, on RabbitMQ 4's quorum
// queue (the ground's chroot; the machine's broker with a classic queue when
// it was never built): once with the handler's reconcile, once with the
// policy's blind re-run, side by side in each repetition, three repetitions,
// each shown. --write puts the table into bench/RESULTS.md.
//
//   node --import tsx bench/in-doubt-soak.ts [--jobs 2000] [--runs 3] [--workers 2]
//        [--rate 100] [--seed 620] [--write]
import { parseArgs } from 'node:util';
import { runInDoubtSoak, type SoakFigures } from '../test/ground/in-doubt-soak.js';
import { createSchema } from '../test/ground/postgres.js';
import { createVhost } from '../test/ground/rabbit.js';
import { configuredUrls } from '../test/ground/services.js';
import { header, writeSection } from './results.js';
import { groundBroker } from './ground-broker.js';

const { values: o } = parseArgs({
  options: {
    jobs: { type: 'string', default: '2000' },
    runs: { type: 'string', default: '3' },
    workers: { type: 'string', default: '2' },
    rate: { type: 'string', default: '100' },
    seed: { type: 'string', default: '620' },
    write: { type: 'boolean', default: false },
  },
});

const urls = configuredUrls();
const broker = await groundBroker('soak');
const rows: SoakFigures[] = [];
try {
  for (let run = 1; run <= Number(o.runs); run++) {
    for (const reconcile of [true, false]) {
      const rabbit = await createVhost(broker.amqpUrl, broker.mgmtUrl);
      const db = await createSchema(urls.pgUrl);
      try {
        const f = await runInDoubtSoak({
          rabbit,
          db,
          queueType: broker.queueType,
          jobs: Number(o.jobs),
          workers: Number(o.workers),
          reconcile,
          rate: Number(o.rate),
          seed: Number(o.seed) + run * 2 + (reconcile ? 0 : 1),
          timeoutMs: 300_000,
        });
        rows.push(f);
        console.error(`run ${run} ${f.variant}: ${JSON.stringify(f)}`);
      } finally {
        await db.cleanup();
        await rabbit.cleanup();
      }
    }
  }
} finally {
  await broker.stop();
}

const cmd = `make soak (node --import tsx bench/in-doubt-soak.ts --jobs ${o.jobs} --runs ${o.runs} --workers ${o.workers} --rate ${o.rate} --seed ${o.seed} --write)`;
const table = [
  '| run | variant | published | completed | held | other dead letters | lost | duplicate bookings (jobs) | kills | takeovers | seconds |',
  '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ...rows.map(
    (f, i) =>
      `| ${Math.floor(i / 2) + 1} | ${f.variant === 'reconcile' ? 'with reconcile' : 'blind re-run (no reconcile)'} | ${f.published} | ${f.completed} | ${f.held} | ${f.otherDeadLetters} | ${f.lost} | ${f.duplicates} (${f.jobsWithDuplicates}) | ${f.kills} | ${f.takeovers} | ${f.seconds} |`,
  ),
].join('\n');
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const of = (v: SoakFigures['variant']) => rows.filter((r) => r.variant === v);
const body = `${header('In-doubt soak: workers SIGKILLed mid-booking on a downstream that dedupes nothing', cmd)}
- broker: ${broker.name}; ${o.workers} booking-worker processes (test/fixtures/booking-worker.ts), prefetch 8, lease 5 s; each booking answered 50 ms after it is performed (the window a kill hits); one worker SIGKILLed every 1.5–3 s and started again; both variants side by side in each run.
- with reconcile: ${of('reconcile')
  .map((f) => f.duplicates)
  .join(', ')} duplicate bookings and ${of('reconcile')
  .map((f) => f.lost)
  .join(', ')} jobs lost (runs 1–${o.runs}); blind re-run: ${of('rerun')
  .map((f) => f.duplicates)
  .join(', ')} duplicate bookings, median ${median(of('rerun').map((f) => f.duplicates))}.

${table}
`;
console.log(body);
if (o.write) writeSection('in-doubt-soak', body);
