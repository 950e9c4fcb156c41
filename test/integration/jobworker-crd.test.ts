// The JobWorker CRD on the real kube-apiserver: defaults applied, and invalid
// objects rejected by the apiserver itself (OpenAPI + CEL, no webhook) with
// the field named.
import * as k8s from '@kubernetes/client-node';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../ground/control-plane.js';
import { useKube, type TestNamespace } from '../ground/index.js';

const example = parse(
  readFileSync(path.join(repoRoot, 'examples/jobworker.yaml'), 'utf8'),
) as k8s.KubernetesObject & { spec: Record<string, unknown> };

let ns: TestNamespace;
let api: k8s.CustomObjectsApi;
beforeAll(async () => {
  ns = await useKube();
  api = ns.kc.makeApiClient(k8s.CustomObjectsApi);
});
afterAll(async () => {
  await ns?.cleanup();
});

const create = (name: string, spec: unknown) =>
  api.createNamespacedCustomObject({
    group: 'jobfleet.dev',
    version: 'v1alpha1',
    namespace: ns.namespace,
    plural: 'jobworkers',
    body: { apiVersion: 'jobfleet.dev/v1alpha1', kind: 'JobWorker', metadata: { name }, spec },
  }) as Promise<{ spec: Record<string, Record<string, unknown>> }>;

function withSpec(patch: (s: Record<string, any>) => void): Record<string, unknown> {
  const s = structuredClone(example.spec) as Record<string, any>;
  patch(s);
  return s;
}

