// Runs once per `vitest run` for each integration project: finds (or starts)
// RabbitMQ and PostgreSQL, starts one Kubernetes control plane (or uses the
// cluster named by KUBECONFIG when USE_EXISTING_CLUSTER=true), installs the
// CRDs from crds/, and hands the addresses to the test files. A service that
// cannot be had is recorded; the suites that need it fail naming it.
//
// Two projects run the broker-facing suites: `integration` on the machine's
// RabbitMQ, `integration-rabbitmq4` on RabbitMQ 4 from the chroot
// (build-rabbitmq.sh) with quorum queues. Both share one ground: the first
// project to start makes it, the last to finish tears it down.
import type { TestProject } from 'vitest/node';
import { freePort, startControlPlane, type ControlPlane } from './control-plane.js';
import { installCrds } from './kube.js';
import { rabbitmq4Root, startRabbitNode, type RabbitNode } from './rabbitmq-node.js';
import { findServices, rabbitProblem, type Missing, type ServiceUrls } from './services.js';

/** Which broker a project's suites run on. */
export type BrokerName = 'machine' | 'rabbitmq4';

export interface BrokerInfo {
  amqpUrl: string;
  rabbitMgmtUrl: string;
  /** why it cannot be used (the suites then fail with this) */
  missing?: string;
}

export interface GroundInfo extends ServiceUrls {
  kubeconfigPath: string;
  runsWorkloads: boolean;
  missing: Missing;
  brokers: Record<BrokerName, BrokerInfo>;
}

declare module 'vitest' {
  export interface ProvidedContext {
    ground: GroundInfo;
    /** the broker this project's suites use (vitest.config.ts) */
    broker: BrokerName;
    /** the queue type the workers of this project's suites declare */
    queueType: 'classic' | 'quorum';
  }
}

interface Shared {
  info: Promise<GroundInfo>;
  users: number;
  stop(): Promise<void>;
}
const KEY = Symbol.for('jobfleet.test-ground');
const registry = globalThis as unknown as Record<symbol, Shared | undefined>;

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const shared = (registry[KEY] ??= makeGround());
  shared.users++;
  project.provide('ground', await shared.info);
  return async () => {
    if (--shared.users > 0) return;
    registry[KEY] = undefined;
    await shared.stop();
  };
}

function makeGround(): Shared {
  const stops: Array<() => Promise<unknown>> = [];
  const info = (async (): Promise<GroundInfo> => {
    const [services, rabbitmq4] = await Promise.all([findServices(), startRabbitmq4()]);
    stops.push(() => services.stop());
    const node = rabbitmq4.node;
    if (node) stops.push(() => node.stop().then(() => node.removeData()));
    const missing: Missing = { ...services.missing };
    let plane: ControlPlane | undefined;
    let kubeconfigPath = '';
    let runsWorkloads = false;
    try {
      if (process.env.USE_EXISTING_CLUSTER === 'true') {
        if (!process.env.KUBECONFIG) throw new Error('USE_EXISTING_CLUSTER=true needs KUBECONFIG');
        kubeconfigPath = process.env.KUBECONFIG;
        runsWorkloads = true;
      } else {
        plane = await startControlPlane({ beforeControllers: installCrds });
        stops.push(() => plane?.stop() ?? Promise.resolve());
        kubeconfigPath = plane.kubeconfigPath;
        runsWorkloads = plane.runsWorkloads;
      }
      // Again for an existing cluster; a no-op apply for ours.
      await installCrds(kubeconfigPath);
    } catch (err) {
      missing.kube = `Kubernetes control plane unavailable: ${(err as Error).message}`;
    }
    return {
      ...services.urls,
      kubeconfigPath,
      runsWorkloads,
      missing,
      brokers: {
        machine: {
          amqpUrl: services.urls.amqpUrl,
          rabbitMgmtUrl: services.urls.rabbitMgmtUrl,
          missing: services.missing.rabbitmq,
        },
        rabbitmq4: rabbitmq4.info,
      },
    };
  })();
  return {
    info,
    users: 0,
    stop: async () => {
      await info.catch(() => undefined);
      await Promise.all(stops.map((s) => s().catch(() => undefined)));
    },
  };
}

/**
 * RabbitMQ 4: the broker at JOBFLEET_TEST_AMQP4_URL (with
 * JOBFLEET_TEST_RABBIT4_MGMT_URL) when set, else a node started from the
 * chroot on ports of its own.
 */
async function startRabbitmq4(
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ info: BrokerInfo; node?: RabbitNode }> {
  if (env.JOBFLEET_TEST_AMQP4_URL) {
    const info = {
      amqpUrl: env.JOBFLEET_TEST_AMQP4_URL,
      rabbitMgmtUrl: env.JOBFLEET_TEST_RABBIT4_MGMT_URL ?? '',
    };
    return { info: { ...info, missing: await rabbitProblem(info) } };
  }
  const root = rabbitmq4Root(env);
  const none = { amqpUrl: '', rabbitMgmtUrl: '' };
  if (!root) {
    return {
      info: {
        ...none,
        missing:
          'RabbitMQ 4 is not built: run `make rabbitmq4` (Debian 13 rabbitmq-server in a chroot under .cache/, needs root) or set JOBFLEET_TEST_AMQP4_URL and JOBFLEET_TEST_RABBIT4_MGMT_URL',
      },
    };
  }
  try {
    const node = await startRabbitNode({
      root,
      name: `ground-${process.pid}`,
      amqpPort: await freePort(),
      mgmtPort: await freePort(),
      distPort: await freePort(),
      epmdPort: await freePort(),
      reapWith: process.pid,
      // as docs/scaling.md advises: the broker stamps messages their producers did not
      config: ['message_interceptors.incoming.set_header_timestamp.overwrite = false'],
    });
    return { info: { amqpUrl: node.amqpUrl, rabbitMgmtUrl: node.mgmtUrl }, node };
  } catch (err) {
    return { info: { ...none, missing: `RabbitMQ 4 did not start: ${(err as Error).message}` } };
  }
}
