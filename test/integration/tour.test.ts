// The README's tour, run as written, in order, on the dev ground (a real
// control plane whose one node runs every pod as a local process: the
// chart's operator and the example worker, from the image names `make
// images` prints). The only edit is the one the tour asks for: the three
// URLs in examples/secrets.yaml, set to this machine's services.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assetsDir, repoRoot } from '../ground/control-plane.js';
import { startDevGround, type DevGround } from '../ground/dev-ground.js';
import { createSchema } from '../ground/postgres.js';
import { createVhost } from '../ground/rabbit.js';
import { findServices } from '../ground/services.js';

/** A shell block's commands: continuation lines joined, comments dropped. */
function commandsOf(block: string): string[] {
  return block
    .replace(/\\\n\s*/g, '')
    .split('\n')
    .map((l) => l.replace(/\s+#.*$/, '').trim())
    .filter(Boolean);
}

/** The shell commands of the README's tour block. */
function tourCommands(): string[] {
  const readme = readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## A five-minute tour'));
  return commandsOf(/```sh\n([\s\S]*?)```/.exec(section)![1]!);
}

/**
 * The how-to pages in the order docs/README.md lists them, then the upgrade
 * and the uninstall (last: it removes the operator), each with its
 * `sh runnable` blocks' commands.
 */
function guideCommands(): Array<{ page: string; commands: string[] }> {
  const index = readFileSync(path.join(repoRoot, 'docs/README.md'), 'utf8');
  const howTos = [...index.matchAll(/\]\((how-to\/[\w-]+\.md)\)/g)].map((m) => m[1]!);
  const pages = [...new Set(howTos), 'upgrade.md', 'uninstall.md'];
  return pages.map((page) => {
    const text = readFileSync(path.join(repoRoot, 'docs', page), 'utf8');
    const blocks = [...text.matchAll(/```sh runnable\n([\s\S]*?)```/g)].map((m) => m[1]!);
    return { page, commands: blocks.flatMap(commandsOf) };
  });
}

let ground: DevGround;
/** the environment the tour ran in: the how-to guides run on after it in the same */
let tourEnv: NodeJS.ProcessEnv | undefined;
const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
  await ground?.stop();
});
beforeAll(async () => {
  ground = await startDevGround();
}, 120_000);

function sh(command: string, env: NodeJS.ProcessEnv) {
  return new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
    execFile(
      'bash',
      ['-c', command],
      { cwd: repoRoot, env, timeout: 240_000 },
      (err, stdout, stderr) =>
        resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    ),
  );
}

describe("the README's tour", () => {
  it('runs as written on the dev ground and reaches Available with age scaling active', async () => {
    const services = await findServices(process.env, { containers: false });
    const rabbit = await createVhost(services.urls.amqpUrl, services.urls.rabbitMgmtUrl);
    cleanups.push(() => rabbit.cleanup());
    const db = await createSchema(services.urls.pgUrl);
    cleanups.push(() => db.cleanup());

    // The tour's one edit: examples/secrets.yaml with this machine's URLs.
    const work = mkdtempSync(path.join(os.tmpdir(), 'jobfleet-tour-'));
    const urls = [rabbit.amqpUrl, rabbit.mgmtUrl, db.url];
    let i = 0;
    const secrets = readFileSync(path.join(repoRoot, 'examples/secrets.yaml'), 'utf8').replace(
      /^(\s+url: ).*$/gm,
      (_, prefix: string) => `${prefix}${urls[i++]}`,
    );
    expect(i).toBe(3);
    writeFileSync(path.join(work, 'secrets.yaml'), secrets);
    // The tour installs the plugin into ~/.local/bin: a HOME of its own, with that on PATH.
    const env = {
      ...process.env,
      HOME: work,
      KUBECONFIG: ground.plane.kubeconfigPath,
      PATH: `${assetsDir()}:${path.join(work, '.local/bin')}:${path.dirname(process.execPath)}:/usr/local/bin:/usr/bin:/bin`,
    };

    tourEnv = env;
    const commands = tourCommands();
    expect(commands[0]).toMatch(/^make images /);
    for (const written of commands) {
      const command = written.replace('examples/secrets.yaml', path.join(work, 'secrets.yaml'));
      const r = await sh(command, env);
      expect(r.code, `${written}\n${r.stdout}\n${r.stderr}`).toBe(0);
      if (written.startsWith('make images'))
        expect(r.stdout).toContain('localhost:5000/jobfleet-operator:dev');
      if (written.startsWith('kubectl wait')) {
        const jw = JSON.parse(
          (await sh('kubectl get jw order-shipper -n shipping -o json', env)).stdout,
        ) as {
          status: { conditions: Array<{ type: string; status: string }>; ageSource?: string };
        };
        const status = (type: string) => jw.status.conditions.find((c) => c.type === type)?.status;
        expect(status('Available')).toBe('True');
        expect(status('ScalingActive')).toBe('True');
        expect(jw.status.ageSource).toBeDefined();
      }
      if (written.startsWith('kubectl get jw'))
        expect(r.stdout).toMatch(/order-shipper\s+\d+\s+\d+\s+\d+s\s+\w+/);
    }
    // the operator that reconciled it is the chart's pod, run from its image's entrypoint
    expect(
      ground.runner.events.some((e) => e.pod.startsWith('jobfleet-') && e.kind === 'ready'),
    ).toBe(true);
  }, 300_000);

  it('then the runnable blocks of the how-to guides (in the order docs/README.md lists them), the upgrade and the uninstall, as written', async () => {
    expect(tourEnv, 'the tour ran first').toBeDefined();
    const guides = guideCommands();
    // every guide but the one that writes code has commands to run
    expect(guides.filter((g) => g.commands.length).map((g) => g.page)).toEqual(
      guides.map((g) => g.page).filter((p) => p !== 'how-to/write-a-worker.md'),
    );
    for (const { page, commands } of guides)
      for (const command of commands) {
        const r = await sh(command, tourEnv!);
        expect(r.code, `${page}: ${command}\n${r.stdout}\n${r.stderr}`).toBe(0);
      }
  }, 900_000);
});
