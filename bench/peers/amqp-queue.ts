// The RabbitMQ side that raw amqplib and jobfleet share: a fresh vhost per
// run and one durable queue (classic, or quorum with a row's `quorum` option),
// declared as jobfleet's topology declares it and filled with persistent
// messages through jobfleet's own publish() (confirmed), so both consume
// identical bytes.
import amqp from 'amqplib';
import { publish } from '../../worker/index.js';
import { topology } from '../../worker/topology.js';
import { createVhost, type RabbitVhost } from '../../test/ground/rabbit.js';
import { sendAll, type BenchJob, type Producer, type Services } from './system.js';

export const QUEUE = 'bench';
export const JOB_TYPE = 'noop';
export const KEY_RULE = 'bench:{n}';

/** As jobfleet's topology declares its work queue, so a pre-declared queue matches. */
export const queueOptions = (queueType: 'classic' | 'quorum') =>
  topology({
    queue: QUEUE,
    deadLetterQueue: `${QUEUE}.dlq`,
    queueType,
    initialDelaySeconds: 1,
    maxDelaySeconds: 600,
  }).work.options;

const job = (payload: BenchJob) => ({
  type: JOB_TYPE,
  schemaVersion: 1,
  payload,
  keyRule: KEY_RULE,
});

export interface AmqpQueue {
  vhost: RabbitVhost;
  fill(n: number): Promise<void>;
  openProducer(): Promise<Producer>;
}

export async function amqpQueue(
  services: Services,
  queueType: 'classic' | 'quorum' = 'classic',
): Promise<AmqpQueue> {
  const vhost = await createVhost(services.amqpUrl, services.rabbitMgmtUrl);
  const channel = async () => {
    const conn = await amqp.connect(vhost.amqpUrl);
    const ch = await conn.createConfirmChannel();
    await ch.assertQueue(QUEUE, queueOptions(queueType));
    return { conn, ch };
  };
  return {
    vhost,
    fill: async (n) => {
      const { conn, ch } = await channel();
      // 200 unconfirmed at a time: the broker's confirms, not our loop, set the pace.
      await sendAll(n, 200, (i) => publish(ch, QUEUE, job({ n: i, at: 0 })));
      await conn.close();
    },
    openProducer: async () => {
      const { conn, ch } = await channel();
      return {
        send: async (payload) => {
          await publish(ch, QUEUE, job(payload));
        },
        close: () => conn.close(),
      };
    },
  };
}
