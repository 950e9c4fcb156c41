// Scaling on queue age with the real RabbitMQ management API, the real
// apiserver and the operator: a backlog raises the Deployment's replicas up
// to the downstream cap, an emptied queue lowers them at once, an unreadable
// signal holds them, and the per-replica capacity comes from real workers'
// own figures.
import * as k8s from '@kubernetes/client-node';
import amqp from 'amqplib';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { KubeClient, resourcePath, type KubeObject } from '../../src/kube/client.js';
import { startOperator, type Operator } from '../../src/operator.js';
import { publish } from '../../worker/index.js';
import { eventually } from '../ground/eventually.js';
import { createEffectsTable, spawnEffectWorker } from '../fixtures/spawn-effect-worker.js';
import { freePort } from '../ground/control-plane.js';
import { startPrometheus } from '../ground/prometheus.js';
import { useKube, usePostgres, useRabbit, type RabbitVhost } from '../ground/index.js';
import { prng } from '../ground/prng.js';

let ns: Awaited<ReturnType<typeof useKube>>;
let rabbit: RabbitVhost;
let client: KubeClient;
let op: Operator | undefined;

beforeEach(async () => {
  [ns, rabbit] = await Promise.all([useKube(), useRabbit()]);
  client = new KubeClient(ns.kc);
  op = await startOperator({
    client,
    namespaces: [ns.namespace],
    identity: 'scaling-test',
    lease: { namespace: ns.namespace, name: 'jobfleet-operator' },
    port: 0,
    pollMs: 1000,
    secretTtlMs: 500,
    log: pino({ level: process.env.JOBFLEET_TEST_LOG ?? 'silent' }),
  });
});
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
  await op?.stop();
  await Promise.all([ns?.cleanup(), rabbit?.cleanup()]);
});

async function secrets(mgmtUrl = rabbit.mgmtUrl): Promise<void> {
  await client.apply(
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'rabbitmq', namespace: ns.namespace },
      stringData: { url: rabbit.amqpUrl, 'management-url': mgmtUrl },
    },
    'test',
  );
  await client.apply(
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'claims-db', namespace: ns.namespace },
      stringData: { url: 'postgres://x@db/claims' },
    },
    'test',
  );
}

function jobWorker(
  queue: string,
  scaling: Record<string, unknown>,
  {
    prefetch = 8,
    idempotencyKey = 'mail:{id}',
    queueType = 'classic',
  }: { prefetch?: number; idempotencyKey?: string; queueType?: 'classic' | 'quorum' } = {},
) {
  return client.apply(
    {
      apiVersion: 'jobfleet.dev/v1alpha1',
      kind: 'JobWorker',
      metadata: { name: 'mailer', namespace: ns.namespace },
      spec: {
        image: 'registry.example.com/mailer:1',
        broker: {
          urlSecretRef: { name: 'rabbitmq', key: 'url' },
          managementUrlSecretRef: { name: 'rabbitmq', key: 'management-url' },
          queue,
          queueType,
          prefetch,
        },
        claims: { urlSecretRef: { name: 'claims-db', key: 'url' } },
        contract: { idempotencyKey, schemaVersions: [1] },
        deadLetter: { owner: 'team-mail' },
        scaling,
      },
    },
    'test-user',
  );
}

/** A backlog whose oldest message was published `ageSeconds` ago. */
async function backlog(
  queue: string,
  n: number,
  ageSeconds: number,
  queueType: 'classic' | 'quorum' = 'classic',
): Promise<void> {
  const conn = await amqp.connect(rabbit.amqpUrl);
  const ch = await conn.createConfirmChannel();
  await ch.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': queueType } });
  const then = Date.now() - ageSeconds * 1000;
  for (let i = 0; i < n; i++)
    await publish(
      ch,
      queue,
      { type: 'send', schemaVersion: 1, payload: { id: `m${i}` }, keyRule: 'mail:{id}' },
      () => then + i,
    );
  await conn.close();
}

const replicas = async () =>
  (
    await client.find<KubeObject & { spec: { replicas: number } }>(
      'apps/v1',
      'Deployment',
      ns.namespace,
      'mailer',
    )
  )?.spec.replicas ?? -1;
/** Waits for ScalingActive=False (a signal could not be read) and returns the JobWorker. */
const scalingInactive = () =>
  eventually(
    'ScalingActive=False',
    async () => {
      const x = await jw();
      return x.status?.conditions?.find((c: any) => c.type === 'ScalingActive')?.status === 'False'
        ? x
        : undefined;
    },
    30_000,
  );

