// The dev ground: a control plane whose only node is the local runner's, so
// every pod scheduled runs as a real process on this machine — the chart's
// operator and the JobWorkers' workers alike. `make dev` starts it for trying
// things by hand, and the README tour test runs the tour on it. The runner
// maps the images `make images` names to their entrypoints here (what those
// images run); any other image's pod fails, saying so. Its node serves the
// kubelet's log API, so `kubectl logs` works on every pod: the apiserver
// reaches it with a client certificate of the ground's CA, and trusts the
// runner's serving certificate only as that CA's.
import { KubeClient } from '../../src/kube/client.js';
import { compiled } from './compiled.js';
import path from 'node:path';
import { repoRoot, startControlPlane, type ControlPlane } from './control-plane.js';
import { loadKubeConfig } from './kube.js';
import { LocalRunner } from './local-runner.js';
import { nodeAssets } from './real-node.js';
import { startRegistry, type Registry } from './registry.js';
import { clientCertificate, privateCa } from './tls.js';

/** What `make images` builds, by repository name: the entrypoint each image runs (compiled, as there). */
export const DEV_IMAGES: Record<string, string> = {
  'jobfleet-operator': 'src/main.ts',
  'jobfleet-example-worker': 'examples/worker/worker.ts',
};

/** The process for a pod's image: the compiled entrypoint of a known image, or one that fails saying why. */
export function devCommand(image: string): string[] {
  const repository = image.split('/').pop()!.split(/[:@]/)[0]!;
  const entry = DEV_IMAGES[repository];
  if (entry) return [process.execPath, compiled(entry)];
  const why = `the dev ground runs only the images \`make images\` names (${Object.keys(DEV_IMAGES).join(', ')}), not ${image}`;
  return [process.execPath, '-e', `console.error(${JSON.stringify(why)}); process.exit(1)`];
}

/** The env that gives a pod's process the names in `hosts` (./cluster-dns.mjs). */
function clusterDns(hosts: Record<string, string> = {}): Record<string, string> {
  const entries = Object.entries(hosts);
  if (!entries.length) return {};
  return {
    NODE_OPTIONS:
      `${process.env.NODE_OPTIONS ?? ''} --import=${path.join(repoRoot, 'test/ground/cluster-dns.mjs')}`.trim(),
    JOBFLEET_GROUND_HOSTS: entries.map(([name, address]) => `${name}=${address}`).join(','),
  };
}

export interface DevGround {
  plane: ControlPlane;
  runner: LocalRunner;
  /** the private registry `make images PUSH=1` pushes to (the README tour), when asked for */
  registry?: Registry;
  stop(): Promise<void>;
}

/**
 * `hosts`: in-cluster names the pods resolve (name → address), as cluster DNS
 * would give them; this machine's own processes do not (./cluster-dns.mjs).
 * `registry`: the ground's private registry on localhost:5000 too (one per machine), or on
 * localhost:`registryPort`.
 */
export async function startDevGround(
  o: { hosts?: Record<string, string>; registry?: boolean; registryPort?: number } = {},
): Promise<DevGround> {
  // one CA for the registry's certificate, the runner's kubelet port and the apiserver's client
  const ca = await privateCa();
  let plane: ControlPlane | undefined;
  let registry: Registry | undefined;
  let runner: LocalRunner | undefined;
  try {
    const kubeletClient = await clientCertificate(ca, 'kube-apiserver-kubelet-client');
    plane = await startControlPlane({
      fakeNode: false,
      kubeletTls: { ...kubeletClient, caFile: ca.caFile },
    });
    if (o.registry)
      registry = await startRegistry({
        binary: path.join(nodeAssets(), 'bin/registry'),
        ca,
        port: o.registryPort,
      });
    const client = new KubeClient(loadKubeConfig(plane.kubeconfigPath));
    runner = new LocalRunner({
      client,
      nodeName: 'dev-node',
      untainted: true,
      command: devCommand,
      // The operator's pod reaches the apiserver as the ground's admin (no service account tokens here).
      env: { KUBECONFIG: plane.kubeconfigPath, ...clusterDns(o.hosts) },
      inheritStderr: !!process.env.JOBFLEET_TEST_LOG,
      // what the pods log by default, as on a node: `kubectl logs` shows it
      logLevel: process.env.JOBFLEET_TEST_LOG ?? 'info',
      kubelet: { certFile: ca.certFile, keyFile: ca.keyFile, caFile: ca.caFile },
    });
    await runner.start();
    const [started, running] = [plane, runner];
    return {
      plane,
      runner,
      registry,
      stop: async () => {
        await running.stop(3000);
        await registry?.stop();
        await started.stop();
        ca.cleanup();
      },
    };
  } catch (err) {
    await runner?.stop(0);
    await registry?.stop();
    await plane?.stop();
    ca.cleanup();
    throw err;
  }
}
