// `make dev`: the dev ground for trying jobfleet by hand — a real Kubernetes
// control plane whose one node runs every pod as a process on this machine
// (test/ground/dev-ground.ts). Follow the README's tour against it; it runs
// until Ctrl-C.
import { mkdirSync, rmSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { assetsDir, repoRoot } from '../../test/ground/control-plane.js';
import { startDevGround } from '../../test/ground/dev-ground.js';
import { configuredUrls } from '../../test/ground/services.js';

// kubectl finds a plugin by its file name: kubectl-jobworker.
const plugins = path.join(repoRoot, '.cache/dev-bin');
rmSync(plugins, { recursive: true, force: true });
mkdirSync(plugins, { recursive: true });
symlinkSync(
  path.join(repoRoot, 'bin/kubectl-jobworker.mjs'),
  path.join(plugins, 'kubectl-jobworker'),
);

const ground = await startDevGround();
const urls = configuredUrls();
console.log(`
The dev ground is up: one node (dev-node) runs every pod as a local process.

  export KUBECONFIG=${ground.plane.kubeconfigPath}
  export PATH=${assetsDir()}:${plugins}:$PATH     # kubectl, helm, and the plugin

Then the README's tour, as written. In examples/secrets.yaml use this machine's services:
  rabbitmq:            ${urls.amqpUrl}
  rabbitmq-management: ${urls.rabbitMgmtUrl}
  claims-db:           ${urls.pgUrl}

Ctrl-C stops it all.`);

const stop = () => void ground.stop().then(() => process.exit(0));
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
