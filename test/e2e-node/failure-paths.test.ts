// What goes wrong on a real node, and what the JobWorker then says: the
// operator and its workers in namespaces that enforce the restricted Pod
// Security profile; a worker image that cannot be pulled (a tag that does not
// exist, a login that is wrong) named with the image while the rollout holds,
// and recovered by the fix; a worker killed for memory by its cgroup limit,
// named with the limit, and nothing lost.
import amqp from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { produce } from '../../examples/worker/producer.js';
import type { KubeClient, KubeObject } from '../../src/kube/client.js';
import { publish } from '../../worker/index.js';
import { topology } from '../../worker/topology.js';
import { startDownstream } from '../ground/downstream.js';
import { eventually } from '../ground/eventually.js';
import type { PgSchema } from '../ground/postgres.js';
import type { RabbitVhost } from '../ground/rabbit.js';
import type { RealNodeGround } from '../ground/real-node.js';
import { dockerConfig } from '../ground/registry.js';
import { startE2eGround, type E2eGround } from '../fixtures/real-node-ground.js';
import { imagesPrinted, type TourShell } from '../fixtures/tour.js';

const NS = 'shipping-restricted';
const OPERATOR_NS = 'jobfleet-restricted';
const IMAGE = 'localhost:5000/jobfleet-example-worker';

let e2e: E2eGround;
let ground: RealNodeGround;
let client: KubeClient;
let rabbit: RabbitVhost;
let db: PgSchema;
let shell: TourShell;

type Condition = { type: string; status: string; reason: string; message: string };
type Jw = KubeObject & {
  status?: {
    conditions?: Condition[];
    currentRevision?: string;
    readyReplicas?: number;
    queueDepth?: number;
    oldestMessageAgeSeconds?: number;
    rollout?: { phase?: string };
    lastRollback?: { from: string; to: string; result: string };
  };
};
type Pod = KubeObject & {
  spec: { terminationGracePeriodSeconds?: number };
  status: {
    conditions?: Array<{ type: string; status: string }>;
    containerStatuses?: Array<{
      name: string;
      state?: { terminated?: { exitCode: number; reason?: string; finishedAt?: string } };
    }>;
  };
};

async function sh(command: string) {
  const r = await shell.run(command);
  expect(r.code, `${command}\n${r.stdout}\n${r.stderr}`).toBe(0);
  return r.stdout;
}
const condition = (jw: Jw, type: string) => jw.status?.conditions?.find((c) => c.type === type);
const getJw = (name: string) => client.get<Jw>('jobfleet.dev/v1alpha1', 'JobWorker', NS, name);
const readyPods = async (name: string) =>
  (
    await client.list<Pod>('v1', 'Pod', NS, { labelSelector: `jobfleet.dev/jobworker=${name}` })
  ).items.filter((p) =>
    p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
  );

/** The example worker's JobWorker in NS; `over` replaces top-level fields of its spec. */
function applyJw(name: string, over: Record<string, unknown> = {}) {
  return client.apply(
    {
      apiVersion: 'jobfleet.dev/v1alpha1',
      kind: 'JobWorker',
      metadata: { name, namespace: NS },
      spec: {
        image: `${IMAGE}:dev`,
        template: { spec: { imagePullSecrets: [{ name: 'registry' }] } },
        broker: {
          urlSecretRef: { name: 'rabbitmq', key: 'url' },
          managementUrlSecretRef: { name: 'rabbitmq-management', key: 'url' },
          queue: `orders.${name}`,
        },
        claims: { urlSecretRef: { name: 'claims-db', key: 'url' } },
        contract: { idempotencyKey: 'order:{orderId}:ship', schemaVersions: [1, 2] },
        shutdown: { drainDeadlineSeconds: 5 },
        deadLetter: { owner: 'team-shipping' },
        ...over,
      },
    },
    'e2e',
  );
}