describe('JobWorker CRD', () => {
  it('accepts the example and fills the defaults', async () => {
    const jw = await create('ok', example.spec);
    expect(jw.spec.broker).toMatchObject({ prefetch: 8, queueType: 'quorum' });
    expect(jw.spec.retry).toEqual({
      maxAttempts: 5,
      maxThrottledRetries: 100,
      initialDelaySeconds: 1,
      maxDelaySeconds: 600,
      handlerTimeoutSeconds: 900,
      inDoubt: 'Rerun',
    });
    expect(jw.spec.scaling).toMatchObject({
      minReplicas: 1,
      maxReplicas: 10,
      targetOldestAgeSeconds: 30,
    });
    expect(jw.spec.shutdown).toEqual({ drainDeadlineSeconds: 45 });
    expect(jw.spec.deadLetter).toEqual({ owner: 'team-shipping', maxAgeSeconds: 86400 });
  });

  it.each([
    ['no image', (s: any) => delete s.image, /spec\.image: Required value/],
    [
      'maxReplicas below minReplicas',
      (s: any) => (s.scaling = { minReplicas: 5, maxReplicas: 2 }),
      /spec\.scaling\.maxReplicas: Invalid value.*maxReplicas must be at least minReplicas/,
    ],
    [
      'maxDelay below initialDelay',
      (s: any) => (s.retry = { initialDelaySeconds: 60, maxDelaySeconds: 10 }),
      /spec\.retry\.maxDelaySeconds: Invalid value.*at least initialDelaySeconds/,
    ],
    [
      'no schema versions',
      (s: any) => (s.contract.schemaVersions = []),
      /spec\.contract\.schemaVersions: Invalid value.*at least 1 item/,
    ],
    [
      'duplicate schema versions',
      (s: any) => (s.contract.schemaVersions = [2, 2]),
      /spec\.contract\.schemaVersions\[1\]: Duplicate value: 2/,
    ],
    [
      'a key rule without a placeholder',
      (s: any) => (s.contract.idempotencyKey = 'invoice-send'),
      /spec\.contract\.idempotencyKey: Invalid value: "invoice-send"/,
    ],
    [
      'an illegal queue name',
      (s: any) => (s.broker.queue = 'invoices send!'),
      /spec\.broker\.queue: Invalid value: "invoices send!"/,
    ],
    [
      'a reserved queue name',
      (s: any) => (s.broker.queue = 'amq.gen-1'),
      /spec\.broker\.queue: Invalid value.*reserved by RabbitMQ/,
    ],
    [
      'a secret ref without a key',
      (s: any) => (s.broker.urlSecretRef = { name: 'rabbitmq' }),
      /spec\.broker\.urlSecretRef\.key: Required value/,
    ],
    [
      'prefetch out of range',
      (s: any) => (s.broker.prefetch = 5000),
      /spec\.broker\.prefetch: Invalid value: 5000: spec\.broker\.prefetch in body should be less than or equal to 1000/,
    ],
    [
      'no dead-letter owner',
      (s: any) => delete s.deadLetter.owner,
      /spec\.deadLetter\.owner: Required value/,
    ],
    [
      'a template env entry setting a contract variable',
      (s: any) =>
        (s.template = {
          spec: {
            containers: [{ name: 'worker', env: [{ name: 'JOBFLEET_QUEUE', value: 'other' }] }],
          },
        }),
      /spec\.template\.spec\.containers\[0\]\.env\[0\]: Invalid value.*JOBFLEET_QUEUE is set by the operator from spec\.broker\.queue: set that field/,
    ],
    [
      'an init container setting the revision, which only the operator sets',
      (s: any) =>
        (s.template = {
          spec: {
            initContainers: [
              { name: 'init', image: 'r/i:1', env: [{ name: 'JOBFLEET_REVISION', value: '7' }] },
            ],
          },
        }),
      /spec\.template\.spec\.initContainers\[0\]\.env\[0\]: Invalid value.*JOBFLEET_REVISION is the operator’s own .*: remove this entry/,
    ],
    [
      'a sidecar taking the metrics port',
      (s: any) =>
        (s.template = {
          spec: {
            containers: [
              { name: 'worker' },
              { name: 'proxy', image: 'r/proxy:1', ports: [{ containerPort: 9464 }] },
            ],
          },
        }),
      /spec\.template\.spec\.containers\[1\]\.ports\[0\]: Invalid value.*port 9464, named metrics, is the worker’s/,
    ],
    [
      'a template label the operator sets',
      (s: any) =>
        (s.template = { metadata: { labels: { team: 'a', 'jobfleet.dev/jobworker': 'other' } } }),
      /spec\.template\.metadata\.labels: Invalid value.*sets jobfleet\.dev\/jobworker, a label the operator sets/,
    ],
    [
      'a template grace period (the drain deadline sets it)',
      (s: any) => (s.template = { spec: { terminationGracePeriodSeconds: 5 } }),
      /spec\.template\.spec\.terminationGracePeriodSeconds: Invalid value.*spec\.shutdown\.drainDeadlineSeconds/,
    ],
    [
      'a worker container image (spec.image sets it)',
      (s: any) => (s.template = { spec: { containers: [{ name: 'worker', image: 'r/other:2' }] } }),
      /spec\.template\.spec\.containers\[0\]\.image: Invalid value.*spec\.image: set it there/,
    ],
    [
      'a privileged worker',
      (s: any) =>
        (s.template = {
          spec: { containers: [{ name: 'worker', securityContext: { privileged: true } }] },
        }),
      /spec\.template\.spec\.containers\[0\]\.securityContext: Invalid value.*restricted Pod Security profile/,
    ],
    [
      'both template and the deprecated podTemplate',
      (s: any) => {
        s.template = { spec: { priorityClassName: 'high' } };
        s.podTemplate = { labels: { team: 'a' } };
      },
      /spec\.podTemplate: Invalid value.*set spec\.template or the deprecated spec\.podTemplate, not both/,
    ],
  ])('rejects %s, naming the field', async (_what, patch, message) => {
    const err = await create('bad', withSpec(patch)).then(
      () => undefined,
      (e: k8s.ApiException<string>) => e,
    );
    expect(err?.code).toBe(422);
    expect((JSON.parse(String(err?.body)) as { message: string }).message).toMatch(message);
  });

  it('accepts the full example: a whole pod template (pull secrets, a CA volume, spread, priority)', async () => {
    const full = parse(
      readFileSync(path.join(repoRoot, 'examples/jobworker-full.yaml'), 'utf8'),
    ) as { spec: Record<string, any> };
    const jw = await create('full', full.spec);
    expect(jw.spec.template).toEqual(full.spec.template);
  });

  it("rejects a name ending in '-cohort' (another JobWorker's cohort Deployment), saying why", async () => {
    const err = await create(
      'shipper-cohort',
      withSpec(() => undefined),
    ).then(
      () => undefined,
      (e: k8s.ApiException<string>) => e,
    );
    expect(err?.code).toBe(422);
    expect((JSON.parse(String(err?.body)) as { message: string }).message).toMatch(
      /metadata\.name may not end in '-cohort'.*cohort Deployment/,
    );
    await create(
      'shipper-cohorts',
      withSpec(() => undefined),
    );
  });
});
