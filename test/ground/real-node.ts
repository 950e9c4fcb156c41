// The real node: a kubelet and kube-proxy of the control plane's own version,
// on containerd 2 and runc, with a CNI bridge, joined to a control plane of
// the test ground; and the private registry it pulls from. What the local
// runner only imitates, a kubelet does here: it pulls (with the pod's
// imagePullSecrets), runs each container under runc with its securityContext
// and seccomp profile, limits it in its cgroup, probes it, and stops it with
// SIGTERM and the pod's grace period. The parts come from build-node.sh.
//
// This machine's facts it works with (docs/real-node.md): cgroup v1, so the
// kubelet runs with `failCgroupV1: false` and the cgroupfs driver; root lacks
// CAP_SYS_RESOURCE, so containerd restricts oom_score_adj; nothing can be
// pulled from outside, so the sandbox image (Kubernetes' pause) is built here.
//
// Network: the bridge jobfleet0 (10.88.0.0/16) with this machine at
// 10.88.0.1. The apiserver binds there and advertises it, so pods reach it
// through the `kubernetes` Service (kube-proxy's iptables rules); services of
// this machine that listen on loopback only (PostgreSQL, RabbitMQ) are offered
// to pods by `expose()`, a TCP proxy on 10.88.0.1. Pods reach nothing else:
// forwarding out of the bridge is dropped and the service range is
// unreachable unless kube-proxy translated it.
//
// One real node per machine (the bridge, port 5000, the kubepods cgroups):
// node-cleanup.sh removes a killed run's leftovers before a node starts.
import { execFile, execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { KubeClient, type KubeObject } from '../../src/kube/client.js';
import {
  freePort,
  groundVersions,
  repoRoot,
  startControlPlane,
  type ControlPlane,
} from './control-plane.js';
import { Daemons } from './daemons.js';
import { loadKubeConfig } from './kube.js';
import { startRegistry, type Registry } from './registry.js';
import { startTcpProxy, type TcpProxy } from './tcp-proxy.js';
import { privateCa, type PrivateCa } from './tls.js';

const run = promisify(execFile);
const here = path.join(repoRoot, 'test/ground');

export const BRIDGE = 'jobfleet0';
export const POD_SUBNET = '10.88.0.0/16';
/** this machine, as pods see it: the bridge's address */
export const HOST_ADDRESS = '10.88.0.1';
export const NODE_NAME = 'jobfleet-node';
/** the sandbox image: Kubernetes' pause.c, built by build-node.sh */
export const PAUSE_IMAGE = `jobfleet.test/pause:${groundVersions().KUBE_VERSION}`;

/** The folder of the node's binaries (bin/, cni/, pause.tar), built once by build-node.sh. */
export function nodeAssets(): string {
  return execFileSync('bash', [path.join(here, 'build-node.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  }).trim();
}

export interface RealNodeGround {
  plane: ControlPlane;
  registry: Registry;
  ca: PrivateCa;
  nodeName: string;
  /** the node's logs (kubelet.log, containerd.log, kube-proxy.log) */
  dir: string;
  /** A loopback service's URL as pods reach it: through a TCP proxy on the bridge address. */
  expose(url: string): Promise<string>;
  /** `ctr` against the node's containerd (namespace k8s.io) */
  ctr(...args: string[]): Promise<string>;
  stop(): Promise<void>;
}

/** `registryPort`: the registry's port, when not 5000 (its host is then localhost:PORT). */
export async function startRealNodeGround(
  o: { registryPort?: number } = {},
): Promise<RealNodeGround> {
  if (process.getuid?.() !== 0)
    throw new Error('the real node needs root (containerd, runc, iptables)');
  const assets = nodeAssets();
  const bin = (b: string) => path.join(assets, 'bin', b);
  const cleanupScript = path.join(here, 'node-cleanup.sh');
  await run('bash', [cleanupScript, bin('kube-proxy')]);
  // the machine's iptables rules and sysctls, put back when the node is removed
  await run('bash', [cleanupScript, bin('kube-proxy'), '--save']);

  const dir = await mkdtemp(path.join(os.tmpdir(), 'jobfleet-node-'));
  // Tears the node down if this process dies without its teardown (containers outlive their shims).
  const watcher = spawn(
    'bash',
    [cleanupScript, bin('kube-proxy'), '--watch', String(process.pid)],
    {
      detached: true,
      stdio: 'ignore',
    },
  );
  watcher.unref();

  const daemons = new Daemons(dir);
  const proxies: TcpProxy[] = [];
  let plane: ControlPlane | undefined;
  let registry: Registry | undefined;
  let ca: PrivateCa | undefined;
  const stop = async () => {
    await daemons.stop();
    await run('bash', [cleanupScript, bin('kube-proxy')]).catch(() => undefined);
    await Promise.all(proxies.map((p) => p.close()));
    await registry?.stop();
    await plane?.stop();
    ca?.cleanup();
    watcher.kill('SIGTERM');
  };

  try {
    await networkUp();
    ca = await privateCa();
    registry = await startRegistry({
      binary: bin('registry'),
      ca,
      under: dir,
      port: o.registryPort,
    });
    plane = await startControlPlane({ fakeNode: false, address: HOST_ADDRESS });

    const sock = path.join(dir, 'containerd.sock');
    await writeContainerdConfig(dir, assets, sock, registry, ca);
    const env = { ...process.env, PATH: `${path.join(assets, 'bin')}:${process.env.PATH}` };
    daemons.start(
      'containerd',
      bin('containerd'),
      ['--config', path.join(dir, 'containerd.toml')],
      env,
    );
    await daemons.waitFor('containerd', () => existsSync(sock), 30_000);
    const ctr = async (...args: string[]) =>
      (await run(bin('ctr'), ['--address', sock, '--namespace', 'k8s.io', ...args])).stdout;
    await ctr('images', 'import', '--no-unpack=false', path.join(assets, 'pause.tar'));

    const kubeletConfig = await writeKubeletConfig(dir, sock);
    daemons.start(
      'kubelet',
      bin('kubelet'),
      [
        `--config=${kubeletConfig}`,
        `--kubeconfig=${plane.kubeconfigPath}`,
        `--hostname-override=${NODE_NAME}`,
        `--node-ip=${HOST_ADDRESS}`,
        `--root-dir=${path.join(dir, 'kubelet')}`,
        `--cert-dir=${path.join(dir, 'kubelet-pki')}`,
        '--v=1',
      ],
      env,
    );
    daemons.start(
      'kube-proxy',
      bin('kube-proxy'),
      [`--config=${await writeKubeProxyConfig(dir, plane.kubeconfigPath)}`, '--v=1'],
      env,
    );
    const client = new KubeClient(loadKubeConfig(plane.kubeconfigPath));
    await daemons.waitFor(
      `node ${NODE_NAME} to be Ready`,
      async () => {
        const node = await client.find<
          KubeObject & { status?: { conditions?: Array<{ type: string; status: string }> } }
        >('v1', 'Node', undefined, NODE_NAME);
        return !!node?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
      },
      90_000,
    );
    return {
      plane,
      registry,
      ca,
      nodeName: NODE_NAME,
      dir,
      expose: async (url) => {
        const u = new URL(url);
        const proxy = await startTcpProxy(u.hostname, Number(u.port), HOST_ADDRESS);
        proxies.push(proxy);
        u.hostname = HOST_ADDRESS;
        u.port = String(proxy.port);
        return u.toString();
      },
      ctr,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** The bridge with this machine's address on it, forwarding on, and the fences around it. */
async function networkUp(): Promise<void> {
  const sh = (cmd: string, ...args: string[]) => run(cmd, args);
  await sh('sysctl', '-q', '-w', 'net.ipv4.ip_forward=1');
  // pod → Service → pod on the same bridge: kube-proxy's NAT must see bridged replies
  await sh('modprobe', 'br_netfilter').catch(() => undefined);
  await sh('sysctl', '-q', '-w', 'net.bridge.bridge-nf-call-iptables=1');
  await sh('ip', 'link', 'add', BRIDGE, 'type', 'bridge');
  await sh('ip', 'addr', 'add', `${HOST_ADDRESS}/16`, 'dev', BRIDGE);
  await sh('ip', 'link', 'set', BRIDGE, 'up');
  // Pods talk to each other and to this machine, never past it.
  await sh('iptables', '-I', 'FORWARD', '-i', BRIDGE, '!', '-o', BRIDGE, '-j', 'DROP');
  // A Service address kube-proxy has not translated goes nowhere (not to the default route).
  await sh('ip', 'route', 'add', 'unreachable', '10.0.0.0/24');
}

async function writeContainerdConfig(
  dir: string,
  assets: string,
  sock: string,
  registry: Registry,
  ca: PrivateCa,
): Promise<void> {
  const certsD = path.join(dir, 'certs.d', registry.host);
  await mkdir(certsD, { recursive: true });
  await writeFile(
    path.join(certsD, 'hosts.toml'),
    [
      `server = "https://${registry.host}"`,
      `[host."https://${registry.host}"]`,
      '  capabilities = ["pull", "resolve"]',
      `  ca = "${ca.caFile}"`,
      '',
    ].join('\n'),
  );
  const netd = path.join(dir, 'cni', 'net.d');
  await mkdir(netd, { recursive: true });
  await writeFile(
    path.join(netd, '10-jobfleet.conflist'),
    JSON.stringify({
      cniVersion: '1.0.0',
      name: 'jobfleet',
      plugins: [
        {
          type: 'bridge',
          bridge: BRIDGE,
          isGateway: true,
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: 'host-local',
            ranges: [[{ subnet: POD_SUBNET, gateway: HOST_ADDRESS }]],
            routes: [{ dst: '0.0.0.0/0' }],
            dataDir: path.join(dir, 'cni', 'ipam'),
          },
        },
      ],
    }),
  );
  const q = JSON.stringify;
  await writeFile(
    path.join(dir, 'containerd.toml'),
    `version = 3
root = ${q(path.join(dir, 'containerd', 'root'))}
state = ${q(path.join(dir, 'containerd', 'state'))}
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.nri.v1.nri"]

[grpc]
  address = ${q(sock)}
[ttrpc]
  address = ${q(sock + '.ttrpc')}
[debug]
  level = "warn"

[plugins.'io.containerd.cri.v1.runtime']
  # root here lacks CAP_SYS_RESOURCE: a lower oom_score_adj than containerd's own is refused
  restrict_oom_score_adj = true
  enable_selinux = false
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = ${q(path.join(assets, 'bin', 'runc'))}
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [${q(path.join(assets, 'cni'))}]
    conf_dir = ${q(netd)}

[plugins.'io.containerd.cri.v1.images']
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = ${q(PAUSE_IMAGE)}
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = ${q(path.join(dir, 'certs.d'))}
`,
  );
}

async function writeKubeletConfig(dir: string, sock: string): Promise<string> {
  const file = path.join(dir, 'kubelet.yaml');
  await writeFile(
    file,
    JSON.stringify({
      apiVersion: 'kubelet.config.k8s.io/v1beta1',
      kind: 'KubeletConfiguration',
      // cgroup v1 here (hybrid): Kubernetes 1.35+ refuses it unless told
      failCgroupV1: false,
      cgroupDriver: 'cgroupfs',
      containerRuntimeEndpoint: `unix://${sock}`,
      address: HOST_ADDRESS,
      port: 10250,
      readOnlyPort: 0,
      healthzPort: 0,
      // The apiserver reaches it for logs and exec; a ground needs no more.
      authentication: { anonymous: { enabled: true }, webhook: { enabled: false } },
      authorization: { mode: 'AlwaysAllow' },
      failSwapOn: false,
      podLogsDir: path.join(dir, 'pod-logs'),
      clusterDomain: 'cluster.local',
      serializeImagePulls: false,
      // a test machine's disk is shared: evict only when it is really full
      evictionHard: {
        'memory.available': '100Mi',
        'nodefs.available': '1%',
        'nodefs.inodesFree': '1%',
        'imagefs.available': '1%',
      },
      imageGCHighThresholdPercent: 99,
      imageGCLowThresholdPercent: 98,
      nodeStatusUpdateFrequency: '4s',
      syncFrequency: '10s',
    }),
  );
  return file;
}

async function writeKubeProxyConfig(dir: string, kubeconfig: string): Promise<string> {
  const file = path.join(dir, 'kube-proxy.yaml');
  await writeFile(
    file,
    JSON.stringify({
      apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
      kind: 'KubeProxyConfiguration',
      clientConnection: { kubeconfig },
      hostnameOverride: NODE_NAME,
      mode: 'iptables',
      clusterCIDR: POD_SUBNET,
      bindAddress: HOST_ADDRESS,
      metricsBindAddress: `127.0.0.1:${await freePort()}`,
      healthzBindAddress: '',
      // root here cannot lower an oom_score_adj (no CAP_SYS_RESOURCE)
      oomScoreAdj: 0,
      // leave the machine's conntrack sysctls alone
      conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: '0s', tcpCloseWaitTimeout: '0s' },
      iptables: { localhostNodePorts: false },
    }),
  );
  return file;
}
