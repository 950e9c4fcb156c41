// `make dev`: the dev ground for trying jobfleet by hand — a real Kubernetes
// control plane whose one node runs every pod as a process on this machine
// (test/ground/dev-ground.ts), and the private registry the README tour
// pushes its images to. `make dev NODE=real` (--real-node) gives the same
// cluster with a real node instead: a kubelet running the images in
// containers (test/ground/real-node.ts, docs/real-node.md). Follow the README's
// tour against either.
//
// It runs until SIGINT, SIGTERM or SIGHUP, then stops everything it started
// (pods, node, registry, control plane) and says so in one line. Ctrl-C
// signals the whole foreground group; a signal sent to make alone reaches
// here too: make passes SIGTERM on to its child, and for the others
// (`kill -INT <make>`) we watch make itself (watchMake below).
//
//   node --import tsx examples/dev/dev.ts [--real-node] [--registry-port PORT]
import { readFileSync, realpathSync, rmSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { assetsDir, repoRoot } from '../../test/ground/control-plane.js';
import { startDevGround, type DevGround } from '../../test/ground/dev-ground.js';
import { startRealNodeGround, type RealNodeGround } from '../../test/ground/real-node.js';
import type { Registry } from '../../test/ground/registry.js';
import { configuredUrls } from '../../test/ground/services.js';

const { values: args } = parseArgs({
  options: { 'real-node': { type: 'boolean' }, 'registry-port': { type: 'string' } },
});
const registryPort = args['registry-port'] ? Number(args['registry-port']) : undefined;
if (registryPort !== undefined && !(registryPort > 0 && registryPort < 65536))
  throw new Error(`--registry-port ${args['registry-port']}: not a port`);

// make dev used to put the checkout's plugin on PATH from here: a shell that still has that
// PATH would run it instead of the one the tour installs.
rmSync(path.join(repoRoot, '.cache/dev-bin'), { recursive: true, force: true });

let ground: { dev?: DevGround; real?: RealNodeGround } | undefined;
let stopping = false;

/** What the ground is made of, for the line that says it stopped. */
function parts(): string {
  const registry = ground?.dev?.registry ?? ground?.real?.registry;
  const pods = ground?.dev?.runner.processes().length;
  return [
    'the control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)',
    ground?.real
      ? `the real node ${ground.real.nodeName} (kubelet, kube-proxy, containerd and its containers)`
      : `the node dev-node and its ${pods} pod process${pods === 1 ? '' : 'es'}`,
    ...(registry ? [`the registry on ${registry.host}`] : []),
  ].join(', ');
}

async function stop(why: string): Promise<void> {
  if (stopping) {
    console.log(`${why}: already stopping the dev ground`);
    return;
  }
  stopping = true;
  console.log(`\n${why}: stopping the dev ground…`);
  await started.catch(() => undefined);
  if (!ground) {
    console.log('stopped: the dev ground had not started');
    process.exit(1);
  }
  const what = parts();
  try {
    await (ground.dev ?? ground.real)!.stop();
  } catch (err) {
    console.error(err);
    console.log(`the dev ground did not stop cleanly (above): check for ${what}`);
    process.exit(1);
  }
  console.log(`stopped the dev ground: ${what}; none of it is running any more`);
  process.exit(0);
}
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const)
  process.on(signal, () => void stop(signal));
watchMake((why) => void (stopping || stop(why)));
// a terminal that closed (SIGHUP) fails our writes: the stop goes on regardless
process.stdout.on('error', () => undefined);

const started = start();
const printed = await started.catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
if (!stopping) console.log(printed);

async function start(): Promise<string> {
  const urls = configuredUrls();
  let kubeconfig: string;
  let registry: Registry;
  let services: Record<string, string>;
  let node: string;
  if (args['real-node']) {
    const real = await startRealNodeGround({ registryPort });
    ground = { real };
    kubeconfig = real.plane.kubeconfigPath;
    registry = real.registry;
    // Pods reach this machine's services (on loopback) through the ground's proxies.
    services = {
      rabbitmq: await real.expose(urls.amqpUrl),
      'rabbitmq-management': await real.expose(urls.rabbitMgmtUrl),
      'claims-db': await real.expose(urls.pgUrl),
    };
    node = `one real node (${real.nodeName}): a kubelet runs every pod in containers (logs: ${real.dir})`;
  } else {
    const dev = await startDevGround({ registry: true, registryPort });
    ground = { dev };
    kubeconfig = dev.plane.kubeconfigPath;
    registry = dev.registry!;
    services = {
      rabbitmq: urls.amqpUrl,
      'rabbitmq-management': urls.rabbitMgmtUrl,
      'claims-db': urls.pgUrl,
    };
    node = 'one node (dev-node) runs every pod as a local process (kubectl logs reads its output)';
  }
  // The pinned Node make fetched, when it is the one running here: the plugin runs on it.
  const pinnedNode = realpathSync(process.execPath).startsWith(
    realpathSync(path.join(repoRoot, '.cache')),
  )
    ? `${path.dirname(process.execPath)}:`
    : '';
  return `
The dev ground is up: ${node}.

  export KUBECONFIG=${kubeconfig}
  # kubectl and helm, then ~/.local/bin, where the tour installs the plugin
  export PATH=${assetsDir()}:${pinnedNode}$HOME/.local/bin:$PATH
  # the private registry on ${registry.host}: its login, and its CA for make images PUSH=1
  export REGISTRY_USER=${registry.username} REGISTRY_PASSWORD=${registry.password}
  export REGISTRY_AUTH_FILE=${registry.authFile} REGISTRY_CERT_DIR=${registry.certDir}

Then the README's tour, as written. In examples/secrets.yaml use these URLs:
${Object.entries(services)
  .map(([name, url]) => `  ${`${name}:`.padEnd(21)}${url}`)
  .join('\n')}

Ctrl-C (or SIGTERM to make) stops it all.`;
}

/**
 * Calls `stop` when make, our parent, is going down. GNU make passes SIGTERM on to its children
 * but not SIGINT, SIGHUP or SIGQUIT (it expects the terminal to have sent those to the whole
 * group): on any of them it restores the signal's default action and waits for its children,
 * so a signal it caught when we started and no longer catches means it is handling it. A parent
 * that is gone (make SIGKILLed) stops the ground too.
 */
function watchMake(stop: (why: string) => void): void {
  const parent = process.ppid;
  const caught = () => {
    try {
      const status = readFileSync(`/proc/${parent}/status`, 'utf8');
      return BigInt(`0x${/^SigCgt:\s*([0-9a-f]+)/m.exec(status)?.[1] ?? '0'}`);
    } catch {
      return undefined;
    }
  };
  let comm = '';
  try {
    comm = readFileSync(`/proc/${parent}/comm`, 'utf8').trim();
  } catch {
    return; // no /proc: nothing to watch
  }
  const fatal = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3 };
  const atStart = caught() ?? 0n;
  const check = () => {
    if (process.ppid !== parent) return `make (pid ${parent}) exited`;
    if (!/^g?make$/.test(comm)) return undefined;
    const now = caught() ?? 0n;
    for (const [name, n] of Object.entries(fatal)) {
      const bit = 1n << BigInt(n - 1);
      if (atStart & bit && !(now & bit)) return `make (pid ${parent}) got ${name}`;
    }
    return undefined;
  };
  const timer = setInterval(() => {
    const why = check();
    if (!why) return;
    clearInterval(timer);
    stop(why);
  }, 250);
  timer.unref();
}
