// Leadership on the real kube-apiserver: a lease lost and regained while the
// old term is still stopping leaves exactly one working set of queues, and a
// hung apiserver call cannot keep a replica leading past its renew deadline.
import net from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { KubeClient, KubeApiError, type KubeObject } from '../../src/kube/client.js';
import type { Operator } from '../../src/operator.js';
import { testOperator, urlSecrets } from '../fixtures/operator.js';
import { eventually } from '../ground/eventually.js';
import { useKube } from '../ground/index.js';
import { loadKubeConfig } from '../ground/kube.js';
import { startTcpProxy, viaProxy, type TcpProxy } from '../ground/tcp-proxy.js';

let ns: Awaited<ReturnType<typeof useKube>>;
let client: KubeClient;
const operators: Operator[] = [];
const proxies: TcpProxy[] = [];
const servers: net.Server[] = [];

beforeEach(async () => {
  ns = await useKube();
  client = new KubeClient(ns.kc);
});
afterEach(async () => {
  for (const p of proxies.splice(0)) p.restore();
  await Promise.all(operators.splice(0).map((o) => o.stop()));
  for (const p of proxies.splice(0)) await p.close();
  for (const s of servers.splice(0)) s.close();
  await ns?.cleanup();
});

const LEASE = 'jobfleet-operator';
type Lease = KubeObject & { spec: { holderIdentity?: string; renewTime?: string } };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const gauge = async (op: Operator, name: 'workQueues' | 'isLeader') =>
  (await op.metrics[name].get()).values[0]?.value ?? 0;

/** Writes the lease as `holder` (optimistically; a conflict is read again and retried). */
async function holdLease(holder: string, durationSeconds = 4): Promise<void> {
  for (;;) {
    const lease = await client.get<Lease>('coordination.k8s.io/v1', 'Lease', ns.namespace, LEASE);
    try {
      await client.replace({
        ...lease,
        spec: {
          ...lease.spec,
          holderIdentity: holder,
          leaseDurationSeconds: durationSeconds,
          renewTime: new Date().toISOString().replace('Z', '000Z'),
        },
      });
      return;
    } catch (err) {
      if (!(err instanceof KubeApiError && err.status === 409)) throw err;
    }
  }
}

/** A TCP endpoint that accepts and never answers: a management API that hangs every reconcile reading it. */
async function blackHole(): Promise<string> {
  const server = net.createServer((s) => s.on('error', () => undefined));
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://guest:guest@127.0.0.1:${(server.address() as net.AddressInfo).port}`;
}

const jobWorker = (name: string, managementSecret?: string) =>
  client.apply(
    {
      apiVersion: 'jobfleet.dev/v1alpha1',
      kind: 'JobWorker',
      metadata: { name, namespace: ns.namespace },
      spec: {
        image: 'registry.example.com/w:1',
        broker: {
          urlSecretRef: { name: 'rabbitmq', key: 'url' },
          ...(managementSecret && {
            managementUrlSecretRef: { name: managementSecret, key: 'url' },
          }),
          queue: name,
        },
        claims: { urlSecretRef: { name: 'claims-db', key: 'url' } },
        contract: { idempotencyKey: 'k:{id}', schemaVersions: [1] },
        deadLetter: { owner: 'team' },
      },
    },
    'test-user',
  );

describe('leadership terms', () => {
  it('a lease lost and regained while the old term still stops: one working set of queues; JobWorker and JobReplay reconciles go on', async () => {
    await urlSecrets(client, ns.namespace, {
      rabbitmq: 'amqp://user:pw@rabbitmq:5672',
      'claims-db': 'postgres://user:pw@db/claims',
      hung: await blackHole(),
    });
    const op = await testOperator(client, ns.namespace); // lease 4 s, renew deadline 3 s, retry 1 s
    operators.push(op);
    await eventually('leading', async () => (await gauge(op, 'workQueues')) === 2 || undefined);

    // Another holder takes the lease; meanwhile JobWorkers whose queue reads
    // hang (5 s each) keep reconciles in flight, so the term that ends has
    // work still running when leadership comes back.
    let slow = 0;
    while (op.isLeader()) {
      await holdLease('someone-else');
      await jobWorker(`slow-${slow++}`, 'hung');
      await sleep(500);
    }
    await holdLease('', 1); // given back at once: the operator leads again within a retry period
    await eventually('leading again', () => Promise.resolve(op.isLeader() || undefined));
    // Both terms' queues ran at once for a moment; the old term's reconciles end by their 5 s timeout.
    await eventually(
      'one working set',
      async () => (await gauge(op, 'workQueues')) === 2 || undefined,
      30_000,
    );
    await sleep(6000);
    expect(await gauge(op, 'workQueues')).toBe(2);

    // The new term reconciles both kinds.
    await jobWorker('after');
    await eventually('a JobWorker reconciled by the new term', async () => {
      const jw = await client.get<KubeObject & { status?: { observedGeneration?: number } }>(
        'jobfleet.dev/v1alpha1',
        'JobWorker',
        ns.namespace,
        'after',
      );
      return jw.status?.observedGeneration === 1 || undefined;
    });
    await client.apply(
      {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobReplay',
        metadata: { name: 'after', namespace: ns.namespace },
        spec: {
          jobWorker: 'missing',
          selector: { failureClass: 'permanent' },
          initiator: 'test',
          reason: 'leadership test',
        },
      },
      'test-user',
    );
    await eventually('a JobReplay reconciled by the new term', async () => {
      const jr = await client.get<KubeObject & { status?: { phase?: string } }>(
        'jobfleet.dev/v1alpha1',
        'JobReplay',
        ns.namespace,
        'after',
      );
      return jr.status?.phase === 'Pending' || undefined;
    });
  });

  it('a hung apiserver call cannot keep the replica leading past its renew deadline', async () => {
    const server = new URL(ns.kc.getCurrentCluster()?.server ?? '');
    const proxy = await startTcpProxy(server.hostname, Number(server.port));
    proxies.push(proxy);
    const kc = loadKubeConfig(ns.kubeconfigPath);
    kc.loadFromOptions({
      clusters: kc.clusters.map((c) => ({ ...c, server: viaProxy(c.server, proxy) })),
      users: kc.users,
      contexts: kc.contexts,
      currentContext: kc.currentContext,
    });
    const op = await testOperator(new KubeClient(kc), ns.namespace);
    operators.push(op);
    await eventually('leading', () => Promise.resolve(op.isLeader() || undefined));
    await sleep(1500); // a renew or two over the kept-alive connection
    proxy.hang(); // the apiserver stops answering on open connections and new ones
    const hungAt = Date.now();
    await eventually(
      'leadership given up',
      () => Promise.resolve(!op.isLeader() || undefined),
      20_000,
      50,
    );
    // renew deadline 3 s, plus a retry period: not the 30 s socket timeout
    expect(Date.now() - hungAt).toBeLessThan(3000 + 1200 + 1000);
    expect(await gauge(op, 'isLeader')).toBe(0);
    proxy.restore();
    await eventually('leading again once the apiserver answers', () =>
      Promise.resolve(op.isLeader() || undefined),
    );
  });
});