beforeAll(async () => {
  e2e = await startE2eGround({ plugin: true });
  ({ node: ground, client, rabbit, db, shell } = e2e);
  // Two tags of the example worker: `dev` and `fixed` (a tag to move to), both pushed.
  for (const tag of ['dev', 'fixed'])
    expect(
      imagesPrinted(await sh(`make images REGISTRY=localhost:5000 TAG=${tag} PUSH=1`)),
    ).toHaveLength(2);
}, 600_000);
afterAll(() => e2e?.stop());

describe('on a real node, when things go wrong', () => {
  it('restricted namespaces: the chart’s operator and the workers are admitted and run (read-only root filesystem and all)', async () => {
    for (const ns of [OPERATOR_NS, NS]) {
      await sh(`kubectl create namespace ${ns}`);
      await sh(
        `kubectl label namespace ${ns} pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest`,
      );
      await sh(
        `kubectl create secret docker-registry registry -n ${ns} --docker-server=localhost:5000 --docker-username="$REGISTRY_USER" --docker-password="$REGISTRY_PASSWORD"`,
      );
    }
    await sh(
      `helm install jobfleet charts/jobfleet -n ${OPERATOR_NS} --set 'imagePullSecrets[0].name=registry' --set image.repository=localhost:5000/jobfleet-operator --set image.tag=dev --set 'watchNamespaces[0]=${NS}' --wait --timeout 3m`,
    );
    await sh(`kubectl apply -n ${NS} -f examples/secrets.yaml`);
    await applyJw('restricted');
    await eventually(
      'a Ready worker in the restricted namespace',
      async () => ((await readyPods('restricted')).length === 1 ? true : undefined),
      180_000,
      1000,
    );
    // Nothing was refused on the way: no ReplicaSet reported a pod it could not create.
    for (const ns of [OPERATOR_NS, NS]) {
      const events = await client.list<KubeObject & { reason: string; message: string }>(
        'v1',
        'Event',
        ns,
      );
      expect(events.items.filter((e) => e.reason === 'FailedCreate').map((e) => e.message)).toEqual(
        [],
      );
    }
    await eventually(
      'the JobWorker Available',
      async () =>
        condition(await getJw('restricted'), 'Available')?.status === 'True' ? true : undefined,
      60_000,
      500,
    );
  });

  it('a tag that does not exist: ErrImagePull or ImagePullBackOff named with the image within a minute, the rollout holds, a corrected tag recovers it', async () => {
    const before = await readyPods('restricted');
    expect(before).toHaveLength(1);
    const missing = `${IMAGE}:no-such-tag`;
    const started = Date.now();
    await applyJw('restricted', { image: missing });
    const said = await eventually(
      'the pull failure said',
      async () => {
        const c = condition(await getJw('restricted'), 'WorkersReady');
        return c?.status === 'False' && /^(ErrImagePull|ImagePullBackOff)$/.test(c.reason)
          ? c
          : undefined;
      },
      60_000,
      1000,
    );
    expect(Date.now() - started).toBeLessThan(60_000);
    expect(said.message).toContain(missing);
    expect(said.message).toContain('docs/runbook.md#the-worker-image-cannot-be-pulled');
    // The rollout holds: the old worker still serves, nothing replaced it.
    const jw = await getJw('restricted');
    expect(condition(jw, 'Progressing')?.status).toBe('True');
    expect((await readyPods('restricted')).map((p) => p.metadata.name)).toEqual(
      before.map((p) => p.metadata.name),
    );
    await applyJw('restricted', { image: `${IMAGE}:fixed` });
    await eventually(
      'the corrected tag rolled out',
      async () => {
        const j = await getJw('restricted');
        const pods = await readyPods('restricted');
        return condition(j, 'WorkersReady')?.status === 'True' &&
          condition(j, 'Progressing')?.status === 'False' &&
          pods.length === 1 &&
          pods[0]!.metadata.name !== before[0]!.metadata.name
          ? true
          : undefined;
      },
      180_000,
      1000,
    );
  });

  it('a wrong registry login: the pull failure named with the image, and the Secret fixed in place recovers it', async () => {
    // A tag this node has never pulled, so the kubelet must log in for it.
    expect(
      imagesPrinted(await sh('make images REGISTRY=localhost:5000 TAG=login PUSH=1')),
    ).toHaveLength(2);
    const wrong = dockerConfig('localhost:5000', ground.registry.username, 'not-the-password');
    const secret = (config: string) => ({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'registry-login', namespace: NS },
      type: 'kubernetes.io/dockerconfigjson',
      data: { '.dockerconfigjson': Buffer.from(config).toString('base64') },
    });
    await client.apply(secret(wrong), 'e2e');
    await applyJw('login', {
      image: `${IMAGE}:login`,
      template: { spec: { imagePullSecrets: [{ name: 'registry-login' }] } },
    });
    const said = await eventually(
      'the pull failure said',
      async () => {
        const c = condition(await getJw('login'), 'WorkersReady');
        return c?.status === 'False' && /^(ErrImagePull|ImagePullBackOff)$/.test(c.reason)
          ? c
          : undefined;
      },
      60_000,
      1000,
    );
    expect(said.message).toContain(`${IMAGE}:login`);
    expect(said.message).not.toContain('not-the-password');
    await client.apply(secret(ground.registry.dockerConfigJson), 'e2e');
    await eventually(
      'pulled with the fixed Secret',
      async () => ((await readyPods('login')).length === 1 ? true : undefined),
      240_000,
      1000,
    );
  });

  it('OOMKilled: a worker whose memory limit is too small says so with the limit and the fix; raising it loses nothing', async () => {
    // 200 orders wait in the work queue, declared as the workers declare it, before any worker runs.
    const work = topology({
      queue: 'orders.oom',
      deadLetterQueue: 'orders.oom.dlq',
      queueType: 'quorum',
      initialDelaySeconds: 1,
      maxDelaySeconds: 600,
      brokerMajor: 4,
    }).work;
    const conn = await amqp.connect(rabbit.amqpUrl);
    await (await conn.createChannel()).assertQueue(work.name, work.options);
    await conn.close();
    await produce({ brokerUrl: rabbit.amqpUrl, queue: 'orders.oom', count: 200 });
    const worker = (memory: string) => ({
      template: {
        spec: {
          imagePullSecrets: [{ name: 'registry' }],
          containers: [
            {
              name: 'worker',
              resources: { requests: { memory }, limits: { memory } },
            },
          ],
        },
      },
    });
    await applyJw('oom', worker('24Mi'));
    const said = await eventually(
      'OOMKilled said',
      async () => {
        const c = condition(await getJw('oom'), 'WorkersReady');
        return c?.status === 'False' && c.reason === 'OOMKilled' ? c : undefined;
      },
      120_000,
      1000,
    );
    expect(said.message).toContain('limit 24Mi');
    expect(said.message).toContain('resources.limits.memory');
    expect(condition(await getJw('oom'), 'Degraded')?.status).toBe('True');
    await applyJw('oom', worker('256Mi'));
    await eventually(
      'every order shipped once the limit is raised',
      async () => {
        const { rows } = await db.pool.query<{ n: number }>(
          "select count(*)::int as n from jobfleet_claims where state = 'completed' and key like 'order:o-%'",
        );
        return rows[0]!.n === 200 && (await getJw('oom')).status?.queueDepth === 0
          ? true
          : undefined;
      },
      180_000,
      1000,
    );
  });

  it('a worker SIGKILLed on the node mid-booking, as the OOM killer or a crash would: the kubelet restarts it, the in-doubt booking is reconciled, not repeated', async () => {
    // A carrier that dedupes nothing, which the example worker books on (CARRIER_URL), reached
    // from the pod through the node's proxy; it performs the booking and never answers.
    const carrier = await startDownstream();
    try {
      const queue = 'orders.carrier';
      const work = topology({
        queue,
        deadLetterQueue: `${queue}.dlq`,
        queueType: 'quorum',
        initialDelaySeconds: 1,
        maxDelaySeconds: 600,
        brokerMajor: 4,
      }).work;
      await applyJw('carrier', {
        broker: {
          urlSecretRef: { name: 'rabbitmq', key: 'url' },
          managementUrlSecretRef: { name: 'rabbitmq-management', key: 'url' },
          queue,
        },
        claims: { urlSecretRef: { name: 'claims-db', key: 'url' }, leaseSeconds: 10 },
        scaling: { minReplicas: 1, maxReplicas: 1 },
        template: {
          spec: {
            imagePullSecrets: [{ name: 'registry' }],
            containers: [
              {
                name: 'worker',
                env: [{ name: 'CARRIER_URL', value: await ground.expose(carrier.url) }],
              },
            ],
          },
        },
      });
      const [pod] = await eventually(
        'a Ready carrier worker',
        async () => {
          const ready = await readyPods('carrier');
          return ready.length === 1 ? ready : undefined;
        },
        180_000,
        1000,
      );
      const key = 'order:k-1:ship';
      const ref = `jobfleet-${key}`;
      carrier.afterNext(ref, 'hang'); // booked, never answered: the worker is mid-call until killed
      const conn = await amqp.connect(rabbit.amqpUrl);
      try {
        const ch = await conn.createConfirmChannel();
        await ch.assertQueue(work.name, work.options);
        await publish(ch, queue, {
          type: 'order.ship',
          schemaVersion: 1,
          payload: { orderId: 'k-1' },
          keyRule: 'order:{orderId}:ship',
        });
      } finally {
        await conn.close();
      }
      await eventually(
        'the carrier booked it',
        () => Promise.resolve(carrier.calls(ref) === 1 ? true : undefined),
        120_000,
        200,
      );
      // The container's process, from the node: its task's PID in containerd, then SIGKILL.
      const statuses = (pod!.status as { containerStatuses?: Array<{ containerID?: string }> })
        .containerStatuses;
      const id = statuses?.[0]?.containerID?.replace(/^containerd:\/\//, '');
      const task = (await ground.ctr('task', 'ls')).split('\n').find((l) => id && l.startsWith(id));
      const pid = Number(task?.split(/\s+/)[1]);
      expect(pid).toBeGreaterThan(1);
      process.kill(pid, 'SIGKILL');
      const restarted = await eventually(
        'the kubelet restarted the container',
        async () => {
          const p = await client.get<Pod>('v1', 'Pod', NS, pod!.metadata.name);
          const st = (p.status as { containerStatuses?: Array<{ restartCount?: number }> })
            .containerStatuses?.[0];
          return (st?.restartCount ?? 0) >= 1 ? st : undefined;
        },
        120_000,
        1000,
      );
      expect(restarted.restartCount).toBe(1);
      // Its claim runs out (10 s), the restarted worker takes it over, asks the carrier, records.
      const claim = await eventually(
        'the booking recorded',
        async () => {
          const { rows } = await db.pool.query<{
            state: string;
            result: unknown;
            takeovers: number;
          }>('select state, result, takeovers from jobfleet_claims where key = $1', [key]);
          return rows[0]?.state === 'completed' ? rows[0] : undefined;
        },
        120_000,
        1000,
      );
      expect(carrier.calls(ref)).toBe(1);
      expect(claim).toEqual({
        state: 'completed',
        result: { bookingId: carrier.bookings()[0]!.id },
        takeovers: 1,
      });
    } finally {
      await carrier.close();
    }
  });

  /**
   * Every worker pod of `name` as the watch last saw it (its revision and how its container
   * ended), and when its deletion began with what grace period (the kubelet's final delete,
   * once the container is gone, says 0).
   */
  function watchPods(name: string) {
    const deletion = new Map<string, { at: number; graceSeconds: number }>();
    const seen = new Map<string, Pod>();
    const stop = new AbortController();
    void client
      .watch(
        `/api/v1/namespaces/${NS}/pods`,
        { labelSelector: `jobfleet.dev/jobworker=${name}` },
        (_type, obj) => {
          const pod = obj as Pod;
          const before = seen.get(pod.metadata.name);
          const { deletionTimestamp, deletionGracePeriodSeconds } = pod.metadata;
          if (deletionTimestamp && !deletion.has(pod.metadata.name)) {
            const graceSeconds = Number(deletionGracePeriodSeconds);
            deletion.set(pod.metadata.name, {
              at: Date.parse(deletionTimestamp) - graceSeconds * 1000,
              graceSeconds,
            });
          }
          const ended = (p?: Pod) =>
            p?.status.containerStatuses?.find((c) => c.name === 'worker')?.state?.terminated;
          // keep the last state that says how the container ended (a later event may drop it)
          if (!ended(pod) && ended(before)) return;
          seen.set(pod.metadata.name, pod);
        },
        stop.signal,
      )
      .catch(() => undefined);
    return { seen, deletion, stop: () => stop.abort() };
  }
  const completed = async (prefix: string) =>
    (
      await db.pool.query<{ n: number; repeated: number }>(
        `select count(*)::int as n, count(*) filter (where attempts > 1 or takeovers > 0)::int as repeated
           from jobfleet_claims where state = 'completed' and key like $1`,
        [`order:${prefix}-%`],
      )
    ).rows[0]!;
  const fleet = (latencyMs: number) => ({
    template: {
      spec: {
        imagePullSecrets: [{ name: 'registry' }],
        containers: [
          { name: 'worker', env: [{ name: 'CARRIER_LATENCY_MS', value: String(latencyMs) }] },
        ],
      },
    },
    scaling: { minReplicas: 3, maxReplicas: 3 },
    shutdown: { drainDeadlineSeconds: 10 },
    rollout: { autoRollback: false, verifySeconds: 60 },
  });
  const rolledOut = (name: string, revision: string) =>
    eventually(
      `revision ${revision} on every replica`,
      async () => {
        const j = await getJw(name);
        return j.status?.currentRevision === revision &&
          condition(j, 'Progressing')?.status === 'False' &&
          (await readyPods(name)).length === 3
          ? true
          : undefined;
      },
      180_000,
      1000,
    );

  it("drain on the kubelet's SIGTERM: a rollback under a load of 2,000 jobs loses none, runs none twice, and no worker is killed before its drain ends; queue age falls after", async () => {
    await applyJw('drainer', fleet(100));
    await rolledOut('drainer', '1');
    // Revision 2 is the regression: 2 s per carrier call, so its workers are mid-call when stopped.
    await applyJw('drainer', fleet(2000));
    await rolledOut('drainer', '2');
    const pods = watchPods('drainer');
    const load = produce({
      brokerUrl: rabbit.amqpUrl,
      queue: 'orders.drainer',
      count: 2000,
      ratePerSecond: 100,
      prefix: 'drain',
    });
    await eventually(
      'revision 2 busy',
      async () => ((await completed('drain')).n >= 30 ? true : undefined),
      60_000,
      200,
    );
    await sh(`kubectl jobworker undo drainer -n ${NS}`);
    await load;
    const done = await eventually(
      'the rollback complete',
      async () => {
        const j = await getJw('drainer');
        return j.status?.lastRollback?.result === 'Complete' ? j : undefined;
      },
      240_000,
      1000,
    );
    expect(done.status!.lastRollback).toMatchObject({ from: '2', to: '1' });
    await eventually(
      'every job completed, the queue empty',
      async () =>
        (await completed('drain')).n === 2000 && (await getJw('drainer')).status?.queueDepth === 0
          ? true
          : undefined,
      240_000,
      1000,
    );
    pods.stop();
    const { n, repeated } = await completed('drain');
    // How revision 2's workers ended: SIGTERM from the kubelet, a drain, exit 0 — never a SIGKILL.
    const stopped = [...pods.seen.values()].filter(
      (p) => p.metadata.labels?.['jobfleet.dev/revision'] === '2' && p.metadata.deletionTimestamp,
    );
    expect(stopped).toHaveLength(3);
    const drains = stopped.map((p) => {
      const t = p.status.containerStatuses!.find((c) => c.name === 'worker')!.state!.terminated!;
      const { at, graceSeconds } = pods.deletion.get(p.metadata.name)!;
      return {
        pod: p.metadata.name,
        exitCode: t.exitCode,
        grace: graceSeconds,
        drainMs: Date.parse(t.finishedAt!) - at,
      };
    });
    console.log(
      `drain: ${n} of 2000 jobs completed, ${2000 - n} lost, ${repeated} run more than once; drains ${drains.map((d) => `${d.drainMs} ms`).join(', ')} against a ${drains[0]!.grace} s grace period`,
    );
    expect(n).toBe(2000);
    expect(repeated).toBe(0);
    for (const d of drains) {
      expect(d.exitCode, d.pod).toBe(0);
      // the operator's grace period: the drain deadline (10 s) and 15 s of margin
      expect(d.grace).toBe(25);
      expect(d.drainMs).toBeLessThan(d.grace * 1000);
    }
  });

  it('leader failover mid-rollback: the standby takes over within the lease, the rollback finishes, nothing is written twice', async () => {
    const lease = () =>
      client.get<KubeObject & { spec: { holderIdentity?: string; leaseDurationSeconds?: number } }>(
        'coordination.k8s.io/v1',
        'Lease',
        OPERATOR_NS,
        'jobfleet-operator',
      );
    await applyJw('failover', fleet(100));
    await rolledOut('failover', '1');
    await applyJw('failover', fleet(2000));
    await rolledOut('failover', '2');
    await produce({
      brokerUrl: rabbit.amqpUrl,
      queue: 'orders.failover',
      count: 300,
      prefix: 'fail',
    });
    const leader = (await lease()).spec.holderIdentity!;
    await sh(`kubectl jobworker undo failover -n ${NS}`);
    await eventually(
      'the rollback draining',
      async () =>
        (await getJw('failover')).status?.rollout?.phase === 'Draining' ? true : undefined,
      60_000,
      100,
    );
    const deleted = Date.now();
    await sh(`kubectl delete pod ${leader} -n ${OPERATOR_NS} --wait=false`);
    const next = await eventually(
      'another leader',
      async () => {
        const holder = (await lease()).spec.holderIdentity;
        return holder && holder !== leader ? holder : undefined;
      },
      60_000,
      200,
    );
    const tookOverMs = Date.now() - deleted;
    const leaseSeconds = (await lease()).spec.leaseDurationSeconds ?? 15;
    await eventually(
      'the rollback complete',
      async () =>
        (await getJw('failover')).status?.lastRollback?.result === 'Complete' ? true : undefined,
      240_000,
      1000,
    );
    console.log(
      `failover: ${leader} deleted, ${next} leads after ${tookOverMs} ms (lease ${leaseSeconds} s)`,
    );
    expect(tookOverMs).toBeLessThan(leaseSeconds * 1000 + 5000);
    // Each step of the rollback was written once, whichever operator wrote it.
    const events = (
      await client.list<
        KubeObject & { reason: string; count?: number; series?: { count: number } }
      >('v1', 'Event', NS, { fieldSelector: 'involvedObject.name=failover' })
    ).items;
    const times = (reason: string) =>
      events
        .filter((e) => e.reason === reason)
        .reduce((sum, e) => sum + (e.series?.count ?? e.count ?? 1), 0);
    expect({
      RollbackStarted: times('RollbackStarted'),
      Drained: times('Drained'),
      RollbackComplete: times('RollbackComplete'),
    }).toEqual({ RollbackStarted: 1, Drained: 1, RollbackComplete: 1 });
    // One ReplicaSet per revision: the restore was not applied as a new template twice.
    const replicaSets = await client.list<KubeObject>('apps/v1', 'ReplicaSet', NS, {
      labelSelector: 'jobfleet.dev/jobworker=failover',
    });
    expect(replicaSets.items).toHaveLength(2);
    // and none of the 300 orders lost on the way
    await eventually(
      'every order shipped',
      async () => ((await completed('fail')).n === 300 ? true : undefined),
      120_000,
      1000,
    );
  });
});
