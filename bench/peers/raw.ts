// Raw amqplib: consume + ack of the same persistent messages jobfleet gets,
// with nothing in between but decoding the body. The ceiling for any
// RabbitMQ consumer on this machine, jobfleet's included.
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import { amqpQueue, QUEUE } from './amqp-queue.js';
import { installedVersion, type BenchJob, type System } from './system.js';

export const system: System = {
  id: 'raw',
  label: 'raw amqplib',
  version: installedVersion('amqplib'),
  settings: 'consume + ack, prefetch 64, the body JSON-decoded; the same messages jobfleet gets',
  usesPostgres: false,
  prepare: async (services) => {
    const q = await amqpQueue(services, services.queueType);
    return {
      target: { amqpUrl: q.vhost.amqpUrl },
      fill: (n) => q.fill(n),
      openProducer: () => q.openProducer(),
      cleanup: () => q.vhost.cleanup(),
    };
  },
  consumer: (target, options, hooks) => {
    let conn: ChannelModel | undefined;
    let ch: Channel | undefined;
    return {
      open: async () => {
        conn = await amqp.connect(target.amqpUrl as string);
        ch = await conn.createChannel();
        await ch.prefetch(options.prefetch ?? 64);
      },
      start: async () => {
        const channel = ch as Channel;
        await channel.consume(QUEUE, (m) => {
          if (!m) return;
          // Every other system hands its handler a decoded job; so does this one.
          const body = JSON.parse(m.content.toString()) as { payload: BenchJob };
          hooks.started(body.payload);
          channel.ack(m);
          hooks.finished();
        });
      },
      settle: () => hooks.allFinished(),
      close: async () => {
        await conn?.close();
      },
    };
  },
};
