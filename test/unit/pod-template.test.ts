// The pod template the operator makes from spec.template and from the
// deprecated podTemplate: what the user wrote is kept, what the operator owns
// is set, and a JobWorker written before spec.template existed makes the
// very pods it made then (an operator upgrade rolls nothing).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseSpec, type JobWorker } from '../../src/api/jobworker.js';
import {
  desiredCohortDeployment,
  desiredDeployment,
  envProblems,
  templateHash,
} from '../../src/reconcile/children/desired.js';

const golden = JSON.parse(
  readFileSync(
    new URL('./__golden__/pod-template-before-spec-template.json', import.meta.url),
    'utf8',
  ),
);
const meta = { name: 'shipper', namespace: 'shipping', uid: 'u-1', generation: 3 };

function jobWorker(raw: Record<string, unknown>): JobWorker {
  const parsed = parseSpec(raw);
  if (!parsed.ok) throw new Error(parsed.problems.join('; '));
  return {
    apiVersion: 'jobfleet.dev/v1alpha1',
    kind: 'JobWorker',
    metadata: meta,
    spec: parsed.spec,
  };
}

describe('a JobWorker written with podTemplate (before spec.template)', () => {
  const jw = jobWorker(golden.rawSpec);
  const bare = jobWorker({ ...golden.rawSpec, podTemplate: undefined });

  it('makes the Deployment recorded from the operator before spec.template, byte for byte', () => {
    expect(JSON.stringify(desiredDeployment(jw, '3', 4))).toBe(
      JSON.stringify(golden.withPodTemplate.deployment),
    );
    expect(JSON.stringify(desiredCohortDeployment(jw, '4', 1, 2))).toBe(
      JSON.stringify(golden.withPodTemplate.cohort),
    );
    expect(JSON.stringify(desiredDeployment(bare, '1', 2))).toBe(
      JSON.stringify(golden.withoutPodTemplate.deployment),
    );
  });

  it('keeps its template hash, so the upgrade starts no revision', () => {
    expect(templateHash(jw)).toBe(golden.withPodTemplate.templateHash);
    expect(templateHash(bare)).toBe(golden.withoutPodTemplate.templateHash);
  });

  it('makes the same pods as the same fields written in spec.template', () => {
    const pt = golden.rawSpec.podTemplate;
    const moved = jobWorker({
      ...golden.rawSpec,
      podTemplate: undefined,
      template: {
        metadata: { labels: pt.labels, annotations: pt.annotations },
        spec: {
          serviceAccountName: pt.serviceAccountName,
          nodeSelector: pt.nodeSelector,
          tolerations: pt.tolerations,
          containers: [
            {
              name: 'worker',
              env: pt.env,
              resources: pt.resources,
              securityContext: pt.securityContext,
            },
          ],
        },
      },
    });
    expect(templateHash(moved)).toBe(templateHash(jw));
  });
});

describe('spec.template', () => {
  const base = golden.rawSpec;
  const template = (t: Record<string, unknown>) =>
    desiredDeployment(jobWorker({ ...base, podTemplate: undefined, template: t }), '2', 3).spec as {
      template: { metadata: { labels: Record<string, string> }; spec: Record<string, any> };
    };

  it('carries pull secrets, volumes, scheduling, init and sidecar containers as written', () => {
    const t = template({
      metadata: { labels: { team: 'shipping' } },
      spec: {
        imagePullSecrets: [{ name: 'registry' }],
        priorityClassName: 'workers-high',
        topologySpreadConstraints: [
          {
            maxSkew: 1,
            topologyKey: 'topology.kubernetes.io/zone',
            whenUnsatisfiable: 'DoNotSchedule',
          },
        ],
        affinity: { podAntiAffinity: {} },
        initContainers: [{ name: 'migrate', image: 'r/migrate:1' }],
        containers: [
          { name: 'proxy', image: 'r/proxy:1' },
          {
            name: 'worker',
            args: ['--fast'],
            envFrom: [{ configMapRef: { name: 'tuning' } }],
            volumeMounts: [{ name: 'ca', mountPath: '/etc/jobfleet/ca', readOnly: true }],
          },
        ],
        volumes: [{ name: 'ca', configMap: { name: 'private-ca' } }],
      },
    }).template;
    expect(t.metadata.labels.team).toBe('shipping');
    expect(t.metadata.labels['jobfleet.dev/jobworker']).toBe('shipper');
    expect(t.spec.imagePullSecrets).toEqual([{ name: 'registry' }]);
    expect(t.spec.priorityClassName).toBe('workers-high');
    expect(t.spec.topologySpreadConstraints[0].topologyKey).toBe('topology.kubernetes.io/zone');
    expect(t.spec.affinity).toEqual({ podAntiAffinity: {} });
    expect(t.spec.initContainers).toEqual([{ name: 'migrate', image: 'r/migrate:1' }]);
    expect(t.spec.containers.map((c: { name: string }) => c.name)).toEqual(['proxy', 'worker']);
    const worker = t.spec.containers[1];
    expect(worker.image).toBe(base.image);
    expect(worker.args).toEqual(['--fast']);
    expect(worker.envFrom).toEqual([{ configMapRef: { name: 'tuning' } }]);
    expect(worker.env[0].name).toMatch(/^JOBFLEET_/);
    expect(worker.ports[0]).toEqual({ name: 'metrics', containerPort: 9464, protocol: 'TCP' });
    expect(worker.volumeMounts).toEqual([
      { name: 'tmp', mountPath: '/tmp' },
      { name: 'ca', mountPath: '/etc/jobfleet/ca', readOnly: true },
    ]);
    expect(t.spec.volumes.map((v: { name: string }) => v.name)).toEqual(['tmp', 'ca']);
    expect(t.spec.automountServiceAccountToken).toBe(false);
    const drain = jobWorker(base).spec.shutdown.drainDeadlineSeconds;
    expect(t.spec.terminationGracePeriodSeconds).toBe(drain + 15);
  });

  it('adds the worker container first when the template has none', () => {
    const t = template({ spec: { imagePullSecrets: [{ name: 'registry' }] } }).template;
    expect(t.spec.containers.map((c: { name: string }) => c.name)).toEqual(['worker']);
    expect(t.spec.containers[0].securityContext.readOnlyRootFilesystem).toBe(true);
  });

  it('is part of the revision: any template field changes the hash', () => {
    const hashOf = (t: Record<string, unknown>) =>
      templateHash(jobWorker({ ...base, podTemplate: undefined, template: t }));
    expect(hashOf({ spec: { priorityClassName: 'a' } })).not.toBe(
      hashOf({ spec: { priorityClassName: 'b' } }),
    );
  });

  it('names the worker container’s env entry that sets a contract variable', () => {
    const parsed = parseSpec({
      ...base,
      podTemplate: undefined,
      template: {
        spec: {
          containers: [
            { name: 'proxy' },
            { name: 'worker', env: [{ name: 'JOBFLEET_QUEUE', value: 'x' }] },
          ],
        },
      },
    });
    if (!parsed.ok) throw new Error('parse');
    expect(envProblems(parsed.spec)).toEqual([
      'spec.template.spec.containers[1].env[0] sets JOBFLEET_QUEUE, which the operator sets from spec.broker.queue: set it there and remove it from spec.template.spec.containers[1].env.',
    ]);
  });
});
