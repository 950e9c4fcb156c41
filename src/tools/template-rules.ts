// spec.template's CRD schema: the Kubernetes release's PodTemplateSpec
// (./pod-template-spec.json, made by `make pod-template-schema`) with CEL
// rules refusing, at admission and naming the field, what the operator owns
// in a worker pod. Nothing the user writes is silently overwritten: it is
// refused here, or the pods carry it.
import type { JobWorker } from '../api/jobworker.js';
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
} from '../reconcile/children/index.js';

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
// A variable a spec field sets names that field; one the operator alone sets
// (the revision, the metrics port: "(the operator: …)") is just removed.
const fromSpec = Object.entries(CONTRACT_ENV).filter(([, from]) => from.startsWith('spec.'));
const contractFields = `{${fromSpec
  .map(([name, from]) => `'${name}': '${from.replace(/'/g, '')}'`)
  .join(', ')}}`;
const operatorOnly = Object.keys(CONTRACT_ENV).filter(
  (name) => !fromSpec.some(([n]) => n === name),
);
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
  {
    rule: `!(self.name in ${list(operatorOnly)})`,
    messageExpression: `self.name + ' is the operator’s own (the revision it runs, its metrics port): remove this entry'`,
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

/**
 * CEL's cost is estimated from the largest input the schema allows, and a
 * Kubernetes list or string has no bound: these are jobfleet's, generous
 * for a worker pod, so the rules fit the apiserver's budget.
 */
const LIMITS = {
  containers: 32,
  env: 512,
  ports: 64,
  volumeMounts: 128,
  volumes: 256,
  labels: 128,
  labelKey: 317, // a 253-character prefix, '/', a 63-character name
  envName: 1024,
  portName: 15, // an IANA service name
  containerName: 63,
  volumeName: 63,
  mountPath: 4096,
} as const;

const maxLength = (s: Obj, n: number): Obj => ({ ...s, maxLength: n });
const maxItems = (s: Obj, n: number, items: Obj): Obj => ({ ...s, maxItems: n, items });

function containerWithRules(c: Obj, workerRules: Rule[]): Obj {
  const p = c.properties;
  const env = p.env!.items;
  const port = p.ports!.items;
  const mount = p.volumeMounts!.items;
  return withRules(
    {
      ...c,
      properties: {
        ...p,
        name: maxLength(p.name!, LIMITS.containerName),
        env: maxItems(
          p.env!,
          LIMITS.env,
          withRules(
            {
              ...env,
              properties: {
                ...env.properties,
                name: maxLength(env.properties.name!, LIMITS.envName),
              },
            },
            ENV_VAR,
          ) as Obj,
        ),
        ports: maxItems(
          p.ports!,
          LIMITS.ports,
          withRules(
            {
              ...port,
              properties: {
                ...port.properties,
                name: maxLength(port.properties.name!, LIMITS.portName),
              },
            },
            PORT,
          ) as Obj,
        ),
        volumeMounts: maxItems(p.volumeMounts!, LIMITS.volumeMounts, {
          ...mount,
          properties: {
            ...mount.properties,
            mountPath: maxLength(mount.properties.mountPath!, LIMITS.mountPath),
          },
        }),
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
  const { containers, initContainers, volumes } = spec.properties;
  const volume = volumes!.items;
  const labels: Obj = { ...meta.properties.labels!, maxProperties: LIMITS.labels };
  return {
    ...t,
    description: zodField.description,
    properties: {
      metadata: {
        ...meta,
        properties: {
          labels: withRules(labels, LABELS) as Obj,
          annotations: withRules(meta.properties.annotations!, ANNOTATIONS) as Obj,
        },
      },
      spec: withRules(
        {
          ...spec,
          properties: {
            ...spec.properties,
            containers: maxItems(
              containers!,
              LIMITS.containers,
              containerWithRules(containers!.items, WORKER),
            ),
            initContainers: maxItems(
              initContainers!,
              LIMITS.containers,
              containerWithRules(initContainers!.items, []),
            ),
            volumes: maxItems(volumes!, LIMITS.volumes, {
              ...volume,
              properties: {
                ...volume.properties,
                name: maxLength(volume.properties.name!, LIMITS.volumeName),
              },
            }),
          },
        },
        POD_SPEC,
      ),
    },
  };
}
