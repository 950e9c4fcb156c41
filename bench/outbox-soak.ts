// `make soak`'s outbox half: the outbox soak in full (test/ground/outbox-soak.ts;
// make test runs a short form). Per run, 10,000 orders attempted by 4
// producer processes (one in ten rolled back), relayed by 2 relay processes
// (one active, one standing by) and worked by 2 worker processes, while a
// relay or a worker is SIGKILLed every 1.5–3 s and started again; on RabbitMQ
// 4's quorum queue (the ground's chroot; the machine's broker with a classic
// queue when it was never built). Three runs, each shown; --write puts the
// table into bench/RESULTS.md.
//
//   node --import tsx bench/outbox-soak.ts [--orders 10000] [--runs 3] [--rate 400]
//        [--seed 640] [--write]
import { parseArgs } from 'node:util';
import { runOutboxSoak, type OutboxSoakFigures } from '../test/ground/outbox-soak.js';
import { createSchema } from '../test/ground/postgres.js';
import { createVhost } from '../test/ground/rabbit.js';
import { configuredUrls } from '../test/ground/services.js';
import { header, writeSection } from './results.js';
import { groundBroker } from './ground-broker.js';

const { values: o } = parseArgs({
  options: {
    orders: { type: 'string', default: '10000' },
    runs: { type: 'string', default: '3' },
    rate: { type: 'string', default: '400' },
    seed: { type: 'string', default: '640' },
    write: { type: 'boolean', default: false },
  },
});

const urls = configuredUrls();
const broker = await groundBroker('outbox-soak');
const rows: OutboxSoakFigures[] = [];
try {
  for (let run = 1; run <= Number(o.runs); run++) {
    const rabbit = await createVhost(broker.amqpUrl, broker.mgmtUrl);
    const db = await createSchema(urls.pgUrl);
    const app = await createSchema(urls.pgUrl);
    try {
      const f = await runOutboxSoak({
        rabbit,
        db,
        app,
        queueType: broker.queueType,
        orders: Number(o.orders),
        producers: 4,
        relays: 2,
        workers: 2,
        rate: Number(o.rate),
        seed: Number(o.seed) + run,
        timeoutMs: 600_000,
      });
      rows.push(f);
      console.error(`run ${run}: ${JSON.stringify(f)}`);
    } finally {
      await app.cleanup();
      await db.cleanup();
      await rabbit.cleanup();
    }
  }
} finally {
  await broker.stop();
}

const cmd = `make soak (node --import tsx bench/outbox-soak.ts --orders ${o.orders} --runs ${o.runs} --rate ${o.rate} --seed ${o.seed} --write)`;
const table = [
  '| run | committed | rolled back | shipped once | missing | shipped twice | shipped though rolled back | republished rows | copies absorbed by claims | relays killed | workers killed | seconds |',
  '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ...rows.map(
    (f, i) =>
      `| ${i + 1} | ${f.committed} | ${f.rolledBack} | ${f.shippedOnce} | ${f.missing} | ${f.duplicates} | ${f.phantoms} | ${f.republished} | ${f.absorbed} | ${f.relayKills} | ${f.workerKills} | ${f.seconds} |`,
  ),
].join('\n');
const body = `${header('Outbox soak: producers commit orders while relays and workers are SIGKILLed', cmd)}
- broker: ${broker.name}; 4 producer processes (test/fixtures/outbox-producer.ts) at ${o.rate} orders/s together, each order and its job in one transaction, one in ten rolled back; 2 relay processes (one active, one standing by, trying the lock every 500 ms); 2 effect-worker processes in transactional mode (the effect commits with the completion record), prefetch 16, lease 5 s; a relay or a worker SIGKILLed every 1.5–3 s and started again.
- republished rows: rows a relay had in flight when it was killed (noted by the statement that takes a batch), published again by the relay that took over (\`publishes - 1\`, summed over the outbox's rows); a row the dead relay took and had not yet sent counts too. Copies absorbed: deliveries the workers' claims acked as duplicates (those copies, and redeliveries after a worker's death between its completion and its ack).
- runs 1–${o.runs}: committed orders shipped once ${rows.map((f) => `${f.shippedOnce}/${f.committed}`).join(', ')}; missing ${rows.map((f) => f.missing).join(', ')}; shipped twice ${rows.map((f) => f.duplicates).join(', ')}; rolled back yet shipped ${rows.map((f) => f.phantoms).join(', ')}; copies absorbed by claims ${rows.map((f) => f.absorbed).join(', ')}.

${table}
`;
console.log(body);
if (o.write) writeSection('outbox-soak', body);
