// The dead-letter tools from a laptop, on the dev ground: `kubectl jobworker
// dlq list` and `dlq replay` with the apiserver as the only route. The
// chart's operator and the workers run as the dev ground's pods, which
// resolve the in-cluster names the Secrets hold (the ground's cluster DNS,
// test/ground/cluster-dns.mjs); this machine — the user's laptop — resolves
// none of them, and the user may not read Secrets. A revision whose carrier
// refuses every order dead-letters three; the next revision fixes it; on-call
// lists the quarantine and replays it, audited under their own name.
import { execFile } from 'node:child_process';
import { lookup } from 'node:dns/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import amqp from 'amqplib';
import { afterAll, describe, expect, it } from 'vitest';
import { KubeClient, type KubeObject } from '../../src/kube/client.js';
import { publish } from '../../worker/index.js';
import { kubectlWithPlugin } from '../fixtures/kubectl-plugin.js';
import { urlSecrets } from '../fixtures/operator.js';
import { assetsDir, repoRoot } from '../ground/control-plane.js';
import { startDevGround } from '../ground/dev-ground.js';
import { eventually } from '../ground/eventually.js';
import { loadKubeConfig } from '../ground/kube.js';
import { createSchema } from '../ground/postgres.js';
import { createVhost } from '../ground/rabbit.js';
import { findServices } from '../ground/services.js';

const run = promisify(execFile);
const NS = 'shipping';
const hostOf = (service: string) => `${service}.${NS}.svc.cluster.local`;
const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

/** `url` with its host replaced by an in-cluster name. */
function inCluster(url: string, service: string): string {
  const u = new URL(url);
  u.hostname = hostOf(service);
  return u.toString();
}

