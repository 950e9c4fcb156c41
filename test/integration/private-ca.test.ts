// A private CA end to end, on servers the test ground starts itself (the
// machine's own stay untouched): a CA the test makes, a RabbitMQ 4 node with
// amqps and management https listeners, and a PostgreSQL cluster that takes
// TLS only. A worker given the CA file (JOBFLEET_TLS_CA_FILE) completes a job
// over amqps and verify-full; the operator, given the same CA as its pods
// get it from the chart (NODE_EXTRA_CA_CERTS), reads the queue over https and
// the quarantine over verify-full. Without the CA each connection is refused:
// the CA is what makes them work. RabbitMQ 4 only (the integration-rabbitmq4
// project).
import { request } from 'node:https';
import { readFileSync } from 'node:fs';
import amqp from 'amqplib';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubeClient, type KubeObject } from '../../src/kube/client.js';
import { createWorker, publish, type DeliveryResult } from '../../worker/index.js';
import { poolConfig } from '../../worker/claim-store.js';
import { operatorProcess, urlSecrets } from '../fixtures/operator.js';
import { freePort } from '../ground/control-plane.js';
import { eventually } from '../ground/eventually.js';
import { useKube } from '../ground/index.js';
import {
  rabbitNodeHome,
  rabbitmq4Root,
  startRabbitNode,
  type RabbitNode,
} from '../ground/rabbitmq-node.js';
import {
  privateCa,
  rabbitTlsConfig,
  tlsPostgres,
  type PrivateCa,
  type TlsPostgres,
} from '../ground/tls.js';
import { CONTRACT } from './worker-harness.js';

const QUEUE = 'ca.q';
let ca: PrivateCa;
let db: TlsPostgres;
let node: RabbitNode;
let amqpsUrl: string;
let mgmtsUrl: string;
beforeAll(async () => {
  const root = rabbitmq4Root();
  if (!root) throw new Error('RabbitMQ 4 is not built: run `make rabbitmq4`');
  ca = await privateCa();
  db = await tlsPostgres(ca);
  const name = `ca-${process.pid}`;
  const ports = { amqps: await freePort(), https: await freePort() };
  node = await startRabbitNode({
    root,
    name,
    amqpPort: await freePort(),
    mgmtPort: await freePort(),
    distPort: await freePort(),
    epmdPort: await freePort(),
    config: await rabbitTlsConfig(ca, rabbitNodeHome(root, name), ports),
    reapWith: process.pid,
  });
  // the certificates name localhost: the URLs a user's Secrets would hold
  amqpsUrl = `amqps://guest:guest@localhost:${ports.amqps}`;
  mgmtsUrl = `https://guest:guest@localhost:${ports.https}`;
}, 180_000);
afterAll(async () => {
  await node?.stop();
  await node?.removeData();
  await db?.stop();
  ca?.cleanup();
});

/** GET on the management API over https, trusting `caPem` only. */
function mgmtGet(path: string, caPem?: string): Promise<unknown> {
  const u = new URL(mgmtsUrl);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path,
        auth: 'guest:guest',
        ...(caPem !== undefined && { ca: caPem }),
      },
      (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve(JSON.parse(body)));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

