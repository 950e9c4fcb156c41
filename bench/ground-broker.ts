// The broker a soak or a benchmark runs on: a RabbitMQ 4 node of its own from the ground's
// chroot (quorum queues, the default), or the machine's RabbitMQ with a
// classic queue when the chroot was never built.
import { freePort } from '../test/ground/control-plane.js';
import { rabbitmq4Root, startRabbitNode } from '../test/ground/rabbitmq-node.js';
import { configuredUrls } from '../test/ground/services.js';

export interface GroundBroker {
  amqpUrl: string;
  mgmtUrl: string;
  name: string;
  queueType: 'classic' | 'quorum';
  stop(): Promise<void>;
}

export async function groundBroker(name: string): Promise<GroundBroker> {
  const urls = configuredUrls();
  const root = rabbitmq4Root();
  if (!root)
    return {
      amqpUrl: urls.amqpUrl,
      mgmtUrl: urls.rabbitMgmtUrl,
      name: "the machine's RabbitMQ, classic queue",
      queueType: 'classic',
      stop: () => Promise.resolve(),
    };
  const node = await startRabbitNode({
    root,
    name: `${name}-${process.pid}`,
    amqpPort: await freePort(),
    mgmtPort: await freePort(),
    distPort: await freePort(),
    epmdPort: await freePort(),
    reapWith: process.pid,
  });
  return {
    amqpUrl: node.amqpUrl,
    mgmtUrl: node.mgmtUrl,
    name: `RabbitMQ ${node.version}, quorum queue`,
    queueType: 'quorum',
    stop: () => node.stop(),
  };
}
