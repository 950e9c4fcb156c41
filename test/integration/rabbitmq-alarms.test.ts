// A broker resource alarm, named: RabbitMQ blocks publishing connections
// while a memory (or disk) alarm lasts, so a worker's retry copies and dead
// letters wait. The worker says BrokerResourceAlarm on /readyz with the fix,
// holds what it cannot settle, and carries on once the alarm clears. On a
// RabbitMQ 4 node of its own (an alarm is broker-wide: the shared test broker
// must not have one). RabbitMQ 4 only (the integration-rabbitmq4 project).
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWorker, type DeliveryResult } from '../../worker/index.js';
import type { Readiness } from '../../worker/readiness.js';
import { freePort } from '../ground/control-plane.js';
import { eventually } from '../ground/eventually.js';
import { usePostgres, type PgSchema } from '../ground/index.js';
import { rabbitmq4Root, startRabbitNode, type RabbitNode } from '../ground/rabbitmq-node.js';
import amqp from 'amqplib';
import { publish } from '../../worker/index.js';
import { CONTRACT } from './worker-harness.js';

let node: RabbitNode;
let db: PgSchema;
beforeAll(async () => {
  const root = rabbitmq4Root();
  if (!root) throw new Error('RabbitMQ 4 is not built: run `make rabbitmq4`');
  node = await startRabbitNode({
    root,
    name: `alarms-${process.pid}`,
    amqpPort: await freePort(),
    mgmtPort: await freePort(),
    distPort: await freePort(),
    epmdPort: await freePort(),
    reapWith: process.pid,
  });
  db = await usePostgres();
}, 120_000);
afterAll(async () => {
  await node?.stop();
  await node?.removeData();
  await db?.cleanup();
});

describe('a memory alarm on the broker', () => {
  it('the worker reports BrokerResourceAlarm with the fix while its publishes are blocked, then completes the job', async () => {
    const outcomes: DeliveryResult[] = [];
    let runs = 0;
    let release!: () => void;
    const alarmRaised = new Promise<void>((r) => (release = r));
    const w = createWorker({
      contract: CONTRACT,
      handlers: {
        ship: async () => {
          // the first run fails once the alarm is up: its retry copy is a publish the alarm blocks
          if (++runs === 1) {
            await alarmRaised;
            throw new Error('downstream reset');
          }
          return { ok: true };
        },
      },
      logger: pino({ level: 'silent' }),
      handleSignals: false,
      onOutcome: (r) => outcomes.push(r),
      config: {
        queue: 'alarm.q',
        queueType: 'quorum',
        brokerUrl: node.amqpUrl,
        claimsUrl: db.url,
        metricsPort: 0,
        initialDelaySeconds: 1,
        maxDelaySeconds: 4,
      },
    });
    await w.start();
    try {
      const conn = await amqp.connect(node.amqpUrl);
      const ch = await conn.createConfirmChannel();
      await publish(ch, 'alarm.q', {
        type: 'ship',
        schemaVersion: 1,
        payload: { orderId: 'a-1' },
        keyRule: CONTRACT.keyRule,
      });
      await conn.close();
      // Each step has a bound of its own, together under the test's: a slow step names itself.
      await eventually(
        'the first run to start',
        () => Promise.resolve(runs === 1 || undefined),
        30_000,
      );
      await node.ctl('rabbitmqctl', 'set_vm_memory_high_watermark', 'absolute', '1');
      release();
      const readyz = () =>
        fetch(`http://127.0.0.1:${w.port}/readyz`).then((r) => r.json() as Promise<Readiness>);
      const said = await eventually(
        'BrokerResourceAlarm on /readyz',
        async () => {
          const r = await readyz();
          return !r.ready && r.reason === 'BrokerResourceAlarm' ? r : undefined;
        },
        30_000,
      );
      expect(said).toMatchObject({ fix: expect.stringContaining('rabbitmq-diagnostics alarms') });
      expect(outcomes).toEqual([]); // the retry copy waits: nothing acked
      await node.ctl('rabbitmqctl', 'set_vm_memory_high_watermark', '0.4');
      await eventually(
        'the job completed after the alarm',
        () => Promise.resolve(outcomes.includes('completed') ? true : undefined),
        30_000,
      );
      expect(outcomes).toEqual(['retried', 'completed']);
      await eventually(
        'ready again',
        async () => ((await readyz()).ready ? true : undefined),
        30_000,
      );
    } finally {
      await w.stop({ deadlineMs: 1000 });
    }
  }, 150_000);
});
