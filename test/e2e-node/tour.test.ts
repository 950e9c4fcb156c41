// The product on a real node (test/ground/real-node.ts): the images `make
// images` builds, pushed to the ground's private registry, pulled by a
// kubelet with the pods' imagePullSecrets and run by containerd and runc with
// the chart's securityContext. The README's tour, command for command; then
// what it leaves running is checked at the runtime (the container's OCI spec
// and its live process), and the example worker scales 1 → N → 1 on queue
// age with real pods whose readiness the kubelet probes.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KubeClient, KubeObject } from '../../src/kube/client.js';
import { produce } from '../../examples/worker/producer.js';
import { eventually } from '../ground/eventually.js';
import type { PgSchema } from '../ground/postgres.js';
import type { RabbitVhost } from '../ground/rabbit.js';
import type { RealNodeGround } from '../ground/real-node.js';
import { startE2eGround, type E2eGround } from '../fixtures/real-node-ground.js';
import { imagesPrinted, runTour, type TourShell } from '../fixtures/tour.js';

type Pod = KubeObject & {
  spec: { containers: Array<{ name: string; image: string }> };
  status: {
    podIP?: string;
    conditions?: Array<{ type: string; status: string }>;
    containerStatuses?: Array<{
      name: string;
      containerID?: string;
      imageID?: string;
      ready: boolean;
      state?: Record<string, unknown>;
    }>;
  };
};

let e2e: E2eGround;
let ground: RealNodeGround;
let client: KubeClient;
let rabbit: RabbitVhost;
let db: PgSchema;
let tour: TourShell;
/** what `make images` printed: the digests the pods must run */
const pushed = new Map<string, string>();

beforeAll(async () => {
  e2e = await startE2eGround();
  ({ node: ground, client, rabbit, db, shell: tour } = e2e);
}, 600_000);
afterAll(() => e2e?.stop());

const pods = async (namespace: string, selector: string) =>
  (
    await client.list<Pod>('v1', 'Pod', namespace, {
      labelSelector: selector,
    })
  ).items;
const isReady = (p: Pod) =>
  !!p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');

