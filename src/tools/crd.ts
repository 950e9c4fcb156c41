// Generates the CustomResourceDefinitions (JobWorker, JobReplay) from the zod
// schemas the controllers use. `make crds` writes crds/; a test fails when the file
// and this generator disagree.
import { stringify } from 'yaml';
import { z } from 'zod';
import { REPLAY_KIND, REPLAY_PLURAL, jobReplaySpec, jobReplayStatus } from '../api/jobreplay.js';
import { GROUP, KIND, PLURAL, VERSION, jobWorkerSpec, jobWorkerStatus } from '../api/jobworker.js';
import { templateSchema } from './template-rules.js';

export type Schema = Record<string, unknown>;

const SAFE_INT = 9_007_199_254_740_991;

/**
 * JSON Schema (from zod) → Kubernetes structural schema: no $schema, no
 * propertyNames, no `additionalProperties: false` (the apiserver prunes
 * unknown fields anyway), no ±2^53 integer bounds, and `{}` (unknown) becomes
 * a preserved, schemaless value.
 */
export function toStructural(s: Schema): Schema {
  const out: Schema = {};
  for (const [k, v] of Object.entries(s)) {
    if (k === '$schema' || k === 'propertyNames') continue;
    if (k === 'additionalProperties' && v === false) continue;
    if ((k === 'minimum' && v === -SAFE_INT) || (k === 'maximum' && v === SAFE_INT)) continue;
    if (k === 'properties') {
      out.properties = Object.fromEntries(
        Object.entries(v as Record<string, Schema>).map(([p, ps]) => [p, toStructural(ps)]),
      );
    } else if (k === 'additionalProperties' && Object.keys(v as Schema).length === 0) {
      // a map of arbitrary values (an embedded core/v1 type): keep it whole
      out['x-kubernetes-preserve-unknown-fields'] = true;
    } else if (k === 'items' || k === 'additionalProperties') {
      out[k] = toStructural(v as Schema);
    } else {
      out[k] = v;
    }
  }
  if (out.type === undefined && out.properties === undefined && out.items === undefined) {
    out['x-kubernetes-preserve-unknown-fields'] = true;
  }
  return out;
}

const schemaOf = (s: z.ZodType) =>
  toStructural(z.toJSONSchema(s, { io: 'input', unrepresentable: 'any' }));

function withReplaced(spec: Schema, replace: Record<string, (s: Schema) => Schema>): Schema {
  const properties = { ...(spec.properties as Record<string, Schema>) };
  for (const [field, make] of Object.entries(replace)) properties[field] = make(properties[field]!);
  return { ...spec, properties };
}

interface CrdInput {
  kind: string;
  plural: string;
  singular: string;
  shortNames: string[];
  description: string;
  printerColumns: Schema[];
  spec: z.ZodType;
  status: z.ZodType;
  /** spec fields whose schema is not zod's (spec.template: Kubernetes' own) */
  replace?: Record<string, (zodSchema: Schema) => Schema>;
  /** CEL rules on the whole object (they may read metadata.name) */
  rules?: Array<{ rule: string; message: string; optionalOldSelf?: boolean }>;
}

function crd(c: CrdInput): Schema {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${c.plural}.${GROUP}` },
    spec: {
      group: GROUP,
      names: {
        kind: c.kind,
        listKind: `${c.kind}List`,
        plural: c.plural,
        singular: c.singular,
        shortNames: c.shortNames,
        categories: ['jobfleet'],
      },
      scope: 'Namespaced',
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: c.printerColumns,
          schema: {
            openAPIV3Schema: {
              type: 'object',
              description: c.description,
              required: ['spec'],
              ...(c.rules ? { 'x-kubernetes-validations': c.rules } : {}),
              properties: {
                apiVersion: { type: 'string' },
                kind: { type: 'string' },
                metadata: { type: 'object' },
                spec: withReplaced(schemaOf(c.spec), c.replace ?? {}),
                status: schemaOf(c.status),
              },
            },
          },
        },
      ],
    },
  };
}

export function jobWorkerCrd(): Schema {
  return crd({
    kind: KIND,
    plural: PLURAL,
    singular: 'jobworker',
    shortNames: ['jw'],
    description:
      'A fleet of queue workers, scaled on the age of the oldest waiting message and capped by downstream capacity.',
    rules: [
      {
        // A JobWorker's cohort runs as the Deployment `<name>-cohort`: a
        // JobWorker of that name would fight it for the same Deployment.
        // Checked at creation only: one created before the rule must still
        // take status writes and edits.
        rule: "oldSelf.hasValue() || !self.metadata.name.endsWith('-cohort')",
        optionalOldSelf: true,
        message:
          "metadata.name may not end in '-cohort': that name is taken by another JobWorker's cohort Deployment (<name>-cohort, docs/rollouts.md); choose another name",
      },
    ],
    printerColumns: [
      { name: 'Desired', type: 'integer', jsonPath: '.status.desiredReplicas' },
      { name: 'Ready', type: 'integer', jsonPath: '.status.readyReplicas' },
      {
        name: 'Oldest',
        type: 'string',
        jsonPath: '.status.oldestMessageAge',
        description: 'Age of the oldest waiting message, with its unit',
      },
      {
        name: 'Age From',
        type: 'string',
        jsonPath: '.status.ageSource',
        description: 'HeadTimestamp, DeliveryTimestamps (measured) or Estimated',
      },
      {
        name: 'Limited By',
        type: 'string',
        jsonPath: '.status.scaling.limitedBy',
        description: 'What set the replica count: age, downstream, maxReplicas, signalMissing…',
      },
      {
        name: 'Capacity',
        type: 'number',
        jsonPath: '.status.capacityPerReplica',
        description:
          'Jobs a second one replica completes, measured (status.capacitySource says from what); shown in steps of 10 % or more',
      },
      { name: 'Revision', type: 'string', jsonPath: '.status.currentRevision' },
      { name: 'Step', type: 'integer', jsonPath: '.status.cohort.step' },
      { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: jobWorkerSpec,
    status: jobWorkerStatus,
    replace: { template: templateSchema },
  });
}

export function jobReplayCrd(): Schema {
  return crd({
    kind: REPLAY_KIND,
    plural: REPLAY_PLURAL,
    singular: 'jobreplay',
    shortNames: ['jr'],
    description:
      "An audited, rate-limited replay of a JobWorker's quarantined dead letters, keeping each job's idempotency key.",
    printerColumns: [
      { name: 'JobWorker', type: 'string', jsonPath: '.spec.jobWorker' },
      { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
      { name: 'Replayed', type: 'integer', jsonPath: '.status.replayed' },
      { name: 'Completed', type: 'integer', jsonPath: '.status.completed' },
      { name: 'Failed Again', type: 'integer', jsonPath: '.status.failedAgain' },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
    spec: jobReplaySpec,
    status: jobReplayStatus,
  });
}

const header = (source: string) => `# Generated by \`make crds\` from ${source} — do not edit.\n`;

export function jobWorkerCrdYaml(): string {
  return `${header('src/api/jobworker.ts')}${stringify(jobWorkerCrd(), { lineWidth: 0 })}`;
}

export function jobReplayCrdYaml(): string {
  return `${header('src/api/jobreplay.ts')}${stringify(jobReplayCrd(), { lineWidth: 0 })}`;
}

/** crds/ file name → its content */
export function allCrds(): Record<string, string> {
  return {
    'jobfleet.dev_jobworkers.yaml': jobWorkerCrdYaml(),
    'jobfleet.dev_jobreplays.yaml': jobReplayCrdYaml(),
  };
}
