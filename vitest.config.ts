// Four projects: `unit` (pure logic, no services, seconds); `integration`
// (real RabbitMQ, PostgreSQL and kube-apiserver, found or started by the
// global setup in test/ground/) on the machine's RabbitMQ;
// `integration-rabbitmq4`, every suite that talks to a broker again on
// RabbitMQ 4 with quorum queues (the broker is a suite parameter: `useRabbit()`
// and `queueType()` read it); and `e2e-node`, the suites that run the images
// on a real node (a kubelet, containerd and runc: test/ground/real-node.ts),
// one file at a time; last `docs`, every shell block of the docs run as
// written on the real node (test/docs/).
import { defineConfig } from 'vitest/config';

const integration = {
  environment: 'node' as const,
  globalSetup: ['test/ground/global-setup.ts'],
  testTimeout: 60_000,
  hookTimeout: 120_000,
  // Two cores: file-level parallelism beyond 2 only adds contention.
  maxWorkers: 2,
};

/**
 * Suites of RabbitMQ 4 nodes of their own (a cluster, a broker-wide alarm), and the in-doubt
 * soak's short form (on the default quorum queue: its fault matrix runs on both brokers): they
 * run once, there.
 */
const rabbitmq4Only = [
  'rabbitmq-cluster',
  'rabbitmq-alarms',
  'private-ca',
  'in-doubt-soak',
  'outbox-operator',
  'outbox-soak',
].map((f) => `test/integration/${f}.test.ts`);

/**
 * Suites that never talk to a broker, or (make-dev) only to the machine's one, as `make dev`
 * prints it, whichever the project's broker: they run once.
 */
const brokerless = [
  'chart',
  'control-plane-teardown',
  'examples',
  'jobworker-crd',
  'leadership',
  'make-dev',
  'operator',
  'packages',
  'plugin',
  'pod-template',
].map((f) => `test/integration/${f}.test.ts`);

export default defineConfig({
  test: {
    reporters: process.env.CI ? ['default', 'json'] : ['default'],
    outputFile: { json: 'test-results/vitest.json' },
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          sequence: { groupOrder: 0 },
          environment: 'node',
        },
      },
      {
        test: {
          ...integration,
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          exclude: rabbitmq4Only,
          sequence: { groupOrder: 1 },
          provide: { broker: 'machine' as const, queueType: 'classic' as const },
        },
      },
      {
        test: {
          ...integration,
          name: 'integration-rabbitmq4',
          include: ['test/integration/**/*.test.ts'],
          exclude: brokerless,
          sequence: { groupOrder: 2 },
          provide: { broker: 'rabbitmq4' as const, queueType: 'quorum' as const },
        },
      },
      {
        test: {
          ...integration,
          name: 'e2e-node',
          include: ['test/e2e-node/**/*.test.ts'],
          // one real node per machine: its files run one after the other
          maxWorkers: 1,
          fileParallelism: false,
          testTimeout: 300_000,
          hookTimeout: 600_000,
          sequence: { groupOrder: 3 },
          provide: { broker: 'rabbitmq4' as const, queueType: 'quorum' as const },
        },
      },
      {
        test: {
          ...integration,
          name: 'docs',
          include: ['test/docs/**/*.test.ts'],
          // the real node again, after e2e-node's files are done with it
          maxWorkers: 1,
          fileParallelism: false,
          testTimeout: 1_800_000,
          hookTimeout: 600_000,
          sequence: { groupOrder: 4 },
          provide: { broker: 'rabbitmq4' as const, queueType: 'quorum' as const },
        },
      },
    ],
  },
});
