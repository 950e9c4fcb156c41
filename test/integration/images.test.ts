// The Dockerfiles are not built here (no Docker engine), so this checks what
// can be checked: every file they COPY exists, they are multi-stage, non-root
// and on Node LTS, and their entrypoints — compiled exactly as the images
// compile them — run with node: the operator against the real kube-apiserver,
// the example worker on real RabbitMQ and PostgreSQL.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, repoRoot } from '../ground/control-plane.js';
import { eventually } from '../ground/eventually.js';
import { useKube } from '../ground/index.js';
import { QUEUE, harness } from './worker-harness.js';

const run = promisify(execFile);
const OUT = path.join(repoRoot, '.cache/build-images');
const DOCKERFILES = ['Dockerfile', 'examples/worker/Dockerfile'];

function parseDockerfile(file: string) {
  const lines = readFileSync(path.join(repoRoot, file), 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  return {
    froms: lines.filter((l) => l.startsWith('FROM ')).map((l) => l.split(/\s+/)[1]!),
    copies: lines
      .filter((l) => l.startsWith('COPY ') && !l.includes('--from='))
      .flatMap((l) => l.split(/\s+/).slice(1, -1)),
    user: lines
      .filter((l) => l.startsWith('USER '))
      .at(-1)
      ?.split(/\s+/)[1],
    entrypoint: JSON.parse(
      lines.find((l) => l.startsWith('ENTRYPOINT '))!.slice('ENTRYPOINT '.length),
    ) as string[],
  };
}

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
  it.each(DOCKERFILES)(
    '%s: multi-stage, Node LTS, non-root, and every file it copies exists',
    (file) => {
      const d = parseDockerfile(file);
      expect(d.froms.length).toBeGreaterThanOrEqual(2);
      for (const f of d.froms) expect(f).toMatch(/^node:24-/); // the active LTS line
      expect(d.user).toBeDefined();
      expect(d.user).not.toMatch(/^(0|root)(:|$)/);
      expect(d.copies.length).toBeGreaterThan(0);
      for (const src of d.copies) expect(existsSync(path.join(repoRoot, src)), src).toBe(true);
      expect(existsSync(built(d.entrypoint[1]!)), d.entrypoint[1]).toBe(true);
    },
  );

  it("the operator's entrypoint runs: it serves /healthz against the real apiserver and exits 0 on SIGTERM", async () => {
    const ns = await useKube();
    try {
      const port = await freePort();
      const { proc, exited } = start(parseDockerfile('Dockerfile').entrypoint, {
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
      const { proc, exited } = start(parseDockerfile('examples/worker/Dockerfile').entrypoint, {
        JOBFLEET_QUEUE: QUEUE,
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
