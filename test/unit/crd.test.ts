// The CRD in crds/ is generated from the zod schema the controller uses; this
// fails when someone edits one without the other. Fix: `make crds`.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { allCrds, jobReplayCrd, jobWorkerCrd } from '../../src/tools/crd.js';
import { TEMPLATE_KUBERNETES_VERSION } from '../../src/tools/template-rules.js';
import { z } from 'zod';
import { parseReplaySpec } from '../../src/api/jobreplay.js';
import { jobWorkerSpec, parseSpec } from '../../src/api/jobworker.js';
import { parse } from 'yaml';
import { repoRoot } from '../ground/control-plane.js';

describe('the JobWorker CRD', () => {
  it('crds/ matches the zod schemas (run `make crds` after changing src/api/)', () => {
    for (const [name, yaml] of Object.entries(allCrds()))
      expect(readFileSync(path.join(repoRoot, 'crds', name), 'utf8'), name).toBe(yaml);
  });

  it('spec.template carries the pinned Kubernetes release’s PodTemplateSpec (make pod-template-schema after changing KUBE_VERSION)', () => {
    const pinned = /^KUBE_VERSION=(.+)$/m.exec(
      readFileSync(path.join(repoRoot, 'test/ground/versions.env'), 'utf8'),
    )?.[1];
    expect(TEMPLATE_KUBERNETES_VERSION).toBe(pinned);
    const template = (
      jobWorkerCrd() as {
        spec: { versions: Array<{ schema: { openAPIV3Schema: any } }> };
      }
    ).spec.versions[0]!.schema.openAPIV3Schema.properties.spec.properties.template;
    const podSpec = template.properties.spec.properties;
    for (const field of [
      'imagePullSecrets',
      'volumes',
      'affinity',
      'topologySpreadConstraints',
      'priorityClassName',
      'initContainers',
    ])
      expect(podSpec, field).toHaveProperty(field);
    expect(podSpec.containers.items.properties.envFrom.type).toBe('array');
  });

  it('the zod schema fills the same defaults the apiserver does', () => {
    const example = parse(readFileSync(path.join(repoRoot, 'examples/jobworker.yaml'), 'utf8')) as {
      spec: unknown;
    };
    const r = parseSpec(example.spec);
    expect(r.ok).toBe(true);
    if (r.ok) {
      expect(r.spec.broker.prefetch).toBe(8);
      expect(r.spec.retry).toEqual({
        maxAttempts: 5,
        maxThrottledRetries: 100,
        initialDelaySeconds: 1,
        maxDelaySeconds: 600,
        handlerTimeoutSeconds: 900,
        inDoubt: 'Rerun',
      });
      expect(r.spec.scaling.minReplicas).toBe(1);
      expect(r.spec.shutdown.drainDeadlineSeconds).toBe(45);
    }
  });

  it('names the field in what it rejects', () => {
    const r = parseSpec({ image: '', broker: {}, claims: {}, contract: {}, deadLetter: {} });
    expect(r.ok).toBe(false);
    if (!r.ok)
      expect(r.problems).toEqual(
        expect.arrayContaining([
          expect.stringMatching(/^spec\.image: /),
          expect.stringMatching(/^spec\.broker\.queue: /),
        ]),
      );
  });
});

describe('kubectl explain', () => {
  /** Fields without a description, by path (array items are shown through their array). */
  function undescribed(schema: Record<string, unknown>, path: string, out: string[] = []) {
    if (path && !schema.description) out.push(path);
    // Kubernetes' own PodTemplateSpec, its descriptions dropped for size (as
    // Argo Rollouts does): `kubectl explain pod.spec` has them
    if (path === 'spec.template') return out;
    for (const [k, v] of Object.entries((schema.properties ?? {}) as Record<string, object>))
      undescribed(v as Record<string, unknown>, `${path}.${k}`, out);
    const items = schema.items as Record<string, unknown> | undefined;
    for (const [k, v] of Object.entries((items?.properties ?? {}) as Record<string, object>))
      undescribed(v as Record<string, unknown>, `${path}[].${k}`, out);
    return out;
  }

  it.each([
    ['JobWorker', jobWorkerCrd],
    ['JobReplay', jobReplayCrd],
  ])('every %s field has a description', (_, crd) => {
    const schema = (
      crd() as {
        spec: {
          versions: Array<{ schema: { openAPIV3Schema: { properties: Record<string, object> } } }>;
        };
      }
    ).spec.versions[0]!.schema.openAPIV3Schema.properties;
    expect([
      ...undescribed(schema.spec as Record<string, unknown>, 'spec'),
      ...undescribed(schema.status as Record<string, unknown>, 'status'),
    ]).toEqual([]);
  });
});

describe('examples/', () => {
  const load = (f: string) =>
    parse(readFileSync(path.join(repoRoot, 'examples', f), 'utf8')) as { spec: unknown };

  /** Every property path the schema knows, down to the leaves (maps and arrays end a path). */
  function paths(schema: Record<string, any>, prefix = ''): string[] {
    const props = schema.properties as Record<string, Record<string, any>> | undefined;
    if (!props) return [prefix];
    return Object.entries(props).flatMap(([k, v]) => paths(v, prefix ? `${prefix}.${k}` : k));
  }
  function present(obj: unknown, p: string): boolean {
    let cur: unknown = obj;
    for (const k of p.split('.')) {
      if (cur === null || typeof cur !== 'object' || !(k in cur)) return false;
      cur = (cur as Record<string, unknown>)[k];
    }
    return true;
  }

  it('jobworker-full.yaml is valid and sets every field the schema has', () => {
    const full = load('jobworker-full.yaml');
    const r = parseSpec(full.spec);
    expect(r.ok).toBe(true);
    const schema = z.toJSONSchema(jobWorkerSpec, { io: 'input', unrepresentable: 'any' }) as Record<
      string,
      any
    >;
    // podTemplate is deprecated (template replaces it; both cannot be set), and
    // template.spec is Kubernetes' PodSpec, of which the example sets what a
    // production namespace needs
    const missing = paths(schema)
      .filter((p) => !p.startsWith('podTemplate') && !p.startsWith('template.spec.'))
      .filter((p) => !present(full.spec, p));
    expect(missing).toEqual([]);
  });

  it('the demo JobWorker and the JobReplay example are valid', () => {
    expect(parseSpec(load('demo/jobworker.yaml').spec).ok).toBe(true);
    expect(parseReplaySpec(load('jobreplay.yaml').spec).ok).toBe(true);
  });
});
