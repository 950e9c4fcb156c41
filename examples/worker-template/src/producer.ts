// Publishes jobs for the worker: `npm run produce -- 10` sends ten.
// JOBFLEET_BROKER_URL and JOBFLEET_QUEUE as for the worker.
import amqp from 'amqplib';
import { publish } from '@jobfleet/worker';

const count = Number(process.argv[2] ?? 1);
const brokerUrl = process.env.JOBFLEET_BROKER_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const queue = process.env.JOBFLEET_QUEUE ?? 'orders.ship';

const conn = await amqp.connect(brokerUrl);
try {
  const ch = await conn.createConfirmChannel();
  for (let i = 0; i < count; i++)
    await publish(ch, queue, {
      type: 'order.ship',
      schemaVersion: 2,
      payload: { orderId: `order-${Date.now()}-${i}` },
      keyRule: 'order:{orderId}:ship', // the worker's contract: producers render the same key
    });
  console.log(`published ${count} to ${queue}`);
} finally {
  await conn.close();
}
