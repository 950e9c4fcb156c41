// The kubectl plugin through the real kubectl: discovered as `kubectl-jobworker`
// on PATH, and talking to the cluster kubectl's own flags name — --context and
// --kubeconfig honoured, never silently replaced by KUBECONFIG's current context.
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parse, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubeClient } from '../../src/kube/client.js';
import { assetsDir, freePort, repoRoot } from '../ground/control-plane.js';
import { useKube } from '../ground/index.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

const kubectl = (args: string[], env: NodeJS.ProcessEnv) =>
  new Promise<Run>((resolve) =>
    execFile(
      path.join(assetsDir(), 'kubectl'),
      args,
      { env, timeout: 60_000 },
      (err, stdout, stderr) =>
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr }),
    ),
  );

describe('kubectl jobworker, as kubectl runs it', () => {
  let ns: Awaited<ReturnType<typeof useKube>>;
  let env: NodeJS.ProcessEnv;
  /** a kubeconfig whose current context points nowhere; `ground` names the real cluster */
  let twoContexts: string;
  let ground: string;

  beforeAll(async () => {
    ns = await useKube();
    const work = mkdtempSync(path.join(os.tmpdir(), 'jobfleet-plugin-'));
    const bin = path.join(work, 'bin');
    mkdirSync(bin);
    symlinkSync(
      path.join(repoRoot, 'bin/kubectl-jobworker.mjs'),
      path.join(bin, 'kubectl-jobworker'),
    );
    env = {
      HOME: work,
      PATH: `${bin}:${path.dirname(process.execPath)}:/usr/local/bin:/usr/bin:/bin`,
    };
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

  it('is discovered by kubectl and prints its version', async () => {
    const list = await kubectl(['plugin', 'list'], env);
    expect(list.stdout).toContain('kubectl-jobworker');
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
});
