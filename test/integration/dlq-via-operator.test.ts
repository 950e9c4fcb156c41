// The dead-letter tools from a laptop: `kubectl jobworker dlq list` and
// `dlq replay` with the apiserver as the only route. The JobWorker's Secrets
// name the claims database and the broker by in-cluster names that only the
// operator's process resolves (the test ground's cluster DNS,
// test/ground/cluster-dns.mjs); the user may not read Secrets. The operator,
// running as its own process, answers through a JobReplay: a dry run for the
// list, a replay audited under the user the apiserver authenticated.
import { lookup } from 'node:dns/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { KubeClient, type KubeObject } from '../../src/kube/client.js';
import { Permanent } from '../../worker/index.js';
import { kubectlWithPlugin } from '../fixtures/kubectl-plugin.js';
import { operatorProcess, urlSecrets } from '../fixtures/operator.js';
import { repoRoot } from '../ground/control-plane.js';
import { eventually } from '../ground/eventually.js';
import { useKube } from '../ground/index.js';
import { CONTRACT, QUEUE, harness, type Harness } from './worker-harness.js';

let h: Harness;
let ns: Awaited<ReturnType<typeof useKube>>;
let client: KubeClient;
const stops: Array<() => Promise<void> | void> = [];
beforeEach(async () => {
  h = await harness();
  ns = await useKube();
  client = new KubeClient(ns.kc);
});
afterEach(async () => {
  for (const s of stops.splice(0).reverse()) await s();
  await ns?.cleanup();
  await h?.cleanup();
});

/** `url` with its host replaced by an in-cluster name. */
function inCluster(url: string, host: string): string {
  const u = new URL(url);
  u.hostname = host;
  return u.toString();
}

describe('kubectl jobworker dlq with the apiserver as the only route', () => {
  it('lists the quarantine and replays it for a user who may not read Secrets, whose machine cannot resolve the database or the broker', async () => {
    // Two orders the carrier rejects for good, until it is fixed.
    const broken = new Set(['l-0', 'l-1']);
    await h.startWorker({
      handlers: {
        ship: h.effectHandler((job) => {
          const id = (job.payload as { orderId: string }).orderId;
          if (broken.has(id)) throw new Permanent(`order ${id} rejected`);
        }),
      },
    });
    const keys = [(await h.job('l-0')).key, (await h.job('l-1')).key];
    await eventually('2 dead letters', async () =>
      (await h.db.pool.query('select 1 from jobfleet_dead_letters')).rowCount === 2
        ? true
        : undefined,
    );
    // the incident is over: minutes-old dead letters hold no replay
    await h.db.pool.query(
      `update jobfleet_dead_letters set dead_lettered_at = now() - interval '3 minutes'`,
    );

    const dbHost = `claims-db.${ns.namespace}.svc.cluster.local`;
    const mqHost = `rabbitmq.${ns.namespace}.svc.cluster.local`;
    await urlSecrets(client, ns.namespace, {
      rabbitmq: inCluster(h.rabbit.amqpUrl, mqHost),
      'claims-db': inCluster(h.db.url, dbHost),
    });
    await client.apply(
      {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobWorker',
        metadata: { name: 'shipper', namespace: ns.namespace },
        spec: {
          image: 'registry.example.com/shipping/worker:1.0.0',
          broker: { urlSecretRef: { name: 'rabbitmq', key: 'url' }, queue: QUEUE },
          claims: { urlSecretRef: { name: 'claims-db', key: 'url' } },
          contract: { idempotencyKey: CONTRACT.keyRule, schemaVersions: CONTRACT.schemaVersions },
          deadLetter: { owner: 'team-shipping' },
        },
      },
      'test-user',
    );
    // on-call: the JobWorker and JobReplays, no Secrets
    const rbac = `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns.namespace}`;
    await client.request('POST', `${rbac}/roles`, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name: 'oncall', namespace: ns.namespace },
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
      metadata: { name: 'oncall', namespace: ns.namespace },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'oncall' },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'oncall' }],
    });
    const op = await operatorProcess(ns, 'op-1', {
      NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import=${path.join(repoRoot, 'test/ground/cluster-dns.mjs')}`,
      JOBFLEET_GROUND_HOSTS: `${dbHost}=127.0.0.1,${mqHost}=127.0.0.1`,
    });
    stops.push(async () => {
      op.proc.kill('SIGTERM');
      await new Promise((r) => op.proc.once('exit', r));
    });

    // What the user's side has: no name for the database or the broker, no Secret.
    await expect(lookup(dbHost)).rejects.toThrow(/ENOTFOUND|EAI_AGAIN/);
    await expect(lookup(mqHost)).rejects.toThrow(/ENOTFOUND|EAI_AGAIN/);
    const kubectl = kubectlWithPlugin(ns.kubeconfigPath);
    const as = ['-n', ns.namespace, '--as', 'oncall'];
    const secret = await kubectl('get', 'secret', 'claims-db', ...as);
    expect(secret.code).not.toBe(0);
    expect(secret.stderr).toMatch(/forbidden/i);

    const list = await kubectl('jobworker', 'dlq', 'list', 'shipper', '--json', ...as);
    expect(list.code, list.stderr).toBe(0);
    const listed = JSON.parse(list.stdout) as {
      total: number;
      rows: Array<{ key: string; failureClass: string; reason: string }>;
    };
    expect(listed.total).toBe(2);
    expect(listed.rows.map((r) => r.key).sort()).toEqual([...keys].sort());
    expect(listed.rows.every((r) => r.failureClass === 'permanent')).toBe(true);
    const table = await kubectl('jobworker', 'dlq', 'list', 'shipper', ...as);
    expect(table.stdout).toContain('2 quarantined dead letters of JobWorker shipper');
    expect(table.stdout).toMatch(/order l-0 rejected/);
    // the dry runs are gone once answered
    const left = await client.list<KubeObject>('jobfleet.dev/v1alpha1', 'JobReplay', ns.namespace);
    expect(left.items).toEqual([]);

    broken.clear(); // the carrier is fixed
    const replay = await kubectl(
      'jobworker',
      'dlq',
      'replay',
      'shipper',
      '--class',
      'permanent',
      '--reason',
      'carrier fixed',
      ...as,
    );
    expect(replay.code, replay.stderr).toBe(0);
    expect(replay.stderr).toMatch(/jobreplay\/shipper-replay-\w+ created/);
    const { rows } = await h.db.pool.query<{ initiator: string; key: string }>(
      `select initiator, key from jobfleet_dead_letter_audit where action = 'replayed' order by key`,
    );
    expect(rows).toEqual([...keys].sort().map((key) => ({ initiator: 'oncall', key })));
    for (const key of keys) expect(await h.effects(key)).toBe(1);
  }, 180_000);
});
