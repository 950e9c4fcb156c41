// Kubernetes helpers for tests: a client for the test cluster, CRD install
// from crds/ (the one source of truth, as Helm installs it), and a namespace
// per test so that tests share one control plane without sharing state.
import * as k8s from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { KubeClient, type KubeObject } from '../../src/kube/client.js';
import { repoRoot } from './control-plane.js';

export function loadKubeConfig(kubeconfigPath: string): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  return kc;
}

export async function readManifests(dir: string): Promise<k8s.KubernetesObject[]> {
  let files: string[];
  try {
    files = (await readdir(dir)).filter((f) => /\.ya?ml$/.test(f)).sort();
  } catch {
    return [];
  }
  const docs: k8s.KubernetesObject[] = [];
  for (const f of files) {
    for (const doc of parseAllDocuments(await readFile(path.join(dir, f), 'utf8'))) {
      const obj = doc.toJS() as k8s.KubernetesObject | null;
      if (obj) docs.push(obj);
    }
  }
  return docs;
}

/** Server-side applies whole objects (raw JSON: see src/kube/client.ts for why). */
export async function applyObjects(
  kc: k8s.KubeConfig,
  objects: k8s.KubernetesObject[],
): Promise<void> {
  const client = new KubeClient(kc);
  for (const obj of objects) await client.apply(obj as KubeObject, 'jobfleet-test');
}

/** Applies crds/*.yaml and waits until each CRD is Established. */
export async function installCrds(kubeconfigPath: string): Promise<string[]> {
  const kc = loadKubeConfig(kubeconfigPath);
  const crds = await readManifests(path.join(repoRoot, 'crds'));
  await applyObjects(kc, crds);
  const ext = kc.makeApiClient(k8s.ApiextensionsV1Api);
  const names = crds.map((c) => c.metadata?.name ?? '');
  for (const name of names) {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const crd = await ext.readCustomResourceDefinition({ name });
      if (crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True')) {
        break;
      }
      if (Date.now() > deadline) throw new Error(`CRD ${name} not Established after 30 s`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  return names;
}

export interface TestNamespace {
  kc: k8s.KubeConfig;
  namespace: string;
  cleanup(): Promise<void>;
}

export async function createNamespace(kubeconfigPath: string): Promise<TestNamespace> {
  const kc = loadKubeConfig(kubeconfigPath);
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const namespace = `jf-test-${randomBytes(4).toString('hex')}`;
  await core.createNamespace({
    body: { metadata: { name: namespace, labels: { 'jobfleet.dev/test': 'true' } } },
  });
  return {
    kc,
    namespace,
    cleanup: async () => {
      await core.deleteNamespace({ name: namespace }).catch(() => undefined);
    },
  };
}
