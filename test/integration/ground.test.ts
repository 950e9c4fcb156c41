// The test ground itself: every later suite relies on these facts about the
// real services, so they are asserted here once, plainly.
import * as k8s from '@kubernetes/client-node';
import amqp from 'amqplib';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { eventually } from '../ground/eventually.js';
import {
  useKube,
  usePostgres,
  useRabbit,
  type PgSchema,
  type RabbitVhost,
  type TestNamespace,
} from '../ground/index.js';

describe('RabbitMQ', () => {
  let rabbit: RabbitVhost;
  beforeAll(async () => {
    rabbit = await useRabbit();
  });
  afterAll(async () => {
    await rabbit?.cleanup();
  });

  it('publishes with confirms and consumes in an isolated vhost; the management API sees the queue', async () => {
    const conn = await amqp.connect(rabbit.amqpUrl);
    try {
      const ch = await conn.createConfirmChannel();
      await ch.assertQueue('ground.q', { durable: true });
      const timestamp = Math.floor(Date.now() / 1000) - 42;
      ch.sendToQueue('ground.q', Buffer.from('{"hello":"world"}'), {
        persistent: true,
        timestamp,
        messageId: 'm-1',
      });
      await ch.waitForConfirms();

      // The management API reports the oldest message's publisher timestamp
      // on classic queues: the signal that age-based scaling reads.
      const q = await eventually('queue stats', async () => {
        const s = await rabbit.mgmt.get<{ messages?: number; head_message_timestamp?: number }>(
          `/queues/${encodeURIComponent(rabbit.vhost)}/ground.q`,
        );
        return s.messages === 1 && s.head_message_timestamp ? s : undefined;
      });
      expect(q.head_message_timestamp).toBe(timestamp);

      const msg = await ch.get('ground.q', { noAck: false });
      expect(msg && msg.content.toString()).toBe('{"hello":"world"}');
      expect(msg && msg.properties.messageId).toBe('m-1');
      if (msg) ch.ack(msg);
      await ch.close();
    } finally {
      await conn.close();
    }
    const vhosts = await rabbit.mgmt.get<Array<{ name: string }>>('/vhosts');
    expect(vhosts.map((v) => v.name)).toContain(rabbit.vhost);
  });
});

describe('PostgreSQL', () => {
  let db: PgSchema;
  beforeAll(async () => {
    db = await usePostgres();
  });

  it('writes and reads in an isolated schema that cleanup drops', async () => {
    await db.pool.query('create table claims (key text primary key, state text not null)');
    await db.pool.query(`insert into claims values ('k1', 'completed')`);
    const { rows } = await db.pool.query<{ state: string }>(
      `select state from ${db.schema}.claims where key = 'k1'`,
    );
    expect(rows).toEqual([{ state: 'completed' }]);

    await db.cleanup();
    const admin = new pg.Client({ connectionString: inject('ground').pgUrl });
    await admin.connect();
    try {
      const r = await admin.query(
        'select 1 from information_schema.schemata where schema_name = $1',
        [db.schema],
      );
      expect(r.rowCount).toBe(0);
    } finally {
      await admin.end();
    }
  });
});

describe('Kubernetes control plane', () => {
  let ns: TestNamespace & { runsWorkloads: boolean };
  beforeAll(async () => {
    ns = await useKube();
  });
  afterAll(async () => {
    await ns?.cleanup();
  });

  it('creates a Deployment through the real kube-apiserver, which becomes Pods that turn Ready', async () => {
    const apps = ns.kc.makeApiClient(k8s.AppsV1Api);
    const core = ns.kc.makeApiClient(k8s.CoreV1Api);
    const labels = { app: 'ground' };
    await apps.createNamespacedDeployment({
      namespace: ns.namespace,
      body: {
        metadata: { name: 'ground' },
        spec: {
          replicas: 2,
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: { containers: [{ name: 'main', image: 'registry.example/worker:1' }] },
          },
        },
      },
    });
    const created = await apps.readNamespacedDeployment({
      name: 'ground',
      namespace: ns.namespace,
    });
    expect(created.metadata?.uid).toBeTruthy();
    expect(ns.runsWorkloads).toBe(true);

    const ready = await eventually('2 ready replicas', async () => {
      const d = await apps.readNamespacedDeployment({ name: 'ground', namespace: ns.namespace });
      return d.status?.readyReplicas === 2 ? d : undefined;
    });
    expect(ready.status?.replicas).toBe(2);
    const pods = await core.listNamespacedPod({
      namespace: ns.namespace,
      labelSelector: 'app=ground',
    });
    expect(pods.items.map((p) => p.status?.phase)).toEqual(['Running', 'Running']);
  });

  it('validates server-side: an invalid object is rejected with the field named', async () => {
    const apps = ns.kc.makeApiClient(k8s.AppsV1Api);
    const err = await apps
      .createNamespacedDeployment({
        namespace: ns.namespace,
        body: {
          metadata: { name: 'Bad_Name' },
          spec: {
            selector: { matchLabels: { a: 'b' } },
            template: { metadata: { labels: { a: 'b' } }, spec: { containers: [] } },
          },
        },
      })
      .then(
        () => undefined,
        (e: unknown) => e as k8s.ApiException<string>,
      );
    expect(err?.code).toBe(422);
    expect(String(err?.body)).toContain('metadata.name');
    expect(String(err?.body)).toContain('spec.template.spec.containers');
  });
});
