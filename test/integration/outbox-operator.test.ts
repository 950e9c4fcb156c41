// The operator sees the outbox (docs/outbox.md): a JobWorker whose queue is
// fed by a producer's outbox (spec.outbox, relay: Producer), on the ground's
// kube-apiserver, RabbitMQ 4 and PostgreSQL. The producer's relay publishes
// under a RabbitMQ user of its own; revoking it (a new password, its
// connections closed) stalls the relay while orders keep committing. Within
// a minute the JobWorker's age, its OutboxDelivering condition and the
// chart's JobfleetOutboxStalled alert (a real Prometheus evaluating the
// chart's rule against the operator's /metrics) say so; once the password is
// back, all three clear and every committed order has shipped once.
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { KubeClient, type KubeObject } from '../../src/kube/client.js';
import type { Operator } from '../../src/operator.js';
import { alertRuleGroups } from '../fixtures/helm.js';
import { testOperator, urlSecrets } from '../fixtures/operator.js';
import { spawnProducer, type ProducerProcess } from '../fixtures/spawn-producer.js';
import { eventually } from '../ground/eventually.js';
import { usePostgres, useKube, type PgSchema } from '../ground/index.js';
import { startPrometheus, type TestPrometheus } from '../ground/prometheus.js';
import { QUEUE, harness, type Harness } from './worker-harness.js';

let h: Harness;
let app: PgSchema;
let ns: Awaited<ReturnType<typeof useKube>>;
let client: KubeClient;
let op: Operator | undefined;
let prom: TestPrometheus | undefined;
let user: string | undefined;
const procs: ChildProcess[] = [];

beforeEach(async () => {
  h = await harness();
  app = await usePostgres();
  ns = await useKube();
  client = new KubeClient(ns.kc);
});
afterEach(async () => {
  for (const p of procs.splice(0))
    if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  await op?.stop();
  op = undefined;
  await prom?.stop();
  prom = undefined;
  if (user) await h.rabbit.mgmt.request('DELETE', `/users/${user}`);
  user = undefined;
  await ns?.cleanup();
  await app?.cleanup();
  await h?.cleanup();
});

async function producer(env: Record<string, string>): Promise<ProducerProcess> {
  const p = await spawnProducer({
    OUTBOX_DB_URL: app.url,
    BROKER_URL: h.rabbit.amqpUrl,
    QUEUE,
    ...env,
  });
  procs.push(p.proc);
  return p;
}

type Jw = KubeObject & { status?: Record<string, any> };
const jobWorker = () =>
  client.get<Jw>('jobfleet.dev/v1alpha1', 'JobWorker', ns.namespace, 'shipper');
const delivering = async () =>
  ((await jobWorker()).status?.conditions ?? []).find(
    (c: { type: string }) => c.type === 'OutboxDelivering',
  ) as { status: string; reason: string; message: string } | undefined;

/** The chart's JobfleetOutboxStalled alerts Prometheus holds now, by state. */
async function stalledAlerts(): Promise<Array<{ state: string; labels: Record<string, string> }>> {
  const body = (await (await fetch(`${prom!.url}/api/v1/alerts`)).json()) as {
    data: { alerts: Array<{ state: string; labels: Record<string, string> }> };
  };
  return body.data.alerts.filter((a) => a.labels.alertname === 'JobfleetOutboxStalled');
}

