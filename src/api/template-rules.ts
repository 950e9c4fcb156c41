// spec.template's CRD schema: the Kubernetes release's PodTemplateSpec
// (./pod-template-spec.json, made by `make pod-template-schema`) with CEL
// rules refusing, at admission and naming the field, what the operator owns
// in a worker pod. Nothing the user writes is silently overwritten: it is
// refused here, or the pods carry it.
import type { JobWorker } from './jobworker.js';
import type { Schema } from './pod-template-schema.js';
import generated from './pod-template-spec.json' with { type: 'json' };
import {
  CONTRACT_ENV,
  LABEL_COHORT,
  LABEL_JOBWORKER,
  LABEL_REVISION,
  METRICS_PORT,
  WORKER_CONTAINER,
  commonLabels,
} from '../reconcile/desired.js';

/** The Kubernetes version whose PodTemplateSpec the CRD carries. */
export const TEMPLATE_KUBERNETES_VERSION = generated.kubernetesVersion;

type Rule = { rule: string; message?: string; messageExpression?: string; fieldPath?: string };

const list = (xs: readonly string[]) => `[${xs.map((x) => `'${x}'`).join(', ')}]`;
const ownLabels = [
  ...Object.keys(commonLabels({ metadata: { name: 'x' } } as Pick<JobWorker, 'metadata'>)),
  LABEL_JOBWORKER,
  LABEL_REVISION,
  LABEL_COHORT,
];
const ownLabel = (k: string) =>
  `(${k} in ${list([...new Set(ownLabels)])} || ${k}.startsWith('jobfleet.dev/'))`;
const contractFields = `{${Object.entries(CONTRACT_ENV)
  .map(([name, from]) => `'${name}': '${from.replace(/'/g, '')}'`)
  .join(', ')}}`;
const worker = `self.name != '${WORKER_CONTAINER}'`;

const LABELS: Rule[] = [
  {
    rule: `self.all(k, !${ownLabel('k')})`,
    messageExpression: `'sets ' + self.filter(k, ${ownLabel('k')})[0] + ', a label the operator sets on every worker pod (its selector and revisions depend on it): remove it'`,
  },
];
const ANNOTATIONS: Rule[] = [
  {
    rule: "self.all(k, !k.startsWith('jobfleet.dev/'))",
    message: 'jobfleet.dev/ annotations are the operator’s: remove them',
  },
];
const POD_SPEC: Rule[] = [
  {
    rule: '!has(self.terminationGracePeriodSeconds)',
    message:
      'the operator sets the grace period from spec.shutdown.drainDeadlineSeconds (+15 s to close the channel): set that instead',
    fieldPath: '.terminationGracePeriodSeconds',
  },
  {
    rule: "!has(self.volumes) || self.volumes.all(v, v.name != 'tmp')",
    message:
      'the volume name "tmp" is the operator’s (an emptyDir at the worker’s /tmp on a read-only root filesystem): name yours otherwise',
    fieldPath: '.volumes',
  },
  {
    rule: '!has(self.securityContext) || !has(self.securityContext.runAsNonRoot) || self.securityContext.runAsNonRoot',
    message:
      'workers run as non-root (the restricted Pod Security profile): remove runAsNonRoot: false and give the image a numeric USER',
    fieldPath: '.securityContext.runAsNonRoot',
  },
];
const WORKER: Rule[] = [
  {
    rule: `${worker} || !has(self.image)`,
    message: 'the worker container’s image is spec.image: set it there and remove it here',
    fieldPath: '.image',
  },
  {
    rule: `${worker} || (!has(self.readinessProbe) && !has(self.livenessProbe))`,
    message:
      'the operator probes the worker on /readyz and /healthz of its metrics port: remove readinessProbe and livenessProbe (a startupProbe may be set)',
  },
  {
    rule: `${worker} || !has(self.volumeMounts) || self.volumeMounts.all(m, m.mountPath != '/tmp')`,
    message: 'the operator mounts the worker’s /tmp (an emptyDir): mount yours elsewhere',
    fieldPath: '.volumeMounts',
  },
  {
    rule: `${worker} || !has(self.securityContext) || ((!has(self.securityContext.privileged) || !self.securityContext.privileged) && (!has(self.securityContext.allowPrivilegeEscalation) || !self.securityContext.allowPrivilegeEscalation) && (!has(self.securityContext.runAsNonRoot) || self.securityContext.runAsNonRoot))`,
    message:
      'the worker runs under the restricted Pod Security profile: privileged, allowPrivilegeEscalation and runAsNonRoot: false are refused',
    fieldPath: '.securityContext',
  },
];
const ENV_VAR: Rule[] = [
  {
    rule: `!(self.name in ${contractFields})`,
    messageExpression: `self.name + ' is set by the operator from ' + ${contractFields}[self.name] + ': set that field and remove this entry'`,
  },
];
const PORT: Rule[] = [
  {
    rule: `self.containerPort != ${METRICS_PORT} && (!has(self.name) || self.name != 'metrics')`,
    message: `port ${METRICS_PORT}, named metrics, is the worker’s, which the operator declares: use another number and name`,
  },
];

const clone = <T>(v: T): T => structuredClone(v);
const withRules = (s: Schema, rules: Rule[]): Schema =>
  rules.length ? { ...s, 'x-kubernetes-validations': rules } : s;
type Obj = Schema & { properties: Record<string, Obj>; items: Obj };

function containerWithRules(c: Obj, workerRules: Rule[]): Obj {
  const p = c.properties;
  return withRules(
    {
      ...c,
      properties: {
        ...p,
        env: { ...p.env!, items: withRules(p.env!.items, ENV_VAR) as Obj },
        ports: { ...p.ports!, items: withRules(p.ports!.items, PORT) as Obj },
      },
    },
    workerRules,
  ) as Obj;
}

/** spec.template: the zod field's description over Kubernetes' schema, with the rules. */
export function templateSchema(zodField: Schema): Schema {
  const t = clone(generated.schema) as unknown as Obj;
  const meta = t.properties.metadata!;
  const spec = t.properties.spec!;
  const containers = spec.properties.containers!;
  const inits = spec.properties.initContainers!;
  return {
    ...t,
    description: zodField.description,
    properties: {
      metadata: {
        ...meta,
        properties: {
          labels: withRules(meta.properties.labels!, LABELS) as Obj,
          annotations: withRules(meta.properties.annotations!, ANNOTATIONS) as Obj,
        },
      },
      spec: withRules(
        {
          ...spec,
          properties: {
            ...spec.properties,
            containers: { ...containers, items: containerWithRules(containers.items, WORKER) },
            initContainers: { ...inits, items: containerWithRules(inits.items, []) },
          },
        },
        POD_SPEC,
      ),
    },
  };
}
