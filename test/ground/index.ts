// What integration tests import: each `use*` gives an isolated slice of a real
// service (vhost, schema, namespace) and throws, naming the service and how to
// start it, when the service is missing. Suites fail; they never skip.
import { inject } from 'vitest';
import { createNamespace, type TestNamespace } from './kube.js';
import { createSchema, type PgSchema } from './postgres.js';
import { createVhost, type RabbitVhost } from './rabbit.js';
import type { Missing } from './services.js';

function need(service: keyof Missing) {
  const ground = inject('ground');
  const problem = ground.missing[service];
  if (problem) throw new Error(problem);
  return ground;
}

export function useRabbit(): Promise<RabbitVhost> {
  const g = need('rabbitmq');
  return createVhost(g.amqpUrl, g.rabbitMgmtUrl);
}

export function usePostgres(): Promise<PgSchema> {
  const g = need('postgres');
  return createSchema(g.pgUrl);
}

export function useKube(): Promise<
  TestNamespace & { runsWorkloads: boolean; kubeconfigPath: string }
> {
  const g = need('kube');
  return createNamespace(g.kubeconfigPath).then((ns) => ({
    ...ns,
    runsWorkloads: g.runsWorkloads,
    kubeconfigPath: g.kubeconfigPath,
  }));
}

export type { PgSchema, RabbitVhost, TestNamespace };