describe('a stalled outbox relay, seen by the operator', () => {
  it('its broker credentials revoked: age, OutboxDelivering and the alert within a minute; all clear once they are back', async () => {
    user = `relay-${randomBytes(3).toString('hex')}`;
    const v = encodeURIComponent(h.rabbit.vhost);
    await h.rabbit.mgmt.request('PUT', `/users/${user}`, { password: 'pw-1', tags: '' });
    await h.rabbit.mgmt.request('PUT', `/permissions/${v}/${user}`, {
      configure: '',
      write: '.*',
      read: '',
    });
    const relayUrl = new URL(h.rabbit.amqpUrl);
    relayUrl.username = user;
    relayUrl.password = 'pw-1';

    await urlSecrets(client, ns.namespace, {
      rabbitmq: h.rabbit.amqpUrl,
      'rabbitmq-management': h.rabbit.mgmtUrl,
      'claims-db': h.db.url,
      'orders-db': app.url,
    });
    await client.apply(
      {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobWorker',
        metadata: { name: 'shipper', namespace: ns.namespace },
        spec: {
          image: 'registry.example.com/shipping/worker:1.0.0',
          broker: {
            urlSecretRef: { name: 'rabbitmq', key: 'url' },
            managementUrlSecretRef: { name: 'rabbitmq-management', key: 'url' },
            queue: QUEUE,
          },
          claims: { urlSecretRef: { name: 'claims-db', key: 'url' } },
          contract: { idempotencyKey: 'order:{orderId}:ship', schemaVersions: [1, 2] },
          deadLetter: { owner: 'team-shipping' },
          scaling: { minReplicas: 1, maxReplicas: 2, targetOldestAgeSeconds: 300 },
          outbox: {
            urlSecretRef: { name: 'orders-db', key: 'url' },
            relay: 'Producer',
            stalledAfterSeconds: 20,
          },
        },
      },
      'jobfleet-test',
    );
    op = await testOperator(client, ns.namespace);
    prom = await startPrometheus(
      [{ port: op.port, labels: { job: 'jobfleet-operator' } }],
      await alertRuleGroups('alerts.outboxStalled.seconds=15', 'alerts.outboxStalled.for=0s'),
    );
    // The workers: in this process (the ground's pods run no images here).
    await h.startWorker({ handlers: { ship: h.effectHandler() } });
    await producer({ RELAY: '1', BROKER_URL: relayUrl.toString() });
    const orders = await producer({ ORDERS: '100000', RATE: '5' });
    await eventually(
      'OutboxDelivering True',
      async () => ((await delivering())?.status === 'True' ? true : undefined),
      60_000,
    );

    // Revoked: a new password, and the relay's connections closed (a rotation that missed it).
    await h.rabbit.mgmt.request('PUT', `/users/${user}`, { password: 'pw-2', tags: '' });
    const revokedAt = Date.now();
    const conns = await h.rabbit.mgmt.get<Array<{ name: string; user: string }>>('/connections');
    for (const c of conns.filter((x) => x.user === user))
      await h.rabbit.mgmt.request('DELETE', `/connections/${encodeURIComponent(c.name)}`);

    const failing = await eventually(
      'OutboxDelivering False, quoting the refusal',
      async () => {
        const c = await delivering();
        return c?.status === 'False' && c.reason === 'RelayFailing' ? c : undefined;
      },
      60_000,
    );
    const conditionAfterMs = Date.now() - revokedAt;
    expect(failing.message).toMatch(/ACCESS.REFUSED/);
    expect(failing.message).not.toContain('pw-');
    await eventually(
      "the outbox's wait in the JobWorker's age",
      async () => {
        const st = (await jobWorker()).status;
        return st?.oldestMessageAgeSeconds >= 15 && st?.outbox?.unsent > 0 ? true : undefined;
      },
      60_000,
    );
    await eventually(
      'JobfleetOutboxStalled firing',
      async () =>
        (await stalledAlerts()).some(
          (a) => a.state === 'firing' && a.labels.namespace === ns.namespace,
        )
          ? true
          : undefined,
      60_000,
    );
    const alertAfterMs = Date.now() - revokedAt;
    expect(alertAfterMs).toBeLessThan(60_000);

    // Back: the password the relay has.
    await h.rabbit.mgmt.request('PUT', `/users/${user}`, { password: 'pw-1', tags: '' });
    const restoredAt = Date.now();
    await eventually(
      'OutboxDelivering True again, the age back down and the alert resolved',
      async () => {
        const st = (await jobWorker()).status;
        const ok =
          (await delivering())?.status === 'True' &&
          st?.oldestMessageAgeSeconds < 15 &&
          (await stalledAlerts()).length === 0;
        return ok ? true : undefined;
      },
      90_000,
    );

    // what the closing note quotes: how long each took on this run
    console.log(
      JSON.stringify({
        outboxStall: { conditionAfterMs, alertAfterMs, clearedAfterMs: Date.now() - restoredAt },
      }),
    );

    // Nothing was lost while it waited: every committed order shipped, once.
    orders.proc.kill('SIGKILL');
    await orders.exited;
    const committed = (await app.pool.query<{ id: string }>('select id from orders')).rows.length;
    expect(committed).toBeGreaterThan(100);
    await eventually(
      'every committed order shipped',
      async () =>
        (await h.db.pool.query('select distinct key from effects')).rowCount === committed
          ? true
          : undefined,
      60_000,
    );
    const twice = await h.db.pool.query('select key from effects group by key having count(*) > 1');
    expect(twice.rows).toEqual([]);
  }, 360_000);
});
