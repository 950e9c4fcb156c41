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
import { KubeClient, type KubeObject } from '../../src/kube/client.js';
import { assetsDir, freePort, repoRoot } from '../ground/control-plane.js';
import { eventually } from '../ground/eventually.js';
import { useKube } from '../ground/index.js';
import { testOperator } from '../fixtures/operator.js';

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
    // 1: no operator runs here (no Lease in jobfleet-system); what matters is that it read the JobWorker
    expect(chosen.stdout).toContain(`Name:        ${ns.namespace}/probe`);
    expect(chosen.stdout).toContain(
      'Operator:    silent: no Lease jobfleet-system/jobfleet-operator',
    );
    expect(chosen.code).toBe(1);
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
    expect(r.code).toBe(1);
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

  it('names an operator that has stopped renewing its Lease (helm uninstall), reads a fresh one as running, and tells a user who may not read it', async () => {
    const client = new KubeClient(ns.kc);
    const kc = { ...env, KUBECONFIG: ns.kubeconfigPath };
    const status = ['jobworker', 'status', 'probe', '-n', ns.namespace];
    const why = ['jobworker', 'why', 'probe', '-n', ns.namespace];
    const lease = `Lease ${ns.namespace}/jobfleet-operator`;
    // The operator (its Lease in the test namespace, 4 s) records where its Lease is.
    const op = await testOperator(client, ns.namespace);
    try {
      await eventually('status.operatorLease', async () => {
        const jw = await client.get<KubeObject & { status?: { operatorLease?: unknown } }>(
          'jobfleet.dev/v1alpha1',
          'JobWorker',
          ns.namespace,
          'probe',
        );
        return jw.status?.operatorLease ? true : undefined;
      });
      const running = await kubectl(status, kc);
      expect(running.stdout).toMatch(
        new RegExp(`Operator: {4}op-1 leads, ${lease} renewed \\d+s ago`),
      );
      expect(running.stdout).not.toMatch(/silent|as last written/);
      expect((await kubectl(why, kc)).stdout).not.toMatch(/No operator/);

      // A user who may read JobWorkers here but not Leases: told so, nothing else changes.
      for (const grant of [
        ['create', 'role', 'jobworker-reader', '--verb=get', '--resource=jobworkers.jobfleet.dev'],
        ['create', 'rolebinding', 'jobworker-reader', '--role=jobworker-reader', '--user=reader'],
      ]) {
        const made = await kubectl([...grant, '-n', ns.namespace], kc);
        expect(made.code, made.stderr).toBe(0);
      }
      const reader = await eventually('the reader’s grant', async () => {
        const r = await kubectl([...status, '--as', 'reader'], kc);
        return r.stdout.includes('Name:') ? r : undefined;
      });
      expect(reader.stdout).toContain(`Operator:    unknown: you may not read the ${lease}`);
      expect(reader.stderr).toBe('');
      const readerWhy = await kubectl([...why, '--as', 'reader'], kc);
      expect(readerWhy.code).toBe(0);
      expect(readerWhy.stdout).toMatch(/^Operator unknown: you may not read the Lease/);
    } finally {
      await op.stop();
    }

    // Stopped (as helm uninstall stops it): once the Lease has gone unrenewed past its
    // duration (at least 15 s), status and why say no operator updates the status.
    const stopped = await eventually(
      'the operator reported silent',
      async () => {
        const r = await kubectl(status, kc);
        return r.stdout.includes('Operator:    silent') ? r : undefined;
      },
      45_000,
      2000,
    );
    expect(stopped.code).toBe(1);
    expect(stopped.stdout).toMatch(
      /Phase: {7}\w+ \(as last written: no operator updates this status now, see Operator\)/,
    );
    expect(stopped.stdout).toContain(`silent: no operator has renewed its ${lease} since `);
    expect(stopped.stdout).toContain(`kubectl get pods -n ${ns.namespace}`);
    const silentWhy = await kubectl(why, kc);
    expect(silentWhy.code).toBe(0);
    expect(silentWhy.stdout.split('\n')[0]).toMatch(
      new RegExp(`^No operator has renewed its ${lease} since .*: nothing updates this status`),
    );
    // Where no Lease is: --operator-namespace looks there, and there is none.
    const elsewhere = await kubectl([...status, '--operator-namespace', 'nowhere'], kc);
    expect(elsewhere.code).toBe(1);
    expect(elsewhere.stdout).toContain('Operator:    silent: no Lease nowhere/jobfleet-operator');
  }, 120_000);
});