describe('a private CA', () => {
  it('the servers refuse a client that does not trust the CA', async () => {
    await expect(amqp.connect(amqpsUrl)).rejects.toThrow(
      /self[- ]signed|unable to verify|certificate/i,
    );
    await expect(mgmtGet('/api/overview')).rejects.toThrow(
      /self[- ]signed|unable to verify|certificate/i,
    );
    const pool = new pg.Pool({ connectionString: db.url });
    await expect(pool.query('select 1')).rejects.toThrow(
      /self[- ]signed|unable to verify|certificate/i,
    );
    await pool.end();
  });

  it('a worker given JOBFLEET_TLS_CA_FILE completes a job over amqps and verify-full', async () => {
    const outcomes: DeliveryResult[] = [];
    const w = createWorker({
      contract: CONTRACT,
      handlers: { ship: () => Promise.resolve({ ok: true }) },
      logger: pino({ level: 'silent' }),
      handleSignals: false,
      onOutcome: (r) => outcomes.push(r),
      config: {
        queue: QUEUE,
        queueType: 'quorum',
        brokerUrl: amqpsUrl,
        claimsUrl: db.url,
        tlsCaFile: ca.caFile,
        metricsPort: 0,
      },
    });
    await w.start();
    try {
      const conn = await amqp.connect(amqpsUrl, { ca: [readFileSync(ca.caFile)] });
      const ch = await conn.createConfirmChannel();
      await publish(ch, QUEUE, {
        type: 'ship',
        schemaVersion: 1,
        payload: { orderId: 'ca-1' },
        keyRule: CONTRACT.keyRule,
      });
      await conn.close();
      await eventually('the job completed', () =>
        Promise.resolve(outcomes.includes('completed') ? true : undefined),
      );
      // the worker's broker connection is TLS, as the broker itself says
      // (its connection list is refreshed every few seconds)
      const caPem = readFileSync(ca.caFile, 'utf8');
      const conns = await eventually("the worker among the broker's connections", async () => {
        const list = (await mgmtGet('/api/connections', caPem)) as Array<{ ssl: boolean }>;
        return list.length ? list : undefined;
      });
      expect(conns.every((c) => c.ssl)).toBe(true);
    } finally {
      await w.stop({ deadlineMs: 1000 });
    }
    // its claim is in the database that takes TLS only, as verify-full reached it
    const pool = new pg.Pool(poolConfig(db.url, ca.caFile));
    try {
      const { rows } = await pool.query<{ state: string }>('select state from jobfleet_claims');
      expect(rows.map((r) => r.state)).toEqual(['completed']);
    } finally {
      await pool.end();
    }
  });

  it('the operator, given the CA (NODE_EXTRA_CA_CERTS, as the chart sets it), reads the queue over https and the quarantine over verify-full', async () => {
    const ns = await useKube();
    const client = new KubeClient(ns.kc);
    const op = await operatorProcess(ns, 'op-ca', { NODE_EXTRA_CA_CERTS: ca.caFile });
    try {
      await urlSecrets(client, ns.namespace, {
        rabbitmq: amqpsUrl,
        'rabbitmq-mgmt': mgmtsUrl,
        'claims-db': db.url,
      });
      await client.apply(
        {
          apiVersion: 'jobfleet.dev/v1alpha1',
          kind: 'JobWorker',
          metadata: { name: 'shipper', namespace: ns.namespace },
          spec: {
            image: 'registry.example.com/shipping/worker:1',
            broker: {
              urlSecretRef: { name: 'rabbitmq', key: 'url' },
              managementUrlSecretRef: { name: 'rabbitmq-mgmt', key: 'url' },
              queue: QUEUE,
              queueType: 'quorum',
            },
            claims: { urlSecretRef: { name: 'claims-db', key: 'url' } },
            contract: {
              idempotencyKey: CONTRACT.keyRule,
              schemaVersions: CONTRACT.schemaVersions,
            },
            scaling: { minReplicas: 0, maxReplicas: 2, targetOldestAgeSeconds: 30 },
            deadLetter: { owner: 'team-shipping' },
          },
        },
        'test-user',
      );
      type Condition = { type: string; status: string; reason: string; message?: string };
      const read = await eventually(
        'the queue and the quarantine read',
        async () => {
          const jw = await client.get<KubeObject & { status?: { conditions?: Condition[] } }>(
            'jobfleet.dev/v1alpha1',
            'JobWorker',
            ns.namespace,
            'shipper',
          );
          const c = (t: string) => jw.status?.conditions?.find((x) => x.type === t);
          const scaling = c('ScalingActive');
          const dead = c('DeadLettersOverdue');
          return scaling?.reason === 'QueueAgeRead' && dead && dead.reason !== 'Unreadable'
            ? { scaling, dead }
            : undefined;
        },
        60_000,
      );
      expect(read.scaling.status).toBe('True');
      expect(read.dead.reason).toBe('Empty');
    } finally {
      op.proc.kill('SIGTERM');
      await new Promise((r) => op.proc.once('exit', r));
      await ns.cleanup();
    }
  }, 120_000);
});
