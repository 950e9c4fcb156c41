// A real Kubernetes control plane for tests, in the envtest layout: a folder
// (KUBEBUILDER_ASSETS, else .cache/kube/<version>/) holding etcd and
// kube-apiserver, plus kube-controller-manager, kube-scheduler and kwok so
// that Deployments become ReplicaSets and Pods that turn Running/Ready on a
// fake node. Everything runs as local processes on free loopback ports in a
// temp dir; a detached reaper tears it down if the test process dies.
import { spawn, type ChildProcess } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Daemons } from './daemons.js';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '../..');

/**
 * The pinned versions (test/ground/versions.env is the one place they live).
 * `GROUND_<KEY>` in the environment wins over the file's `<KEY>`: how `make
 * compat` builds and runs an older Kubernetes or RabbitMQ line (versions.sh
 * does the same for the build scripts).
 */
export function groundVersions(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const text = readFileSync(path.join(here, 'versions.env'), 'utf8');
  return Object.fromEntries(
    text
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'))
      .map((l) => {
        const [key, value] = l.split('=', 2) as [string, string];
        return [key, env[`GROUND_${key}`] || value];
      }),
  );
}

export function assetsDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.KUBEBUILDER_ASSETS) return env.KUBEBUILDER_ASSETS;
  const cache = env.JOBFLEET_CACHE_DIR ?? path.join(repoRoot, '.cache');
  return path.join(cache, 'kube', groundVersions().KUBE_VERSION ?? 'unknown');
}

/** Which binaries are missing from the assets folder (etcd and kube-apiserver are required). */
export function missingAssets(dir: string): string[] {
  return ['etcd', 'kube-apiserver'].filter((b) => !existsSync(path.join(dir, b)));
}

