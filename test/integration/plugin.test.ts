// The kubectl plugin as users install it: `make release` bundles it into one
// file and a krew archive, the real krew installs that archive with the
// rendered manifest (offline: --manifest and --archive), and the real kubectl
// discovers it and runs it against the cluster kubectl's own flags name —
// --context and --kubeconfig honoured, never silently replaced by KUBECONFIG's
// current context; --as and --as-group impersonate.
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parse, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildRelease, type Release } from '../../plugins/build.js';
import { KubeClient } from '../../src/kube/client.js';
import { assetsDir, freePort, repoRoot } from '../ground/control-plane.js';
import { useKube } from '../ground/index.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

const run = (file: string, args: string[], env: NodeJS.ProcessEnv) =>
  new Promise<Run>((resolve) =>
    execFile(file, args, { env, timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr }),
    ),
  );
const kubectl = (args: string[], env: NodeJS.ProcessEnv) =>
  run(path.join(assetsDir(), 'kubectl'), args, env);

describe('kubectl jobworker, as kubectl runs it', () => {
  let ns: Awaited<ReturnType<typeof useKube>>;
  let env: NodeJS.ProcessEnv;
  /** a kubeconfig whose current context points nowhere; `ground` names the real cluster */
  let twoContexts: string;
  let ground: string;

  let release: Release;
  let krewInstall: Run;

  beforeAll(async () => {
    ns = await useKube();
    const work = mkdtempSync(path.join(os.tmpdir(), 'jobfleet-plugin-'));
    release = await buildRelease(path.join(work, 'release'));
    // krew as kubectl finds it (kubectl-krew on PATH); plugins land in KREW_ROOT/bin.
    const tools = path.join(work, 'tools');
    mkdirSync(tools);
    symlinkSync(path.join(assetsDir(), 'krew'), path.join(tools, 'kubectl-krew'));
    const krewRoot = path.join(work, 'krew');
    env = {
      HOME: work,
      KREW_ROOT: krewRoot,
      KREW_NO_UPGRADE_CHECK: '1',
      // only the node the plugin needs: no tsx, no node_modules, no repository beside it
      PATH: `${path.join(krewRoot, 'bin')}:${tools}:${path.dirname(process.execPath)}:/usr/bin:/bin`,
    };
    krewInstall = await kubectl(
      ['krew', 'install', `--manifest=${release.manifest}`, `--archive=${release.archive}`],
      env,
    );
    const config = parse(readFileSync(ns.kubeconfigPath, 'utf8')) as {
      'current-context': string;
      clusters: Array<{ name: string; cluster: Record<string, unknown> }>;
      contexts: Array<{ name: string; context: Record<string, unknown> }>;
    };
    ground = config['current-context'];
    const real = config.contexts.find((c) => c.name === ground)!;
    const cluster = config.clusters.find((c) => c.name === real.context.cluster)!;
    config.clusters.push({
      name: 'nowhere',
      cluster: { ...cluster.cluster, server: `https://127.0.0.1:${await freePort()}` },
    });
    config.contexts.push({ name: 'nowhere', context: { ...real.context, cluster: 'nowhere' } });
    config['current-context'] = 'nowhere';
    twoContexts = path.join(work, 'kubeconfig');
    writeFileSync(twoContexts, stringify(config));
    const example = parse(readFileSync(path.join(repoRoot, 'examples/jobworker.yaml'), 'utf8')) as {
      spec: Record<string, unknown>;
    };
    await new KubeClient(ns.kc).apply(
      {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobWorker',
        metadata: { name: 'probe', namespace: ns.namespace },
        spec: example.spec,
      },
      'jobfleet-test',
    );
  });
  afterAll(async () => {
    await ns?.cleanup();
  });

  it('installs with krew from the release archive and is discovered by kubectl; prints its version', async () => {
    expect(krewInstall.code, krewInstall.stderr).toBe(0);
    expect(krewInstall.stderr).toMatch(/Installed plugin: jobworker/);
    const manifest = parse(readFileSync(release.manifest, 'utf8')) as {
      spec: { version: string; platforms: Array<{ uri: string; sha256: string }> };
    };
    expect(manifest.spec.version).toBe(`v${release.version}`);
    expect(manifest.spec.platforms[0]).toMatchObject({
      uri: `https://github.com/jobfleet/jobfleet/releases/download/v${release.version}/${path.basename(release.archive)}`,
      sha256: release.sha256,
    });
    const list = await kubectl(['plugin', 'list'], env);
    expect(list.stdout).toContain(path.join(env.KREW_ROOT!, 'bin', 'kubectl-jobworker'));
    const version = await kubectl(['jobworker', 'version'], env);
    const pkg = JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as {
      version: string;
    };
    expect(version).toMatchObject({ code: 0, stdout: `kubectl-jobworker ${pkg.version}\n` });
  });

  it('uses the context --context names, not the current one', async () => {
    const current = await kubectl(['jobworker', 'status', 'probe', '-n', ns.namespace], {
      ...env,
      KUBECONFIG: twoContexts,
    });
    expect(current.code).not.toBe(0);
    expect(current.stderr).toMatch(/ECONNREFUSED/);
    const chosen = await kubectl(
      ['jobworker', 'status', 'probe', '-n', ns.namespace, '--context', ground],
      { ...env, KUBECONFIG: twoContexts },
    );
    // 3: no status yet (no operator runs here); what matters is that it read the JobWorker
    expect(chosen.stdout).toContain(`Name:        ${ns.namespace}/probe`);
    expect(chosen.code).toBe(3);
    const unknown = await kubectl(['jobworker', 'status', 'probe', '--context=elsewhere'], {
      ...env,
      KUBECONFIG: twoContexts,
    });
    expect(unknown.stderr).toMatch(/no context named elsewhere/);
  });

  it('reads the file --kubeconfig names instead of KUBECONFIG', async () => {
    const r = await kubectl(
      [
        'jobworker',
        'status',
        'probe',
        `--namespace=${ns.namespace}`,
        `--kubeconfig=${twoContexts}`,
        '--context',
        ground,
      ],
      // a KUBECONFIG that would fail: the flag must win
      { ...env, KUBECONFIG: path.join(os.tmpdir(), 'no-such-kubeconfig') },
    );
    expect(r.stdout).toContain(`Name:        ${ns.namespace}/probe`);
    expect(r.code).toBe(3);
  });

  it('acts as the user --as names (and the groups --as-group adds), as kubectl does', async () => {
    const args = ['jobworker', 'status', 'probe', '-n', ns.namespace];
    const kc = { ...env, KUBECONFIG: ns.kubeconfigPath };
    const nobody = await kubectl([...args, '--as', 'nobody'], kc);
    expect(nobody.code).not.toBe(0);
    expect(nobody.stderr).toMatch(/User "nobody" cannot get resource "jobworkers"/);
    const admin = await kubectl([...args, '--as=nobody', '--as-group', 'system:masters'], kc);
    expect(admin.stdout).toContain(`Name:        ${ns.namespace}/probe`);
    const groupAlone = await kubectl([...args, '--as-group', 'system:masters'], kc);
    expect(groupAlone.stderr).toMatch(/--as-group needs --as/);
  });
});
