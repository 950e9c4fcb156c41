// `make dev`: the dev ground for trying jobfleet by hand — a real Kubernetes
// control plane whose one node runs every pod as a process on this machine
// (test/ground/dev-ground.ts), and the private registry the README tour
// pushes its images to. `make dev NODE=real` (--real-node) gives the same
// cluster with a real node instead: a kubelet running the images in
// containers (test/ground/real-node.ts, docs/real-node.md). Follow the README's
// tour against either; it runs until Ctrl-C.
import { mkdirSync, rmSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { assetsDir, repoRoot } from '../../test/ground/control-plane.js';
import { startDevGround } from '../../test/ground/dev-ground.js';
import { startRealNodeGround } from '../../test/ground/real-node.js';
import type { Registry } from '../../test/ground/registry.js';
import { configuredUrls } from '../../test/ground/services.js';

// kubectl finds a plugin by its file name: kubectl-jobworker.
const plugins = path.join(repoRoot, '.cache/dev-bin');
rmSync(plugins, { recursive: true, force: true });
mkdirSync(plugins, { recursive: true });
symlinkSync(
  path.join(repoRoot, 'bin/kubectl-jobworker.mjs'),
  path.join(plugins, 'kubectl-jobworker'),
);

const realNode = process.argv.includes('--real-node');
const urls = configuredUrls();
let ground: { stop(): Promise<void> };
let kubeconfig: string;
let registry: Registry;
let services: Record<string, string>;
let node: string;
if (realNode) {
  const real = await startRealNodeGround();
  ground = real;
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
  const dev = await startDevGround({ registry: true });
  ground = dev;
  kubeconfig = dev.plane.kubeconfigPath;
  registry = dev.registry!;
  services = {
    rabbitmq: urls.amqpUrl,
    'rabbitmq-management': urls.rabbitMgmtUrl,
    'claims-db': urls.pgUrl,
  };
  node = 'one node (dev-node) runs every pod as a local process';
}

console.log(`
The dev ground is up: ${node}.

  export KUBECONFIG=${kubeconfig}
  export PATH=${assetsDir()}:${plugins}:$PATH     # kubectl, helm, and the plugin
  # the private registry on ${registry.host}: its login, and its CA for make images PUSH=1
  export REGISTRY_USER=${registry.username} REGISTRY_PASSWORD=${registry.password}
  export REGISTRY_AUTH_FILE=${registry.authFile} REGISTRY_CERT_DIR=${registry.certDir}

Then the README's tour, as written. In examples/secrets.yaml use these URLs:
${Object.entries(services)
  .map(([name, url]) => `  ${`${name}:`.padEnd(21)}${url}`)
  .join('\n')}

Ctrl-C stops it all.`);

const stop = () => void ground.stop().then(() => process.exit(0));
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