const jw = () =>
  client.get<KubeObject & { status?: any }>(
    'jobfleet.dev/v1alpha1',
    'JobWorker',
    ns.namespace,
    'mailer',
  );

/** Two worker processes on `queue`, and a real Prometheus scraping them with the labels the chart's PodMonitor adds. */
async function scrapedWorkers(queue: string, dbUrl: string, env: Record<string, string>) {
  const workers = await Promise.all(
    [1, 2].map(() =>
      spawnEffectWorker({
        JOBFLEET_QUEUE: queue,
        JOBFLEET_QUEUE_TYPE: 'classic', // the tests declare classic queues: a head timestamp to compare with
        JOBFLEET_BROKER_URL: rabbit.amqpUrl,
        JOBFLEET_CLAIMS_URL: dbUrl,
        ...env,
      }),
    ),
  );
  const prom = await startPrometheus(
    workers.map((w) => ({
      port: w.port,
      labels: { namespace: ns.namespace, jobworker: 'mailer' },
    })),
  );
  return { workers, prom };
}

describe('scaling on the age of the oldest message', () => {
  it('a backlog raises replicas fast, up to the downstream cap; an emptied queue lowers them at once', async () => {
    await secrets();
    await backlog('mail.send', 200, 40);
    await jobWorker('mail.send', {
      minReplicas: 1,
      maxReplicas: 20,
      targetOldestAgeSeconds: 10,
      scaleDownStabilizationSeconds: 600,
      downstream: { maxConcurrency: 48 },
    });

    const capped = await eventually(
      'replicas at the downstream cap',
      async () => {
        const j = await jw();
        return (await replicas()) === 6 && j.status?.scaling?.limitedBy === 'downstream'
          ? j
          : undefined;
      },
      60_000,
    );
    expect(capped.status.scaling.message).toMatch(
      /^Capped by downstream capacity 48 \/ prefetch 8 = 6 replicas; oldest message \d+ s > 10 s objective\.$/,
    );
    expect(capped.status).toMatchObject({
      ageSource: 'HeadTimestamp',
      queueDepth: 200,
      desiredReplicas: 6,
    });
    expect(capped.status.oldestMessageAgeSeconds).toBeGreaterThanOrEqual(40);
    expect(capped.status.conditions.find((c: any) => c.type === 'ScalingActive')).toMatchObject({
      status: 'True',
    });
    expect(capped.status.conditions.find((c: any) => c.type === 'AgeObjectiveMet')).toMatchObject({
      status: 'False',
      reason: 'OverObjective',
    });
    // The scale-up is announced: as ScaledUp, or, when the backlog was already there at the
    // first reconcile, by the DeploymentCreated event that starts it at the cap (events follow
    // the status write that carries the change).
    await eventually('the scale-up announced', async () => {
      const events = await client.list<KubeObject & { reason: string; message: string }>(
        'v1',
        'Event',
        ns.namespace,
      );
      return events.items.some(
        (e) =>
          e.reason === 'ScaledUp' ||
          (e.reason === 'DeploymentCreated' &&
            /with 6 replicas\. Capped by downstream/.test(e.message)),
      )
        ? true
        : undefined;
    });
    const metrics = await (await fetch(`http://127.0.0.1:${op!.port}/metrics`)).text();
    expect(metrics).toMatch(
      new RegExp(`jobfleet_desired_replicas\\{namespace="${ns.namespace}",jobworker="mailer"\\} 6`),
    );

    // Real workers drain the backlog; once the queue reads empty the burst is over, and the fleet
    // goes to what the arrivals need (none: the minimum) without waiting out a window.
    const db = await usePostgres();
    await createEffectsTable(db.pool);
    const worker = await spawnEffectWorker({
      JOBFLEET_QUEUE: 'mail.send',
      JOBFLEET_QUEUE_TYPE: 'classic',
      JOBFLEET_BROKER_URL: rabbit.amqpUrl,
      JOBFLEET_CLAIMS_URL: db.url,
      JOBFLEET_TEST_TYPE: 'send',
      JOBFLEET_TEST_KEY_RULE: 'mail:{id}',
    });
    cleanups.push(async () => {
      worker.proc.kill('SIGKILL');
      await db.cleanup();
    });
    await eventually(
      'the backlog consumed',
      async () => {
        const n = await db.pool.query<{ n: number }>('select count(*)::int as n from effects');
        return n.rows[0]!.n === 200 ? true : undefined;
      },
      60_000,
    );
    await eventually(
      'back to minReplicas',
      async () => ((await replicas()) === 1 ? true : undefined),
      60_000,
    );
    // The event follows the status write, which follows the Deployment's apply.
    await eventually('a ScaledDown event', async () =>
      (await client.list<KubeObject & { reason: string }>('v1', 'Event', ns.namespace)).items.some(
        (e) => e.reason === 'ScaledDown',
      )
        ? true
        : undefined,
    );
  }, 120_000);

  it('an unreadable signal holds the replicas and says which signal is missing', async () => {
    await secrets();
    await backlog('mail.hold', 50, 30);
    await jobWorker('mail.hold', {
      minReplicas: 1,
      maxReplicas: 20,
      targetOldestAgeSeconds: 10,
      scaleDownStabilizationSeconds: 1,
    });
    await eventually('scaled up', async () => ((await replicas()) > 1 ? true : undefined), 60_000);

    await secrets('http://guest:wrong@127.0.0.1:15672'); // wrong credentials
    const j = await scalingInactive();
    expect(j.status.scaling.limitedBy).toBe('signalMissing');
    expect(j.status.scaling.message).toMatch(/refused the credentials/);
    expect(JSON.stringify(j.status)).not.toContain('wrong'); // no secret in status
    const before = await replicas();
    await rabbit.mgmt.request(
      'DELETE',
      `/queues/${encodeURIComponent(rabbit.vhost)}/mail.hold/contents`,
    );
    await new Promise((r) => setTimeout(r, 4000)); // several polls, past the 1 s window
    expect(await replicas()).toBe(before);
  }, 120_000);

  it('quorum queues: the age is estimated and status says so', async () => {
    await secrets();
    await backlog('mail.quorum', 100, 0, 'quorum');
    await jobWorker(
      'mail.quorum',
      { minReplicas: 1, maxReplicas: 5, targetOldestAgeSeconds: 10 },
      { queueType: 'quorum' },
    );
    const j = await eventually(
      'an estimated age',
      async () => {
        const x = await jw();
        return x.status?.ageSource === 'Estimated' && x.status.queueDepth === 100 ? x : undefined;
      },
      30_000,
    );
    expect(j.status.scaling.limitedBy).toBeDefined();
    expect(j.status.oldestMessageAgeSeconds).toBeGreaterThanOrEqual(0);
  });
});

