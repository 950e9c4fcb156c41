// The worker's broker-facing pure parts: a cluster's URL list, the queues and
// arguments it declares per queue type and broker version, and how it names
// what RabbitMQ refuses.
import { describe, expect, it } from 'vitest';
import { brokerUrls, connectAny } from '../../worker/broker-urls.js';
import { loadConfig } from '../../worker/config.js';
import { queueRefusal } from '../../worker/readiness.js';
import { DELIVERY_LIMIT, topology } from '../../worker/topology.js';
import { vhostOf } from '../../src/signals/rabbitmq.js';

const base = {
  queue: 'orders.ship',
  deadLetterQueue: 'orders.ship.dlq',
  initialDelaySeconds: 1,
  maxDelaySeconds: 4,
};

describe("a cluster's broker URLs", () => {
  const list = 'amqp://u:p@a:5672/shop, amqp://u:p@b:5672/shop,amqp://u:p@c:5672/shop';

  it('splits a comma-separated list; the config takes it and names a bad member', () => {
    expect(brokerUrls(list)).toEqual([
      'amqp://u:p@a:5672/shop',
      'amqp://u:p@b:5672/shop',
      'amqp://u:p@c:5672/shop',
    ]);
    const env = { JOBFLEET_QUEUE: 'q', JOBFLEET_CLAIMS_URL: 'postgres://x/y' };
    expect(loadConfig({}, { ...env, JOBFLEET_BROKER_URL: list }).brokerUrl).toBe(list);
    expect(() =>
      loadConfig({}, { ...env, JOBFLEET_BROKER_URL: 'amqp://a:5672,http://b:15672' }),
    ).toThrow(/JOBFLEET_BROKER_URL .*several separated by commas/);
  });

  it('connects to the first that answers, else says the last error', async () => {
    const tried: string[] = [];
    const conn = await connectAny(list, (url) => {
      tried.push(url);
      return url.includes('@c:') ? Promise.resolve(url) : Promise.reject(new Error(`down: ${url}`));
    });
    expect(conn).toBe('amqp://u:p@c:5672/shop');
    expect(tried).toHaveLength(3);
    await expect(
      connectAny('amqp://a', () => Promise.reject(new Error('refused'))),
    ).rejects.toThrow('refused');
  });

  it("the operator reads the vhost from the list's first URL", () => {
    expect(vhostOf(list)).toBe('shop');
    expect(vhostOf('amqp://u:p@a:5672')).toBe('/');
  });
});

describe('the topology a worker declares', () => {
  it('quorum: the work queue has a delivery limit whose dead letters go to <queue>.delivery-limit, at least once', () => {
    const t = topology({ ...base, queueType: 'quorum', brokerMajor: 4 });
    expect(t.work.options.arguments).toEqual({
      'x-queue-type': 'quorum',
      'x-delivery-limit': DELIVERY_LIMIT,
      'x-dead-letter-exchange': '',
      'x-dead-letter-routing-key': 'orders.ship.delivery-limit',
      'x-dead-letter-strategy': 'at-least-once',
      'x-overflow': 'reject-publish',
    });
    expect(t.overLimit?.name).toBe('orders.ship.delivery-limit');
    // RabbitMQ 4: -1 is "no limit", so the quarantine never drops what it keeps
    expect(t.deadLetter.options.arguments).toEqual({
      'x-queue-type': 'quorum',
      'x-delivery-limit': -1,
    });
    for (const tier of t.tiers.values())
      expect(tier.options.arguments).toMatchObject({
        'x-queue-type': 'quorum',
        'x-dead-letter-routing-key': 'orders.ship',
        'x-dead-letter-strategy': 'at-least-once',
      });
  });

  it('quorum on RabbitMQ 3.x: no -1 (it would drop a message at its first return there)', () => {
    const t = topology({ ...base, queueType: 'quorum', brokerMajor: 3 });
    expect(t.deadLetter.options.arguments).toEqual({ 'x-queue-type': 'quorum' });
    expect(t.overLimit?.options.arguments).toEqual({ 'x-queue-type': 'quorum' });
    expect(t.work.options.arguments['x-delivery-limit']).toBe(DELIVERY_LIMIT);
  });

  it('classic: no delivery limit and no delivery-limit queue (classic queues count no returns)', () => {
    const t = topology({ ...base, queueType: 'classic', brokerMajor: 4 });
    expect(t.work.options.arguments).toEqual({ 'x-queue-type': 'classic' });
    expect(t.deadLetter.options.arguments).toEqual({ 'x-queue-type': 'classic' });
    expect(t.overLimit).toBeUndefined();
  });
});

describe('what RabbitMQ refuses, named', () => {
  it('PRECONDITION_FAILED: the argument that differs and both values', () => {
    const r = queueRefusal(
      new Error(
        `Operation failed: QueueDeclare; 406 (PRECONDITION-FAILED) with message "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'orders.ship' in vhost '/': received 'quorum' but current is 'classic'"`,
      ),
      'orders.ship',
      'declare',
    );
    expect(r?.problem.reason).toBe('QueueArgumentsDiffer');
    expect(r?.message).toBe(
      `queue "orders.ship" exists with a different x-queue-type (received 'quorum' but current is 'classic')`,
    );
    expect(r?.problem.fix).toMatch(/spec\.broker\.queue\b/);
    // a type that differs (a default that changed under a worker that never set it): keep it
    expect(r?.problem.fix).toContain('set spec.broker.queueType (JOBFLEET_QUEUE_TYPE) to classic');
  });

  it('ACCESS_REFUSED: the queue, the permissions the operation needs, and RabbitMQ’s words', () => {
    const r = queueRefusal(
      new Error(
        `Operation failed: BasicConsume; 403 (ACCESS-REFUSED) with message "ACCESS_REFUSED - access to queue 'orders.ship' in vhost 'shop' refused for user 'w'"`,
      ),
      'orders.ship',
      'consume',
    );
    expect(r?.problem.reason).toBe('BrokerPermissionRefused');
    expect(r?.message).toBe(
      `RabbitMQ refused to consume queue "orders.ship" (access to queue 'orders.ship' in vhost 'shop' refused for user 'w')`,
    );
    expect(r?.problem.fix).toMatch(/read permission on queue "orders.ship"/);
  });

  it('anything else is not a refusal (the connection dropped: retried)', () => {
    expect(queueRefusal(new Error('Socket closed abruptly'), 'q', 'declare')).toBeUndefined();
  });
});
