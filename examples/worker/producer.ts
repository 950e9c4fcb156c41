// An example producer: publishes N order.ship jobs (confirmed) to a queue.
//   node --import tsx examples/worker/producer.ts --queue orders.ship --count 500 [--rate 200] [--bad 3]
// --bad N makes N of them bad orders (a negative quantity): the example worker
// refuses them for good, so they go to the dead-letter quarantine.
// Broker URL from JOBFLEET_BROKER_URL (default amqp://guest:guest@127.0.0.1:5672).
import { parseArgs } from 'node:util';
import amqp from 'amqplib';
import { publish } from '../../worker/index.js';

export async function produce(opts: {
  brokerUrl: string;
  queue: string;
  count: number;
  ratePerSecond?: number;
  prefix?: string;
  /** how many of the count are bad orders, spread through it */
  bad?: number;
}): Promise<number> {
  const every = opts.bad ? Math.floor(opts.count / opts.bad) : 0;
  const conn = await amqp.connect(opts.brokerUrl);
  try {
    const ch = await conn.createConfirmChannel();
    const batch = 50;
    for (let n = 0; n < opts.count; n += batch) {
      const started = Date.now();
      const jobs = [];
      for (let i = n; i < Math.min(opts.count, n + batch); i++)
        jobs.push(
          publish(ch, opts.queue, {
            type: 'order.ship',
            schemaVersion: 2,
            payload: {
              orderId: `${opts.prefix ?? 'o'}-${i}`,
              ...(every && i % every === every - 1 && i < every * opts.bad! ? { qty: -1 } : {}),
            },
            keyRule: 'order:{orderId}:ship',
          }),
        );
      await Promise.all(jobs);
      if (opts.ratePerSecond) {
        const due = (batch / opts.ratePerSecond) * 1000;
        await new Promise((r) => setTimeout(r, Math.max(0, due - (Date.now() - started))));
      }
    }
    return opts.count;
  } finally {
    await conn.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({
    options: {
      queue: { type: 'string', default: 'orders.ship' },
      count: { type: 'string', default: '100' },
      rate: { type: 'string' },
      bad: { type: 'string', default: '0' },
    },
  });
  const n = await produce({
    brokerUrl: process.env.JOBFLEET_BROKER_URL ?? 'amqp://guest:guest@127.0.0.1:5672',
    queue: values.queue,
    count: Number(values.count),
    ratePerSecond: values.rate ? Number(values.rate) : undefined,
    bad: Number(values.bad),
  });
  const bad = Number(values.bad) ? ` (${values.bad} of them bad orders)` : '';
  console.log(`published ${n} jobs to ${values.queue}${bad}`);
}