describe('a Deployment write the apiserver refuses', () => {
  it('is not announced: no ScaledUp event for replicas that were never written, while status keeps what the scaler wants', async () => {
    await secrets();
    await backlog('mail.refused', 0, 0);
    await jobWorker('mail.refused', { minReplicas: 1, maxReplicas: 6, targetOldestAgeSeconds: 10 });
    await eventually('the Deployment at 1 replica', async () =>
      (await replicas()) === 1 ? true : undefined,
    );
    // An admission policy (as a platform team might set one) refuses more than one replica here.
    const adm = ns.kc.makeApiClient(k8s.AdmissionregistrationV1Api);
    const name = `jf-one-replica-${ns.namespace}`;
    await adm.createValidatingAdmissionPolicy({
      body: {
        metadata: { name },
        spec: {
          failurePolicy: 'Fail',
          matchConstraints: {
            resourceRules: [
              {
                apiGroups: ['apps'],
                apiVersions: ['v1'],
                operations: ['CREATE', 'UPDATE'],
                resources: ['deployments'],
              },
            ],
          },
          validations: [
            { expression: 'object.spec.replicas <= 1', message: 'one replica in this namespace' },
          ],
        },
      },
    });
    cleanups.push(async () => {
      await adm.deleteValidatingAdmissionPolicyBinding({ name }).catch(() => undefined);
      await adm.deleteValidatingAdmissionPolicy({ name }).catch(() => undefined);
    });
    await adm.createValidatingAdmissionPolicyBinding({
      body: {
        metadata: { name },
        spec: {
          policyName: name,
          validationActions: ['Deny'],
          matchResources: {
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns.namespace } },
          },
        },
      },
    });
    await eventually('the policy in force', async () =>
      client
        .request(
          'PATCH',
          `${resourcePath('apps/v1', 'Deployment', ns.namespace, 'mailer')}?dryRun=All`,
          { spec: { replicas: 2 } },
          'application/merge-patch+json',
        )
        .then(
          () => undefined,
          () => true,
        ),
    );
    // A late backlog: the scaler wants more replicas than the policy lets the Deployment have.
    await backlog('mail.refused', 200, 40);
    const wanting = await eventually(
      'the scaler wanting more than one replica',
      async () => {
        const j = await jw();
        return (j.status?.desiredReplicas ?? 0) > 1 ? j : undefined;
      },
      30_000,
    );
    expect(wanting.status.conditions.find((c: any) => c.type === 'AgeObjectiveMet')).toMatchObject({
      status: 'False',
    });
    // Three reconciles refused by the apiserver later, still nothing announced.
    await eventually(
      'three refused reconciles',
      async () => {
        const text = await (await fetch(`http://127.0.0.1:${op!.port}/metrics`)).text();
        const errors = new RegExp(
          `jobfleet_reconcile_errors_total\\{[^}]*jobworker="mailer"[^}]*\\} (\\d+)`,
        ).exec(text);
        return Number(errors?.[1] ?? 0) >= 3 ? true : undefined;
      },
      60_000,
    );
    expect(await replicas()).toBe(1);
    const events = await client.list<KubeObject & { reason: string; message: string }>(
      'v1',
      'Event',
      ns.namespace,
    );
    expect(events.items.filter((e) => e.reason === 'ScaledUp').map((e) => e.message)).toEqual([]);
  });
});