/** The registry's answer for a manifest, as a client with (or without) the login sees it. */
async function manifest(repository: string, tag: string, login: boolean) {
  const https = await import('node:https');
  const headers: Record<string, string> = {
    accept:
      'application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json',
  };
  if (login)
    headers.authorization = `Basic ${Buffer.from(`${ground.registry.username}:${ground.registry.password}`).toString('base64')}`;
  return new Promise<{ status: number; digest?: string }>((resolve, reject) => {
    const req = https.request(
      `https://127.0.0.1:5000/v2/${repository}/manifests/${tag}`,
      {
        method: 'HEAD',
        headers,
        ca: readFileSync(ground.ca.caFile),
        servername: 'localhost',
      },
      (res) => {
        res.resume();
        resolve({
          status: res.statusCode ?? 0,
          digest: res.headers['docker-content-digest'] as string | undefined,
        });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

describe('on a real node', () => {
  it('make images builds both images without a Docker engine and PUSH=1 pushes them to the private registry', async () => {
    const r = await tour.run('make images REGISTRY=localhost:5000 TAG=dev PUSH=1');
    expect(r.code, r.stderr).toBe(0);
    const printed = imagesPrinted(r.stdout);
    expect(printed.map((i) => i.ref)).toEqual([
      'localhost:5000/jobfleet-operator:dev',
      'localhost:5000/jobfleet-example-worker:dev',
    ]);
    for (const { ref, digest, size } of printed) {
      const repository = ref.split('/')[1]!.split(':')[0]!;
      pushed.set(repository, digest);
      // The registry holds what was printed, and gives it only to a client with the login.
      expect(await manifest(repository, 'dev', true)).toEqual({ status: 200, digest });
      expect((await manifest(repository, 'dev', false)).status).toBe(401);
      expect(size).toMatch(/^\d+(\.\d+)? MB$/);
    }
    // the operator image stays small enough to pull fast on a new node
    expect(parseFloat(printed[0]!.size)).toBeLessThan(250);
  });

  it("the README's tour, command for command: the chart's operator and the example worker run in containers pulled with the Secrets", async () => {
    expect(pushed.size, 'make images ran first').toBe(2);
    await runTour(tour);
    expect((await tour.run('kubectl jobworker status order-shipper -n shipping')).stdout).toContain(
      'order-shipper',
    );
    // The worker pods are containers the kubelet started from the pushed image.
    const workers = await pods('shipping', 'jobfleet.dev/jobworker=order-shipper');
    expect(workers.length).toBeGreaterThanOrEqual(1);
    for (const p of workers.filter(isReady)) {
      const s = p.status.containerStatuses!.find((c) => c.name === 'worker')!;
      console.log(`pod ${p.metadata.name}: ${s.containerID} from ${s.imageID}`);
      expect(s.containerID).toMatch(/^containerd:\/\/[0-9a-f]{64}$/);
      expect(s.imageID).toBe(
        `localhost:5000/jobfleet-example-worker@${pushed.get('jobfleet-example-worker')}`,
      );
    }
  });

  it("the chart's operator: two replicas from the private registry, the chart's securityContext and memory limit applied by runc, one leader", async () => {
    const operators = await pods('jobfleet-system', 'app.kubernetes.io/name=jobfleet');
    expect(operators).toHaveLength(2);
    const leaders: string[] = [];
    for (const p of operators) {
      expect(isReady(p), p.metadata.name).toBe(true);
      const s = p.status.containerStatuses!.find((c) => c.name === 'operator')!;
      expect(s.imageID).toBe(`localhost:5000/jobfleet-operator@${pushed.get('jobfleet-operator')}`);
      console.log(`pod ${p.metadata.name}: ${s.containerID} from ${s.imageID}`);
      const id = s.containerID!.replace('containerd://', '');
      // What runc was told (the OCI spec containerd wrote from the pod) …
      const spec = JSON.parse(await ground.ctr('containers', 'info', id)).Spec as {
        process: {
          user: { uid: number };
          noNewPrivileges: boolean;
          capabilities?: Record<string, string[]>;
        };
        root: { readonly: boolean };
        linux: { seccomp?: unknown; resources: { memory?: { limit?: number } } };
      };
      expect(spec.process.user.uid).toBe(1000);
      expect(spec.process.noNewPrivileges).toBe(true);
      expect(spec.root.readonly).toBe(true);
      expect(spec.process.capabilities?.effective ?? []).toEqual([]);
      expect(spec.linux.seccomp).toBeDefined();
      expect(spec.linux.resources.memory?.limit).toBe(512 * 1024 * 1024);
      // … and the process it runs: uid 1000, no capabilities, no new privileges, seccomp filtering.
      const task = (await ground.ctr('tasks', 'ls')).split('\n').find((l) => l.startsWith(id))!;
      const pid = task.split(/\s+/)[1]!;
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      expect(status).toMatch(/^Uid:\s+1000\s/m);
      expect(status).toMatch(/^CapEff:\s+0+$/m);
      expect(status).toMatch(/^NoNewPrivs:\s+1$/m);
      expect(status).toMatch(/^Seccomp:\s+2$/m);
      // Leadership, as each replica reports it on its metrics port (the pod's own address).
      const metrics = await (await fetch(`http://${p.status.podIP}:8080/metrics`)).text();
      if (/^jobfleet_operator_leader 1$/m.test(metrics)) leaders.push(p.metadata.name);
    }
    const lease = await client.get<KubeObject & { spec: { holderIdentity: string } }>(
      'coordination.k8s.io/v1',
      'Lease',
      'jobfleet-system',
      'jobfleet-operator',
    );
    expect(leaders).toEqual([lease.spec.holderIdentity]);
  });

  it('scales the example worker 1 → N → 1 on queue age with real pods, counting only those the kubelet found Ready', async () => {
    const ns = 'scaling-e2e';
    const spec = {
      image: 'localhost:5000/jobfleet-example-worker:dev',
      template: {
        spec: {
          imagePullSecrets: [{ name: 'registry' }],
          containers: [{ name: 'worker', env: [{ name: 'CARRIER_LATENCY_MS', value: '200' }] }],
        },
      },
      broker: {
        urlSecretRef: { name: 'rabbitmq', key: 'url' },
        managementUrlSecretRef: { name: 'rabbitmq-management', key: 'url' },
        queue: 'orders.scale',
        prefetch: 4,
      },
      claims: { urlSecretRef: { name: 'claims-db', key: 'url' } },
      contract: { idempotencyKey: 'order:{orderId}:ship', schemaVersions: [1, 2] },
      scaling: {
        minReplicas: 1,
        maxReplicas: 6,
        targetOldestAgeSeconds: 5,
        scaleDownStabilizationSeconds: 10,
        downstream: { maxConcurrency: 12 }, // 12 / prefetch 4 = 3 workers at most
      },
      shutdown: { drainDeadlineSeconds: 5 },
      deadLetter: { owner: 'team-shipping' },
    };
    const setup = [
      `kubectl create namespace ${ns}`,
      `kubectl apply -n ${ns} -f examples/secrets.yaml`,
      `kubectl create secret docker-registry registry -n ${ns} --docker-server=localhost:5000 --docker-username="$REGISTRY_USER" --docker-password="$REGISTRY_PASSWORD"`,
    ];
    for (const c of setup) expect((await tour.run(c)).code, c).toBe(0);
    await client.apply(
      {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobWorker',
        metadata: { name: 'scaler', namespace: ns },
        spec,
      },
      'e2e',
    );
    type Jw = KubeObject & {
      status?: {
        desiredReplicas?: number;
        readyReplicas?: number;
        queueDepth?: number;
        scaling?: { limitedBy?: string; message?: string };
      };
    };
    const jw = () => client.get<Jw>('jobfleet.dev/v1alpha1', 'JobWorker', ns, 'scaler');
    await eventually(
      'one Ready worker',
      async () => ((await jw()).status?.readyReplicas === 1 ? true : undefined),
      180_000,
    );

    // 600 orders at 200 ms each: one worker (4 at a time) would take 30 s, past the 5 s objective.
    // Their ids are new: the tour's orders (o-0 …) share this claims database, and a key already
    // completed there is acked without running (the idempotency rule doing its job, not scaling).
    await produce({
      brokerUrl: rabbit.amqpUrl,
      queue: 'orders.scale',
      count: 600,
      prefix: 'scale',
    });
    // Samples of what the JobWorker counts against what the kubelet reports.
    const samples: Array<{ desired: number; ready: number; podsReady: number; pods: number }> = [];
    let peak = 0;
    await eventually(
      'scaled up, the queue drained and back to one worker',
      async () => {
        const st = (await jw()).status ?? {};
        const ps = await pods(ns, 'jobfleet.dev/jobworker=scaler');
        samples.push({
          desired: st.desiredReplicas ?? 0,
          ready: st.readyReplicas ?? 0,
          podsReady: ps.filter(isReady).length,
          pods: ps.length,
        });
        peak = Math.max(peak, st.readyReplicas ?? 0);
        if (peak >= 3 && st.queueDepth === 0 && st.desiredReplicas === 1 && st.readyReplicas === 1)
          return true;
        // what a timeout reports
        throw new Error(
          `peak ${peak}, desired at most ${Math.max(...samples.map((x) => x.desired))}, pods at most ${Math.max(...samples.map((x) => x.pods))}, now ${JSON.stringify({ ...samples.at(-1), queueDepth: st.queueDepth, scaling: st.scaling })}`,
        );
      },
      240_000,
      1000,
    );
    expect(peak).toBe(3);
    // Readiness gated the count: new pods existed before the kubelet found them Ready, and the
    // JobWorker never counted more Ready workers than there were pods.
    expect(samples.some((s) => s.desired === 3 && s.pods > s.podsReady)).toBe(true);
    for (const s of samples) expect(s.ready).toBeLessThanOrEqual(s.pods);
    // Nothing lost: every order shipped once.
    const shipped = await db.pool.query<{ n: number }>(
      "select count(*)::int as n from jobfleet_claims where state = 'completed' and key like 'order:scale-%:ship'",
    );
    expect(shipped.rows[0]!.n).toBe(600);
  });
});
