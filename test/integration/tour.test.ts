// The README's tour, run as written, in order, on the dev ground (a real
// control plane whose one node runs every pod as a local process: the
// chart's operator and the example worker, from the image names `make
// images` prints; the images themselves are built and pushed to the ground's
// registry, and run under a real kubelet in test/e2e-node/tour.test.ts). The
// only edit is the one the tour asks for: the three URLs in
// examples/secrets.yaml, set to this machine's services. Every other shell
// block of the docs runs after the tour on the real node (test/docs/).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDevGround, type DevGround } from '../ground/dev-ground.js';
import { createSchema } from '../ground/postgres.js';
import { createVhost } from '../ground/rabbit.js';
import { findServices } from '../ground/services.js';
import { runTour, tourShell } from '../fixtures/tour.js';

let ground: DevGround;
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
    await runTour(tour);
    // the operator that reconciled it is the chart's pod, run from its image's entrypoint
    expect(
      ground.runner.events.some((e) => e.pod.startsWith('jobfleet-') && e.kind === 'ready'),
    ).toBe(true);
  }, 900_000);
});