describe('a throttled dependency', () => {
  it('holds the fleet at a lowered cap while real workers report throttling through a real Prometheus', async () => {
    const db = await usePostgres();
    const queue = 'orders.throttle';
    // A backlog whose head has waited 60 s, against a 10 s objective.
    const conn = await amqp.connect(rabbit.amqpUrl);
    const ch = await conn.createConfirmChannel();
    await ch.assertQueue(queue, { durable: true });
    const then = Date.now() - 60_000;
    for (let i = 0; i < 1500; i++) {
      await publish(
        ch,
        queue,
        {
          type: 'ship',
          schemaVersion: 1,
          payload: { orderId: `o${i}` },
          keyRule: 'order:{orderId}:ship',
        },
        () => then + i,
      );
    }
    await conn.close();

    // Two worker processes whose every call is answered 429 after 300 ms.
    const { workers, prom } = await scrapedWorkers(queue, db.url, {
      JOBFLEET_TEST_THROTTLE: '1',
      JOBFLEET_TEST_HANDLER_MS: '300',
    });
    try {
      await secrets();
      await jobWorker(queue, {
        minReplicas: 1,
        maxReplicas: 20,
        targetOldestAgeSeconds: 10,
        scaleDownStabilizationSeconds: 5,
        downstream: { maxConcurrency: 48 },
        prometheusUrl: prom.url,
      });
      const j = await eventually(
        'the throttling cap',
        async () => {
          const x = await jw();
          // The management API can show the backlog as 0 ready for a moment, while the
          // workers hold it unacked: wait for a reading where the old backlog shows.
          return /the dependency is throttling/.test(x.status?.scaling?.message ?? '') &&
            (x.status?.oldestMessageAgeSeconds ?? 0) > 10
            ? x
            : undefined;
        },
        60_000,
      );
      expect(j.status.scaling.limitedBy).toBe('downstream');
      expect(j.status.scaling.message).toMatch(
        /^Capped at \d+ replicas: the dependency is throttling \([\d.]+\/s\), so the cap was lowered from 6; oldest message \d+ s > 10 s objective\.$/,
      );
      // Held there: the backlog is old, yet the fleet does not grow into the throttling.
      const held = j.status.desiredReplicas as number;
      expect(held).toBeLessThan(6);
      expect(j.status.oldestMessageAgeSeconds).toBeGreaterThan(10);
      await eventually(
        'the Deployment at the cap',
        async () => ((await replicas()) === held ? true : undefined),
        20_000,
      );
    } finally {
      for (const w of workers) w.proc.kill('SIGKILL');
      await prom.stop();
      await db.cleanup();
    }
  }, 120_000);
});