describe('kubectl jobworker dlq with the apiserver as the only route (dev ground)', () => {
  it('lists the quarantine and replays it for a user who may not read Secrets, whose machine cannot resolve the database or the broker', async () => {
    const services = await findServices(process.env, { containers: false });
    const rabbit = await createVhost(services.urls.amqpUrl, services.urls.rabbitMgmtUrl);
    cleanups.push(() => rabbit.cleanup());
    const db = await createSchema(services.urls.pgUrl);
    cleanups.push(() => db.cleanup());
    const services3 = ['rabbitmq', 'rabbitmq-management', 'claims-db'];
    const ground = await startDevGround({
      hosts: Object.fromEntries(services3.map((s) => [hostOf(s), '127.0.0.1'])),
    });
    cleanups.push(() => ground.stop());
    const kubeconfig = ground.plane.kubeconfigPath;
    const client = new KubeClient(loadKubeConfig(kubeconfig));

    await run(
      path.join(assetsDir(), 'helm'),
      [
        'install',
        'jobfleet',
        'charts/jobfleet',
        '-n',
        'jobfleet-system',
        '--create-namespace',
        '--set',
        'image.repository=localhost:5000/jobfleet-operator',
        '--set',
        'image.tag=dev',
        '--kubeconfig',
        kubeconfig,
      ],
      { cwd: repoRoot },
    );
    await client.apply(
      { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } },
      'jobfleet-test',
    );
    await urlSecrets(client, NS, {
      rabbitmq: inCluster(rabbit.amqpUrl, 'rabbitmq'),
      'rabbitmq-management': inCluster(rabbit.mgmtUrl, 'rabbitmq-management'),
      'claims-db': inCluster(db.url, 'claims-db'),
    });
    // examples/jobworker.yaml, whose revision 1 has a carrier that refuses every order
    const jobWorker = (env: Array<{ name: string; value: string }>) =>
      client.apply(
        {
          apiVersion: 'jobfleet.dev/v1alpha1',
          kind: 'JobWorker',
          metadata: { name: 'order-shipper', namespace: NS },
          spec: {
            image: 'localhost:5000/jobfleet-example-worker:dev',
            template: { spec: { containers: [{ name: 'worker', env }] } },
            broker: {
              urlSecretRef: { name: 'rabbitmq', key: 'url' },
              managementUrlSecretRef: { name: 'rabbitmq-management', key: 'url' },
              queue: 'orders.ship',
            },
            claims: { urlSecretRef: { name: 'claims-db', key: 'url' } },
            contract: { idempotencyKey: 'order:{orderId}:ship', schemaVersions: [1, 2] },
            retry: { initialDelaySeconds: 1, maxDelaySeconds: 2 },
            deadLetter: { owner: 'team-shipping' },
          },
        },
        'jobfleet-test',
      );
    type Jw = KubeObject & { status?: Record<string, any> };
    const jw = () => client.get<Jw>('jobfleet.dev/v1alpha1', 'JobWorker', NS, 'order-shipper');
    // helm returns once the CRDs are Established; the first apply still met a 404 once (the
    // JobWorker resource or the new namespace not yet served): applied again until it lands
    await eventually(
      'the JobWorker applied',
      () => jobWorker([{ name: 'CARRIER_REJECT_EVERY', value: '1' }]).then(() => true),
      30_000,
      500,
    );
    await eventually(
      'revision 1 ready',
      async () => ((await jw()).status?.readyReplicas >= 1 ? true : undefined),
      120_000,
    );

    const conn = await amqp.connect(rabbit.amqpUrl);
    const ch = await conn.createConfirmChannel();
    const keys: string[] = [];
    for (const orderId of ['d-0', 'd-1', 'd-2']) {
      const m = await publish(ch, 'orders.ship', {
        type: 'order.ship',
        schemaVersion: 1,
        payload: { orderId },
        keyRule: 'order:{orderId}:ship',
      });
      keys.push(m.key);
    }
    await conn.close();
    const deadLetters = () =>
      db.pool.query<{ key: string }>(`select key from jobfleet_dead_letters order by key`);
    await eventually(
      '3 dead letters',
      async () => ((await deadLetters()).rowCount === 3 ? true : undefined),
      60_000,
    );

    // the fix: revision 2's carrier takes them
    await jobWorker([]);
    await eventually(
      'revision 2 rolled out',
      async () => {
        const s = (await jw()).status;
        return s?.currentRevision === '2' && s.phase === 'Healthy' ? true : undefined;
      },
      120_000,
    );
    // the incident is over: minutes-old dead letters hold no replay
    await db.pool.query(
      `update jobfleet_dead_letters set dead_lettered_at = now() - interval '3 minutes'`,
    );

    // on-call: the JobWorker and JobReplays (the chart's edit role would do), no Secrets
    const rbac = `/apis/rbac.authorization.k8s.io/v1/namespaces/${NS}`;
    await client.request('POST', `${rbac}/roles`, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name: 'oncall', namespace: NS },
      rules: [
        { apiGroups: ['jobfleet.dev'], resources: ['jobworkers'], verbs: ['get', 'list'] },
        {
          apiGroups: ['jobfleet.dev'],
          resources: ['jobreplays'],
          verbs: ['create', 'get', 'list', 'delete'],
        },
      ],
    });
    await client.request('POST', `${rbac}/rolebindings`, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: 'oncall', namespace: NS },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'oncall' },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'oncall' }],
    });

    // What the user's side has: no name for the database or the broker, no Secret.
    for (const s of services3)
      await expect(lookup(hostOf(s))).rejects.toThrow(/ENOTFOUND|EAI_AGAIN/);
    const kubectl = kubectlWithPlugin(kubeconfig);
    const as = ['-n', NS, '--as', 'oncall'];
    const secret = await kubectl('get', 'secret', 'claims-db', ...as);
    expect(secret.code).not.toBe(0);
    expect(secret.stderr).toMatch(/forbidden/i);

    const list = await kubectl('jobworker', 'dlq', 'list', 'order-shipper', '--json', ...as);
    expect(list.code, list.stderr).toBe(0);
    const listed = JSON.parse(list.stdout) as {
      total: number;
      rows: Array<{ key: string; failureClass: string; reason: string }>;
    };
    expect(listed.total).toBe(3);
    expect(listed.rows.map((r) => r.key).sort()).toEqual([...keys].sort());
    expect(listed.rows.every((r) => r.failureClass === 'permanent')).toBe(true);
    const table = await kubectl('jobworker', 'dlq', 'list', 'order-shipper', ...as);
    expect(table.stdout).toContain('3 quarantined dead letters of JobWorker order-shipper');
    expect(table.stdout).toContain('carrier refused order d-0');
    // the dry runs are gone once answered
    expect((await client.list('jobfleet.dev/v1alpha1', 'JobReplay', NS)).items).toEqual([]);

    const replay = await kubectl(
      'jobworker',
      'dlq',
      'replay',
      'order-shipper',
      '--class',
      'permanent',
      '--reason',
      'carrier fixed in revision 2',
      ...as,
    );
    expect(replay.code, replay.stderr).toBe(0);
    expect(replay.stderr).toMatch(/jobreplay\/order-shipper-replay-\w+ created/);
    const audit = await db.pool.query<{ initiator: string; key: string }>(
      `select initiator, key from jobfleet_dead_letter_audit where action = 'replayed' order by key`,
    );
    expect(audit.rows).toEqual([...keys].sort().map((key) => ({ initiator: 'oncall', key })));
    const claims = await db.pool.query<{ key: string; state: string }>(
      `select key, state from jobfleet_claims order by key`,
    );
    expect(claims.rows).toEqual([...keys].sort().map((key) => ({ key, state: 'completed' })));
  }, 300_000);
});
