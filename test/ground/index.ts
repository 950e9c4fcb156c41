// What integration tests import: each `use*` gives an isolated slice of a real
// service (vhost, schema, namespace) and throws, naming the service and how to
// start it, when the service is missing. Suites fail; they never skip.
import { inject } from 'vitest';
import { createNamespace, type TestNamespace } from './kube.js';
import { createSchema, type PgSchema } from './postgres.js';
import { createVhost, type RabbitVhost } from './rabbit.js';
import type { BrokerName } from './global-setup.js';
import type { Missing } from './services.js';

function need(service: keyof Missing) {
  const ground = inject('ground');
  const problem = ground.missing[service];
  if (problem) throw new Error(problem);
  return ground;
}

/** The broker of this project's suites (the machine's, or RabbitMQ 4): its URLs, or why not. */
export function rabbitUrls(): { amqpUrl: string; rabbitMgmtUrl: string; name: BrokerName } {
  const name = inject('broker') ?? 'machine';
  const b = inject('ground').brokers[name];
  if (b.missing) throw new Error(b.missing);
  return { amqpUrl: b.amqpUrl, rabbitMgmtUrl: b.rabbitMgmtUrl, name };
}

/** The queue type this project's workers declare: classic on the machine's broker, quorum on 4. */
export function queueType(): 'classic' | 'quorum' {
  return inject('queueType') ?? 'classic';
}

export function useRabbit(): Promise<RabbitVhost> {
  const { amqpUrl, rabbitMgmtUrl } = rabbitUrls();
  return createVhost(amqpUrl, rabbitMgmtUrl);
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