describe('capacity from the workers', () => {
  it('status keeps the per-replica capacity within 25 % of the truth while the queue is empty (lognormal handler times, real workers, real Prometheus)', async () => {
    const db = await usePostgres();
    await createEffectsTable(db.pool);
    const queue = 'orders.capacity';
    const prefetch = 4;
    // Handler times: lognormal, median 40 ms, σ 1 (mean 66 ms; one in a hundred over 400 ms).
    const random = prng(20);
    const lognormalMs = () => {
      const z = Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
      return Math.round(40 * Math.exp(z));
    };
    const conn = await amqp.connect(rabbit.amqpUrl);
    const ch = await conn.createConfirmChannel();
    await ch.assertQueue(queue, { durable: true });
    let n = 0;
    const send = async (count: number) => {
      for (let i = 0; i < count; i++, n++)
        await publish(ch, queue, {
          type: 'ship',
          schemaVersion: 1,
          payload: { orderId: `o${n}`, ms: lognormalMs() },
          keyRule: 'order:{orderId}:ship',
        });
    };
    const { workers, prom } = await scrapedWorkers(queue, db.url, {
      JOBFLEET_PREFETCH: String(prefetch),
    });
    const completed = async () =>
      (await db.pool.query<{ n: number }>('select count(*)::int as n from effects')).rows[0]!.n;
    try {
      // The operator watches throughout, as it would: the backlog, then the queue emptied.
      await secrets();
      await jobWorker(
        queue,
        { minReplicas: 1, maxReplicas: 10, targetOldestAgeSeconds: 30, prometheusUrl: prom.url },
        { prefetch, idempotencyKey: 'order:{orderId}:ship' },
      );
      // The truth: what the two workers complete per second while a backlog keeps every slot busy,
      // over 20 s (about 2,400 jobs: the mean of a σ 1 lognormal within a few per cent).
      await send(3600);
      await eventually('the backlog started', async () =>
        (await completed()) > 100 ? true : undefined,
      );
      const t0 = Date.now();
      const c0 = await completed();
      await new Promise((r) => setTimeout(r, 20_000));
      const truth = (await completed()) - c0;
      const perReplica = truth / ((Date.now() - t0) / 1000) / workers.length;
      await eventually(
        'the backlog drained',
        async () => ((await completed()) === n ? true : undefined),
        60_000,
      );

      // The queue stays empty: a trickle of 10 jobs/s, a tenth of what the two workers can do.
      const seen: Array<{ capacity: number; source: string; depth: number }> = [];
      const until = Date.now() + 40_000;
      while (Date.now() < until) {
        await send(10);
        const j = await jw();
        if (j.status?.capacityPerReplica !== undefined)
          seen.push({
            capacity: j.status.capacityPerReplica,
            source: j.status.capacitySource,
            depth: j.status.queueDepth,
          });
        await new Promise((r) => setTimeout(r, 1000));
      }
      const empty = seen.filter((s) => s.depth === 0);
      expect(empty.length).toBeGreaterThan(20);
      const ratios = empty.map((s) => s.capacity / perReplica);
      console.log(
        `capacity in status / measured (${perReplica.toFixed(1)}/s per replica): ${Math.min(...ratios).toFixed(3)}–${Math.max(...ratios).toFixed(3)}`,
      );
      for (const s of empty) {
        expect(s.source).toBe('Prometheus');
        expect(
          Math.abs(s.capacity / perReplica - 1),
          `capacity ${s.capacity}/s per replica in status, ${perReplica.toFixed(1)}/s measured`,
        ).toBeLessThanOrEqual(0.25);
      }
    } finally {
      await conn.close();
      for (const w of workers) w.proc.kill('SIGKILL');
      await prom.stop();
      await db.cleanup();
    }
  }, 180_000);
});

describe('Prometheus down', () => {
  it('holds the replicas and names Prometheus as the missing signal', async () => {
    await secrets();
    await backlog('mail.prom', 10, 30);
    await jobWorker('mail.prom', {
      minReplicas: 2,
      maxReplicas: 20,
      targetOldestAgeSeconds: 10,
      prometheusUrl: `http://127.0.0.1:${await freePort()}`,
    });
    const j = await scalingInactive();
    expect(j.status.scaling).toMatchObject({ limitedBy: 'signalMissing' });
    expect(j.status.scaling.message).toMatch(
      /^Holding 2 replicas: Prometheus unreachable at 127\.0\.0\.1:\d+ \(ECONNREFUSED\)\.$/,
    );
    expect(await replicas()).toBe(2);
  });
});

describe('scale to zero', () => {
  it('an empty queue with minReplicas 0 goes to zero after the window; the first message wakes it', async () => {
    await secrets();
    await backlog('mail.zero', 1, 0);
    await jobWorker('mail.zero', {
      minReplicas: 0,
      maxReplicas: 5,
      targetOldestAgeSeconds: 10,
      scaleDownStabilizationSeconds: 3,
    });
    await eventually(
      'one replica for the waiting message',
      async () => ((await replicas()) === 1 ? true : undefined),
      30_000,
    );

    await rabbit.mgmt.request(
      'DELETE',
      `/queues/${encodeURIComponent(rabbit.vhost)}/mail.zero/contents`,
    );
    const idle = await eventually(
      'zero replicas',
      async () => {
        const j = await jw();
        return (await replicas()) === 0 && j.status?.desiredReplicas === 0 ? j : undefined;
      },
      30_000,
    );
    expect(idle.status.queueDepth).toBe(0);
    expect(idle.status.conditions.find((c: any) => c.type === 'Available')).toMatchObject({
      status: 'True',
      reason: 'ScaledToZero',
    });

    await backlog('mail.zero', 1, 0);
    await eventually('woken', async () => ((await replicas()) === 1 ? true : undefined), 30_000);
  });
});