export function hasControllers(dir: string): boolean {
  return ['kube-controller-manager', 'kube-scheduler', 'kwok'].every((b) =>
    existsSync(path.join(dir, b)),
  );
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

export interface ControlPlane {
  dir: string;
  kubeconfigPath: string;
  server: string;
  /** true when Deployments get ReplicaSets and Pods become Ready (controllers + kwok) */
  runsWorkloads: boolean;
  /** the control plane's process ids (for tests of the teardown itself) */
  pids: number[];
  stop(): Promise<void>;
}

/** Node's fetch cannot trust a per-request CA, so health checks go through https.get. */
async function httpsGet(url: string, ca: string, token: string): Promise<number> {
  const https = await import('node:https');
  return new Promise((resolve, reject) => {
    const req = https.get(url, { ca, headers: { authorization: `Bearer ${token}` } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.setTimeout(5000, () => req.destroy(new Error('timeout')));
  });
}

export async function startControlPlane(
  opts: {
    assets?: string;
    workloads?: boolean;
    /** runs once the apiserver is ready, before the controllers start (install CRDs here, so the garbage collector knows their kinds from its first discovery) */
    beforeControllers?: (kubeconfigPath: string) => Promise<unknown>;
    /** kwok's fake node, where pods run without processes (default true); `make dev` runs without it */
    fakeNode?: boolean;
    /**
     * The address the apiserver binds and advertises (default 127.0.0.1). The real node's pods
     * reach it there through the `kubernetes` Service, whose endpoints the apiserver then keeps.
     */
    address?: string;
    /**
     * How the apiserver reaches kubelets (logs, exec): the client certificate it presents, and
     * the CA that signed their serving certificates. Unset, it presents none and verifies none
     * (the real node's kubelet allows anonymous requests and signs its own certificate).
     */
    kubeletTls?: { certFile: string; keyFile: string; caFile: string };
  } = {},
): Promise<ControlPlane> {
  const assets = opts.assets ?? assetsDir();
  const missing = missingAssets(assets);
  if (missing.length) {
    throw new Error(
      `control plane binaries missing from ${assets}: ${missing.join(', ')}. Run \`make control-plane\` (builds them from the Go module proxy) or set KUBEBUILDER_ASSETS to a setup-envtest folder.`,
    );
  }
  const dir = await mkdtemp(path.join(os.tmpdir(), 'jobfleet-kube-'));
  const daemons = new Daemons(dir);
  const bin = (b: string) => path.join(assets, b);
  const run = (name: string, args: string[], env?: NodeJS.ProcessEnv) =>
    daemons.start(name, bin(name), args, env);

  const stop = async () => {
    await daemons.stop();
    reaper.kill('SIGTERM');
    if (process.env.JOBFLEET_TEST_KEEP_CONTROL_PLANE !== '1') {
      await rm(dir, { recursive: true, force: true });
    }
  };

  // Started first so that even a failure half-way through leaves nothing behind.
  const reaperArgs = () => [
    path.join(here, 'reaper.mjs'),
    String(process.pid),
    dir,
    ...daemons.pids().map(String),
  ];
  let reaper = spawn(process.execPath, reaperArgs(), { detached: true, stdio: 'ignore' });
  reaper.unref();
  const rearm = () => {
    reaper.kill('SIGTERM');
    reaper = spawn(process.execPath, reaperArgs(), { detached: true, stdio: 'ignore' });
    reaper.unref();
  };

  try {
    const token = randomBytes(24).toString('hex');
    const [etcdPort, peerPort, apiPort] = await Promise.all([freePort(), freePort(), freePort()]);
    const certDir = path.join(dir, 'certs');
    await mkdir(certDir);
    const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const saPub = path.join(dir, 'sa.pub');
    const saKey = path.join(dir, 'sa.key');
    await writeFile(saPub, publicKey.export({ type: 'spki', format: 'pem' }));
    await writeFile(saKey, privateKey.export({ type: 'pkcs8', format: 'pem' }));
    const tokens = path.join(dir, 'tokens.csv');
    await writeFile(tokens, `${token},admin,admin,system:masters\n`);

    const etcdUrl = `http://127.0.0.1:${etcdPort}`;
    run('etcd', [
      `--data-dir=${path.join(dir, 'etcd')}`,
      `--listen-client-urls=${etcdUrl}`,
      `--advertise-client-urls=${etcdUrl}`,
      `--listen-peer-urls=http://127.0.0.1:${peerPort}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${peerPort}`,
      `--initial-cluster=default=http://127.0.0.1:${peerPort}`,
      '--unsafe-no-fsync=true',
      '--log-level=warn',
    ]);
    rearm();
    await daemons.waitFor('etcd /health', async () => (await fetch(`${etcdUrl}/health`)).ok);

    const address = opts.address ?? '127.0.0.1';
    run('kube-apiserver', [
      `--advertise-address=${address}`,
      `--bind-address=${address}`,
      `--secure-port=${apiPort}`,
      `--etcd-servers=${etcdUrl}`,
      `--cert-dir=${certDir}`,
      '--service-cluster-ip-range=10.0.0.0/24',
      '--allow-privileged=true',
      '--authorization-mode=RBAC',
      `--token-auth-file=${tokens}`,
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      `--service-account-key-file=${saPub}`,
      `--service-account-signing-key-file=${saKey}`,
      // loopback is no endpoint a pod can reach: keep none unless pods can
      `--endpoint-reconciler-type=${address === '127.0.0.1' ? 'none' : 'lease'}`,
      // a node's name resolves nowhere here: reach kubelets (logs, exec) at their addresses
      '--kubelet-preferred-address-types=InternalIP',
      ...(opts.kubeletTls
        ? [
            `--kubelet-client-certificate=${opts.kubeletTls.certFile}`,
            `--kubelet-client-key=${opts.kubeletTls.keyFile}`,
            `--kubelet-certificate-authority=${opts.kubeletTls.caFile}`,
          ]
        : []),
      // No node-lifecycle controller runs to lift the not-ready taint this
      // plugin puts on new (fake) nodes, so pods would never schedule.
      '--disable-admission-plugins=TaintNodesByCondition',
      '--v=0',
    ]);
    rearm();
    const server = `https://${address}:${apiPort}`;
    const caFile = path.join(certDir, 'apiserver.crt');
    await daemons.waitFor(
      'kube-apiserver /readyz',
      async () =>
        existsSync(caFile) &&
        (await httpsGet(`${server}/readyz`, await readFile(caFile, 'utf8'), token)) === 200,
    );

    const kubeconfigPath = path.join(dir, 'kubeconfig');
    await writeFile(kubeconfigPath, kubeconfigYaml(server, caFile, token));

    await opts.beforeControllers?.(kubeconfigPath);
    const runsWorkloads = (opts.workloads ?? true) && hasControllers(assets);
    if (runsWorkloads) {
      startWorkloadControllers(dir, kubeconfigPath, saKey, caFile, run, address !== '127.0.0.1');
      rearm();
      if (opts.fakeNode ?? true) await createFakeNode(kubeconfigPath, daemons);
    }
    const pids = daemons.pids();
    return { dir, kubeconfigPath, server, runsWorkloads, pids, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

function kubeconfigYaml(server: string, caFile: string, token: string): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'test', cluster: { server, 'certificate-authority': caFile } }],
    users: [{ name: 'admin', user: { token } }],
    contexts: [{ name: 'test', context: { cluster: 'test', user: 'admin' } }],
    'current-context': 'test',
  });
}

function startWorkloadControllers(
  dir: string,
  kubeconfig: string,
  saKey: string,
  caFile: string,
  run: (name: string, args: string[], env?: NodeJS.ProcessEnv) => ChildProcess,
  /** a real node's kube-proxy routes Services: it needs their EndpointSlices */
  endpointSlices: boolean,
): void {
  const controllers =
    'deployment,replicaset,garbagecollector,namespace,serviceaccount,disruption,root-ca-cert-publisher,clusterrole-aggregation';
  run('kube-controller-manager', [
    `--kubeconfig=${kubeconfig}`,
    '--leader-elect=false',
    '--secure-port=0',
    `--controllers=${controllers}${endpointSlices ? ',endpointslice' : ''}`,
    `--service-account-private-key-file=${saKey}`,
    `--root-ca-file=${caFile}`,
    '--kube-api-qps=100',
    '--kube-api-burst=200',
  ]);
  run('kube-scheduler', [`--kubeconfig=${kubeconfig}`, '--leader-elect=false', '--secure-port=0']);
  // HOME points into the temp dir: kwok always reads ~/.kwok/kwok.yaml.
  run(
    'kwok',
    [
      `--kubeconfig=${kubeconfig}`,
      '--manage-all-nodes=false',
      '--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake',
      '--node-lease-duration-seconds=40',
      '--cidr=10.244.0.1/16',
      '--node-ip=10.1.0.1',
      `--config=${path.join(here, 'kwok-stages.yaml')}`,
    ],
    { ...process.env, HOME: dir, KWOK_WORKDIR: dir },
  );
}

/** One fake node that kwok keeps Ready; the scheduler places every pod there. */
export const fakeNode = {
  apiVersion: 'v1',
  kind: 'Node',
  metadata: {
    name: 'kwok-node-0',
    annotations: { 'kwok.x-k8s.io/node': 'fake' },
    labels: {
      'kubernetes.io/hostname': 'kwok-node-0',
      'kubernetes.io/os': 'linux',
      'kubernetes.io/arch': 'amd64',
      type: 'kwok',
    },
  },
  status: {
    allocatable: { cpu: '1000', memory: '4Ti', pods: '10000' },
    capacity: { cpu: '1000', memory: '4Ti', pods: '10000' },
  },
};

async function createFakeNode(kubeconfigPath: string, daemons: Daemons): Promise<void> {
  const k8s = await import('@kubernetes/client-node');
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  const core = kc.makeApiClient(k8s.CoreV1Api);
  await core.createNode({ body: fakeNode });
  await daemons.waitFor('the kwok node to be Ready', async () => {
    const node = await core.readNode({ name: fakeNode.metadata.name });
    return !!node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
  });
}
