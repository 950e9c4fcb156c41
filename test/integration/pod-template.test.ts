// spec.template on the real kube-apiserver: a production namespace's pod
// (private registry, a CA volume, zone spread, priority, an init container
// and a sidecar) reaches the Deployment whole; and a JobWorker written with
// the deprecated podTemplate, reconciled by the operator as it was before
// spec.template existed, keeps its pods when that operator is replaced by
// this one (no revision, no rollout).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseSpec, type JobWorker } from '../../src/api/jobworker.js';
import { KubeClient, type KubeObject } from '../../src/kube/client.js';
import { templateHash } from '../../src/reconcile/children/desired.js';
import type { Operator } from '../../src/operator.js';
import { operatorProcess, testOperator, urlSecrets } from '../fixtures/operator.js';
import { repoRoot } from '../ground/control-plane.js';
import { eventually } from '../ground/eventually.js';
import { useKube } from '../ground/index.js';
import golden from '../unit/__golden__/pod-template-before-spec-template.json' with { type: 'json' };

/** The last commit before spec.template: the operator users upgrade from. */
const BEFORE_TEMPLATE = '881263ef3fa0fde931a1cd3aa68f4e8c98fd2665';

let ns: Awaited<ReturnType<typeof useKube>>;
let client: KubeClient;
const cleanups: Array<() => Promise<void> | void> = [];
beforeEach(async () => {
  ns = await useKube();
  client = new KubeClient(ns.kc);
  await urlSecrets(client, ns.namespace, {
    rabbitmq: 'amqp://user:pw@rabbitmq:5672',
    'rabbitmq-mgmt': 'http://user:pw@rabbitmq:15672',
    'claims-db': 'postgres://user:pw@db/claims',
  });
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await ns?.cleanup();
});

async function operator(identity = 'op-1'): Promise<Operator> {
  const op = await testOperator(client, ns.namespace, { identity });
  cleanups.push(() => op.stop());
  return op;
}

const applyJobWorker = (name: string, spec: Record<string, unknown>) =>
  client.apply(
    {
      apiVersion: 'jobfleet.dev/v1alpha1',
      kind: 'JobWorker',
      metadata: { name, namespace: ns.namespace },
      spec,
    },
    'test-user',
  );
const deployment = (name: string) =>
  client.find<KubeObject & { spec: any; status?: any }>(
    'apps/v1',
    'Deployment',
    ns.namespace,
    name,
  );
const jobWorker = (name: string) =>
  client.get<KubeObject & { status?: any }>(
    'jobfleet.dev/v1alpha1',
    'JobWorker',
    ns.namespace,
    name,
  );
const reasons = async () =>
  (await client.list<KubeObject & { reason: string }>('v1', 'Event', ns.namespace)).items.map(
    (e) => e.reason,
  );
const spec = (over: Record<string, unknown>) => ({
  ...golden.rawSpec,
  podTemplate: undefined,
  broker: {
    ...golden.rawSpec.broker,
    managementUrlSecretRef: { name: 'rabbitmq-mgmt', key: 'url' },
  },
  ...over,
});

