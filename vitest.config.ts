// Two projects: `unit` (pure logic, no services, seconds) and `integration`
// (real RabbitMQ, PostgreSQL and kube-apiserver, found or started by the
// global setup in test/ground/).
import { defineConfig } from 'vitest/config';

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
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          sequence: { groupOrder: 1 },
          environment: 'node',
          globalSetup: ['test/ground/global-setup.ts'],
          testTimeout: 60_000,
          hookTimeout: 120_000,
          // Two cores: file-level parallelism beyond 2 only adds contention.
          maxWorkers: 2,
        },
      },
    ],
  },
});
