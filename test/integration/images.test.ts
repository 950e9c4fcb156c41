// The fast checks of the Dockerfile, without building it (the images themselves
// are built by `make images` and run under a real kubelet in test/e2e-node/):
// every file it COPYs exists, its targets are multi-stage, non-root and on
// Node LTS, and their entrypoints — compiled exactly as the image compiles
// them — run with node: the operator against the real kube-apiserver, the
// example worker on real RabbitMQ and PostgreSQL.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, repoRoot } from '../ground/control-plane.js';
import { eventually } from '../ground/eventually.js';
import { queueType, useKube } from '../ground/index.js';
import { QUEUE, harness } from './worker-harness.js';

const run = promisify(execFile);
const OUT = path.join(repoRoot, '.cache/build-images');
/** The Dockerfile's stages: name, base (build arguments at their defaults), and their instructions (comments dropped). */
function stages(): Array<{ name: string; from: string; lines: string[] }> {
  const out: Array<{ name: string; from: string; lines: string[] }> = [];
  const args: Record<string, string> = {};
  for (const l of readFileSync(path.join(repoRoot, 'Dockerfile'), 'utf8').split('\n')) {
    const line = l.trim();
    if (!line || line.startsWith('#')) continue;
    const arg = /^ARG (\w+)=(\S+)$/.exec(line);
    const from = /^FROM (\S+) AS (\S+)$/.exec(line);
    if (arg && !out.length) args[arg[1]!] = arg[2]!;
    else if (from)
      out.push({
        from: from[1]!.replace(/\$\{(\w+)\}/g, (_, a: string) => args[a] ?? ''),
        name: from[2]!,
        lines: [],
      });
    else out.at(-1)?.lines.push(line);
  }
  return out;
}

/** A target as it ends up: its instructions after those of the stages it builds on. */
function target(name: string) {
  const all = stages();
  const chain: typeof all = [];
  for (let s = all.find((x) => x.name === name); s; s = all.find((x) => x.name === s.from))
    chain.unshift(s);
  const lines = chain.flatMap((s) => s.lines);
  const entry = lines.findLast((l) => l.startsWith('ENTRYPOINT '));
  return {
    base: chain[0]!.from,
    user: lines.findLast((l) => l.startsWith('USER '))?.split(/\s+/)[1],
    entrypoint: JSON.parse(entry!.slice('ENTRYPOINT '.length)) as string[],
  };
}

const TARGETS = ['operator', 'example-worker'];

/** dist/… in the image is the build output here (same tsconfig, same sources). */
const built = (p: string) => path.join(OUT, p.replace(/^dist\//, ''));

beforeAll(async () => {
  rmSync(OUT, { recursive: true, force: true });
  await run(process.execPath, [
    path.join(repoRoot, 'node_modules/typescript/bin/tsc'),
    '-p',
    path.join(repoRoot, 'tsconfig.build.json'),
    '--outDir',
    OUT,
  ]);
}, 120_000);
afterAll(() => rmSync(OUT, { recursive: true, force: true }));

const procs: ChildProcess[] = [];
afterAll(() => {
  for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
});

function start(entry: string[], env: Record<string, string>) {
  const [cmd, ...args] = entry;
  expect(cmd).toBe('node');
  const proc = spawn(
    process.execPath,
    args.map((a) => (a.startsWith('dist/') ? built(a) : a)),
    {
      cwd: repoRoot,
      env: { ...process.env, LOG_LEVEL: 'silent', ...env },
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  procs.push(proc);
  const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
  return { proc, exited };
}

describe('the images', () => {
  it('the Dockerfile: every file it copies exists; the build stage compiles what the targets run', () => {
    const all = stages();
    const copies = all
      .flatMap((s) => s.lines)
      .filter((l) => l.startsWith('COPY ') && !l.includes('--from='))
      .flatMap((l) => l.split(/\s+/).slice(1, -1));
    expect(copies.length).toBeGreaterThan(0);
    for (const src of copies) expect(existsSync(path.join(repoRoot, src)), src).toBe(true);
    expect(all.map((s) => s.name)).toEqual(['build', 'runtime', 'example-worker', 'operator']);
  });

  it.each(TARGETS)('target %s: multi-stage, Node LTS, non-root, its entrypoint built', (name) => {
    const t = target(name);
    expect(t.base).toMatch(/^node:24-/); // the active LTS line
    expect(t.user).toBeDefined();
    expect(t.user).not.toMatch(/^(0|root)(:|$)/);
    expect(existsSync(built(t.entrypoint[1]!)), t.entrypoint[1]).toBe(true);
  });

  it("the operator's entrypoint runs: it serves /healthz against the real apiserver and exits 0 on SIGTERM", async () => {
    const ns = await useKube();
    try {
      const port = await freePort();
      const { proc, exited } = start(target('operator').entrypoint, {
        KUBECONFIG: ns.kubeconfigPath,
        JOBFLEET_WATCH_NAMESPACES: ns.namespace,
        POD_NAMESPACE: ns.namespace,
        POD_NAME: 'image-check',
        JOBFLEET_OPERATOR_PORT: String(port),
      });
      await eventually('/healthz', async () =>
        (await fetch(`http://127.0.0.1:${port}/healthz`)).ok ? true : undefined,
      );
      proc.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      await ns.cleanup();
    }
  });

  it("the example worker's entrypoint runs: it completes a job and exits 0 on SIGTERM", async () => {
    const h = await harness();
    try {
      const port = await freePort();
      const { proc, exited } = start(target('example-worker').entrypoint, {
        JOBFLEET_QUEUE: QUEUE,
        JOBFLEET_QUEUE_TYPE: queueType(),
        JOBFLEET_BROKER_URL: h.rabbit.amqpUrl,
        JOBFLEET_CLAIMS_URL: h.db.url,
        JOBFLEET_METRICS_PORT: String(port),
        CARRIER_LATENCY_MS: '10',
      });
      await eventually('/readyz', async () =>
        (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined))?.ok
          ? true
          : undefined,
      );
      const { key } = await h.job('img-1', { type: 'order.ship', schemaVersion: 2 });
      await eventually('the job completed', async () =>
        (await h.claim(key))?.state === 'completed' ? true : undefined,
      );
      expect((await h.claim(key))?.result).toEqual({ trackingId: `trk-${key}` });
      proc.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      await h.cleanup();
    }
  });
});