describe('spec.template', () => {
  it('a production pod reaches the Deployment whole: pull secrets, a CA volume, spread, priority, init and sidecar', async () => {
    await operator();
    const topologySpreadConstraints = [
      {
        maxSkew: 1,
        topologyKey: 'topology.kubernetes.io/zone',
        whenUnsatisfiable: 'ScheduleAnyway',
        labelSelector: { matchLabels: { 'jobfleet.dev/jobworker': 'shipper' } },
      },
    ];
    const initContainers = [
      { name: 'wait-for-ca', image: 'r/busybox:1', command: ['test', '-s', '/ca/ca.crt'] },
    ];
    const sidecar = { name: 'sql-proxy', image: 'r/sql-proxy:2', args: ['--port=5432'] };
    await applyJobWorker(
      'shipper',
      spec({
        template: {
          metadata: {
            labels: { team: 'shipping' },
            annotations: { 'example.com/owner': 'shipping' },
          },
          spec: {
            imagePullSecrets: [{ name: 'registry-credentials' }],
            priorityClassName: 'workers-high',
            topologySpreadConstraints,
            initContainers,
            containers: [
              {
                name: 'worker',
                env: [{ name: 'JOBFLEET_TLS_CA_FILE', value: '/etc/jobfleet/ca/ca.crt' }],
                volumeMounts: [
                  { name: 'private-ca', mountPath: '/etc/jobfleet/ca', readOnly: true },
                ],
              },
              sidecar,
            ],
            volumes: [{ name: 'private-ca', configMap: { name: 'private-ca' } }],
          },
        },
      }),
    );
    const d = await eventually('the Deployment', () => deployment('shipper'));
    const pod = d.spec.template;
    expect(pod.metadata.labels).toMatchObject({
      team: 'shipping',
      'jobfleet.dev/jobworker': 'shipper',
    });
    expect(pod.metadata.annotations['example.com/owner']).toBe('shipping');
    expect(pod.spec.imagePullSecrets).toEqual([{ name: 'registry-credentials' }]);
    expect(pod.spec.priorityClassName).toBe('workers-high');
    expect(pod.spec.topologySpreadConstraints).toEqual(topologySpreadConstraints);
    expect(pod.spec.initContainers).toMatchObject(initContainers);
    expect(pod.spec.containers.map((c: { name: string }) => c.name)).toEqual([
      'worker',
      'sql-proxy',
    ]);
    expect(pod.spec.containers[1]).toMatchObject(sidecar);
    const worker = pod.spec.containers[0];
    expect(worker.image).toBe(golden.rawSpec.image);
    expect(worker.env).toEqual(
      expect.arrayContaining([
        { name: 'JOBFLEET_TLS_CA_FILE', value: '/etc/jobfleet/ca/ca.crt' },
        expect.objectContaining({ name: 'JOBFLEET_QUEUE', value: golden.rawSpec.broker.queue }),
      ]),
    );
    expect(worker.volumeMounts).toEqual(
      expect.arrayContaining([
        { name: 'private-ca', mountPath: '/etc/jobfleet/ca', readOnly: true },
      ]),
    );
    expect(pod.spec.volumes).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          name: 'private-ca',
          configMap: expect.objectContaining({ name: 'private-ca' }),
        }),
      ]),
    );
    expect(worker.readinessProbe.httpGet.path).toBe('/readyz');

    // a template field is part of the revision: changing one starts the next
    await applyJobWorker(
      'shipper',
      spec({
        template: { spec: { priorityClassName: 'workers-low', containers: [{ name: 'worker' }] } },
      }),
    );
    const rolling = await eventually('revision 2 for the template change', async () => {
      const jw = await jobWorker('shipper');
      const d2 = await deployment('shipper');
      return jw.status?.history?.length === 2 &&
        d2?.spec.template.spec.priorityClassName === 'workers-low'
        ? { history: jw.status.history, d2 }
        : undefined;
    });
    expect(rolling.history.map((h: { revision: string }) => h.revision)).toEqual(['1', '2']);
    expect(rolling.d2.spec.template.metadata.labels['jobfleet.dev/revision']).toBe('2');
    expect(rolling.d2.spec.template.spec.imagePullSecrets).toBeUndefined();
  });
});

describe('upgrading the operator from before spec.template', () => {
  it('keeps a podTemplate JobWorker’s pods: no revision, no rollout; it warns once that podTemplate is deprecated', async () => {
    // the operator before spec.template, from this repository's history, on this node_modules
    const old = mkdtempSync(path.join(tmpdir(), 'jobfleet-before-template-'));
    cleanups.push(() => rmSync(old, { recursive: true, force: true }));
    try {
      const tar = execFileSync('git', [
        '-C',
        repoRoot,
        'archive',
        BEFORE_TEMPLATE,
        'src',
        'worker',
        'package.json',
        'tsconfig.json',
      ]);
      execFileSync('tar', ['x', '-C', old], { input: tar });
    } catch (e) {
      throw new Error(
        `this test runs the operator of commit ${BEFORE_TEMPLATE} from the repository's history (a full clone): ${String(e)}`,
        { cause: e },
      );
    }
    symlinkSync(path.join(repoRoot, 'node_modules'), path.join(old, 'node_modules'));

    const name = 'shipper';
    await applyJobWorker(name, {
      ...golden.rawSpec,
      broker: {
        ...golden.rawSpec.broker,
        managementUrlSecretRef: { name: 'rabbitmq-mgmt', key: 'url' },
      },
    });
    const before = await operatorProcess(ns, 'op-old', {}, old);
    const reconciled = await eventually(
      'the old operator to make the Deployment and record revision 1',
      async () => {
        const d = await deployment(name);
        const s = (await jobWorker(name)).status;
        return d && s?.history?.length === 1 && s.observedGeneration === 1 ? { d, s } : undefined;
      },
      60_000,
    );
    before.proc.kill('SIGTERM');
    await new Promise((r) => before.proc.once('exit', r));
    // the old operator's template hash is the one this code computes for the
    // JobWorker as stored (the unit golden holds the template byte for byte)
    const stored = await jobWorker(name);
    const parsed = parseSpec(stored.spec);
    if (!parsed.ok) throw new Error(parsed.problems.join('; '));
    expect(reconciled.d.metadata.annotations?.['jobfleet.dev/template-hash']).toBe(
      templateHash({ ...(stored as unknown as JobWorker), spec: parsed.spec }),
    );

    await operator('op-new');
    await eventually('the new operator to say podTemplate is deprecated', async () =>
      (await reasons()).includes('PodTemplateDeprecated') ? true : undefined,
    );
    // the event follows the reconcile's writes: had the template changed,
    // the Deployment would already carry it
    const after = await deployment(name);
    expect(after?.metadata.generation).toBe(reconciled.d.metadata.generation);
    expect(after?.spec.template).toEqual(reconciled.d.spec.template);
    const status = (await jobWorker(name)).status;
    expect(status?.history).toEqual(reconciled.s.history);
    expect(await reasons()).not.toContain('RevisionChanged');
    expect((await reasons()).filter((r) => r === 'PodTemplateDeprecated')).toHaveLength(1);
  }, 180_000);
});
