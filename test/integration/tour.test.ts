// The README's tour, run as written, in order, on the dev ground (a real
// control plane whose one node runs every pod as a local process: the
// chart's operator and the example worker, from the image names `make
// images` prints; the images themselves are built and pushed to the ground's
// registry, and run under a real kubelet in test/e2e-node/tour.test.ts). The
// only edit is the one the tour asks for: the three URLs in
// examples/secrets.yaml, set to this machine's services.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../ground/control-plane.js';
import { startDevGround, type DevGround } from '../ground/dev-ground.js';
import { createSchema } from '../ground/postgres.js';
import { createVhost } from '../ground/rabbit.js';
import { findServices } from '../ground/services.js';
import { commandsOf, runTour, sh, tourShell } from '../fixtures/tour.js';

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
  ground = await startDevGround({ registry: true });
}, 300_000);

describe("the README's tour", () => {
  it('runs as written on the dev ground and reaches Available with age scaling active', async () => {
    const services = await findServices(process.env, { containers: false });
    const rabbit = await createVhost(services.urls.amqpUrl, services.urls.rabbitMgmtUrl);
    cleanups.push(() => rabbit.cleanup());
    const db = await createSchema(services.urls.pgUrl);
    cleanups.push(() => db.cleanup());

    // The tour's one edit: examples/secrets.yaml with this machine's URLs.
    const tour = tourShell({
      kubeconfig: ground.plane.kubeconfigPath,
      registry: ground.registry!,
      urls: { rabbitmq: rabbit.amqpUrl, rabbitmqManagement: rabbit.mgmtUrl, claimsDb: db.url },
    });
    cleanups.push(() => Promise.resolve(tour.cleanup()));
    tourEnv = tour.env;
    await runTour(tour);
    // the operator that reconciled it is the chart's pod, run from its image's entrypoint
    expect(
      ground.runner.events.some((e) => e.pod.startsWith('jobfleet-') && e.kind === 'ready'),
    ).toBe(true);
  }, 900_000);

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
