// Every manifest in examples/ is one the real kube-apiserver accepts: each
// file goes through `kubectl apply --dry-run=server` (admission, the CRDs'
// schemas and CEL rules, the pod-template checks) in a namespace of its own,
// as written. Only KEDA's kinds are left out (examples/keda/scaledobject.yaml):
// KEDA's CRDs are not installed on the test ground, so that file stays an
// illustration on docs/how-to/migrate-from-keda.md.
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { parseAllDocuments, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assetsDir, repoRoot } from '../ground/control-plane.js';
import { useKube } from '../ground/index.js';

const run = promisify(execFile);

interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
}

/** examples/**.yaml, as paths relative to the repository. */
function exampleFiles(dir = 'examples'): string[] {
  return readdirSync(path.join(repoRoot, dir), { withFileTypes: true })
    .flatMap((e) =>
      e.isDirectory()
        ? e.name === 'node_modules'
          ? []
          : exampleFiles(path.join(dir, e.name))
        : /\.ya?ml$/.test(e.name)
          ? [path.join(dir, e.name)]
          : [],
    )
    .sort();
}

const manifests = (file: string): Manifest[] =>
  parseAllDocuments(readFileSync(path.join(repoRoot, file), 'utf8'))
    .map((d) => d.toJS() as Manifest | null)
    .filter((m): m is Manifest => !!m);

/** KEDA's API group: no CRD for it on the test ground. */
const isKeda = (m: Manifest) => m.apiVersion.split('/')[0]!.endsWith('keda.sh');

let ns: Awaited<ReturnType<typeof useKube>>;
beforeAll(async () => {
  ns = await useKube();
});
afterAll(async () => {
  await ns?.cleanup();
});

/** `kubectl apply --dry-run=server` of a file as written, or of objects through stdin. */
async function dryRun(file: string, objects?: Manifest[]): Promise<string> {
  const kubectl = path.join(assetsDir(), 'kubectl');
  const args = [`--kubeconfig=${ns.kubeconfigPath}`, '-n', ns.namespace, 'apply'];
  if (!objects)
    return (await run(kubectl, [...args, '--dry-run=server', '-f', file], { cwd: repoRoot }))
      .stdout;
  const child = run(kubectl, [...args, '--dry-run=server', '-f', '-'], { cwd: repoRoot });
  child.child.stdin!.end(objects.map((o) => stringify(o)).join('---\n'));
  return (await child).stdout;
}

describe('examples/', () => {
  const files = exampleFiles();

  it('covers the manifests the docs apply', () => {
    expect(files).toEqual(
      expect.arrayContaining([
        'examples/jobworker.yaml',
        'examples/secrets.yaml',
        'examples/keda/jobworker.yaml',
        'examples/keda/deployment.yaml',
        'examples/networkpolicy-operator.yaml',
        'examples/networkpolicy-workers.yaml',
      ]),
    );
  });

  it.each(files)('%s is accepted by the apiserver (server-side dry run)', async (file) => {
    const all = manifests(file);
    const objects = all.filter((m) => !isKeda(m));
    if (!objects.length) return; // KEDA's alone: checked below
    // a manifest that names its own namespace (examples/jobworker-full.yaml's billing) is
    // sent with the test's instead, through stdin; every other file goes as written
    const pinned = objects.some((m) => m.metadata.namespace) || objects.length < all.length;
    const out = await dryRun(
      file,
      pinned
        ? objects.map((m) => ({ ...m, metadata: { ...m.metadata, namespace: ns.namespace } }))
        : undefined,
    );
    for (const m of objects) expect(out).toContain(`${m.metadata.name} created (server dry run)`);
  });

  it("leaves out KEDA's kinds only, in examples/keda/scaledobject.yaml", () => {
    const keda = files.flatMap((f) =>
      manifests(f)
        .filter(isKeda)
        .map((m) => `${f}: ${m.kind}/${m.metadata.name}`),
    );
    expect(keda).toEqual([
      'examples/keda/scaledobject.yaml: TriggerAuthentication/express-shipper-rabbitmq',
      'examples/keda/scaledobject.yaml: ScaledObject/express-shipper',
    ]);
  });
});
