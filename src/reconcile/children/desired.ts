// The desired child objects of a JobWorker, pure: the worker Deployment (with
// the JOBFLEET_* contract, docs/worker.md's configuration table), a headless metrics Service and a
// PodDisruptionBudget. Computed whole before any write, then server-side
// applied under one field manager.
import { createHash } from 'node:crypto';
import {
  API_VERSION,
  KIND,
  type JobWorker,
  type JobWorkerSpec,
  type PodTemplateSpec,
} from '../../api/jobworker.js';
import type { KubeObject } from '../../api/kube-object.js';
import { ENV, type WorkerConfigInput } from '../../api/worker-contract.js';

export const FIELD_MANAGER = 'jobfleet-operator';
export const METRICS_PORT = 9464;
/** Grace beyond the drain deadline: time to close the channel and release claims. */
export const TERMINATION_MARGIN_SECONDS = 15;

export const LABEL_JOBWORKER = 'jobfleet.dev/jobworker';
export const LABEL_REVISION = 'jobfleet.dev/revision';
/** On a Cohort rollout's Deployment and its pods (../cohort/steps.ts). */
export const LABEL_COHORT = 'jobfleet.dev/cohort';

/** The Cohort strategy's Deployment, beside the stable one (named after the JobWorker). */
export const cohortDeploymentName = (jobWorker: string) => `${jobWorker}-cohort`;
export const ANNOTATION_TEMPLATE_HASH = 'jobfleet.dev/template-hash';
export const ANNOTATION_CONTRACT_HASH = 'jobfleet.dev/contract-hash';

const hash = (v: unknown) =>
  createHash('sha256').update(JSON.stringify(v)).digest('hex').slice(0, 12);

/** The contract's identity: the key rule and the set of schema versions. */
export function contractHash(spec: JobWorkerSpec): string {
  return hash({
    keyRule: spec.contract.idempotencyKey,
    versions: [...spec.contract.schemaVersions].sort((a, b) => a - b),
  });
}

export function selectorLabels(jw: Pick<JobWorker, 'metadata'>): Record<string, string> {
  return { [LABEL_JOBWORKER]: jw.metadata.name };
}

export function commonLabels(jw: Pick<JobWorker, 'metadata'>): Record<string, string> {
  return {
    'app.kubernetes.io/name': 'jobworker',
    'app.kubernetes.io/instance': jw.metadata.name,
    'app.kubernetes.io/component': 'worker',
    'app.kubernetes.io/managed-by': 'jobfleet',
    ...selectorLabels(jw),
  };
}

export function ownerReference(jw: JobWorker) {
  return {
    apiVersion: API_VERSION,
    kind: KIND,
    name: jw.metadata.name,
    uid: jw.metadata.uid,
    controller: true,
    blockOwnerDeletion: true,
  };
}

type SecretRef = { name: string; key: string };

/**
 * The worker contract, declared once: each worker config field the operator
 * sets (its variable name comes from the worker's own ENV table), the spec
 * field it comes from, and its value — a literal or a Secret reference.
 */
const WORKER_ENV: ReadonlyArray<{
  field: keyof WorkerConfigInput;
  from: string;
  /** undefined: not set (the worker's default holds), so that pods made before the field existed stay as they are */
  value: (s: JobWorkerSpec, revision: string) => string | number | SecretRef | undefined;
}> = [
  { field: 'queue', from: 'spec.broker.queue', value: (s) => s.broker.queue },
  { field: 'brokerUrl', from: 'spec.broker.urlSecretRef', value: (s) => s.broker.urlSecretRef },
  { field: 'claimsUrl', from: 'spec.claims.urlSecretRef', value: (s) => s.claims.urlSecretRef },
  {
    field: 'outboxUrl',
    from: 'spec.outbox.urlSecretRef (relay: Workers)',
    value: (s) => (s.outbox?.relay === 'Workers' ? s.outbox.urlSecretRef : undefined),
  },
  { field: 'prefetch', from: 'spec.broker.prefetch', value: (s) => s.broker.prefetch },
  { field: 'queueType', from: 'spec.broker.queueType', value: (s) => s.broker.queueType },
  { field: 'maxAttempts', from: 'spec.retry.maxAttempts', value: (s) => s.retry.maxAttempts },
  {
    field: 'maxThrottledRetries',
    from: 'spec.retry.maxThrottledRetries',
    value: (s) => s.retry.maxThrottledRetries,
  },
  {
    field: 'initialDelaySeconds',
    from: 'spec.retry.initialDelaySeconds',
    value: (s) => s.retry.initialDelaySeconds,
  },
  {
    field: 'maxDelaySeconds',
    from: 'spec.retry.maxDelaySeconds',
    value: (s) => s.retry.maxDelaySeconds,
  },
  {
    field: 'deadLetterQueue',
    from: 'spec.retry.deadLetterQueue',
    value: (s) => s.retry.deadLetterQueue ?? `${s.broker.queue}.dlq`,
  },
  {
    field: 'handlerTimeoutSeconds',
    from: 'spec.retry.handlerTimeoutSeconds',
    value: (s) => s.retry.handlerTimeoutSeconds,
  },
  {
    field: 'inDoubt',
    from: 'spec.retry.inDoubt',
    value: (s) => (s.retry.inDoubt === 'Hold' ? 'hold' : undefined),
  },
  { field: 'deadLetterOwner', from: 'spec.deadLetter.owner', value: (s) => s.deadLetter.owner },
  { field: 'leaseSeconds', from: 'spec.claims.leaseSeconds', value: (s) => s.claims.leaseSeconds },
  {
    field: 'drainDeadlineSeconds',
    from: 'spec.shutdown.drainDeadlineSeconds',
    value: (s) => s.shutdown.drainDeadlineSeconds,
  },
  {
    field: 'keyRule',
    from: 'spec.contract.idempotencyKey',
    value: (s) => s.contract.idempotencyKey,
  },
  {
    field: 'schemaVersions',
    from: 'spec.contract.schemaVersions',
    value: (s) => s.contract.schemaVersions.join(','),
  },
  { field: 'revision', from: '(the operator: the revision number)', value: (_, r) => r },
  { field: 'metricsPort', from: `(the operator: port ${METRICS_PORT})`, value: () => METRICS_PORT },
];

/** The JOBFLEET_* variables the operator sets, and the spec field that sets each. */
export const CONTRACT_ENV: Readonly<Record<string, string>> = Object.fromEntries(
  WORKER_ENV.map(({ field, from }) => [ENV[field], from]),
);

function contractEnv(jw: JobWorker, revision: string): Array<Record<string, unknown>> {
  return WORKER_ENV.flatMap(({ field, value }): Array<Record<string, unknown>> => {
    const v = value(jw.spec, revision);
    if (v === undefined) return [];
    return typeof v === 'object'
      ? [{ name: ENV[field], valueFrom: { secretKeyRef: { name: v.name, key: v.key } } }]
      : [{ name: ENV[field], value: String(v) }];
  });
}

type Container = Record<string, unknown> & { name: string };
export const WORKER_CONTAINER = 'worker';

/**
 * The user's pod template: spec.template, or the deprecated podTemplate's
 * fields put where they belong in one (the worker container's env,
 * resources and securityContext), so both make the same pods.
 */
export function userTemplate(spec: JobWorkerSpec): PodTemplateSpec {
  if (spec.template) return spec.template;
  const pt = spec.podTemplate;
  if (!pt) return {};
  const worker: Container = {
    name: WORKER_CONTAINER,
    ...(pt.env && { env: pt.env }),
    ...(pt.resources && { resources: pt.resources }),
    ...(pt.securityContext && { securityContext: pt.securityContext }),
  };
  return {
    metadata: {
      ...(pt.labels && { labels: pt.labels }),
      ...(pt.annotations && { annotations: pt.annotations }),
    },
    spec: {
      ...(pt.serviceAccountName && { serviceAccountName: pt.serviceAccountName }),
      ...(pt.nodeSelector && { nodeSelector: pt.nodeSelector }),
      ...(pt.tolerations && { tolerations: pt.tolerations }),
      containers: [worker],
    },
  };
}

/** Where the template's worker container is, for messages naming its fields. */
export function workerContainerPath(spec: JobWorkerSpec): string {
  if (!spec.template) return 'spec.podTemplate';
  const i = (spec.template.spec?.containers ?? []).findIndex((c) => c.name === WORKER_CONTAINER);
  return i < 0 ? 'spec.template' : `spec.template.spec.containers[${i}]`;
}

/**
 * The template's env may add variables, never replace the contract's: a
 * duplicate would either be refused by the apiserver or silently win over the
 * spec field that the gate and the status describe. (The CRD refuses them
 * in spec.template; podTemplate, older, is checked here.)
 */
export function envProblems(spec: JobWorkerSpec): string[] {
  const worker = userTemplate(spec).spec?.containers?.find((c) => c.name === WORKER_CONTAINER);
  const at = workerContainerPath(spec);
  return ((worker?.env ?? []) as Array<Record<string, unknown>>).flatMap((e, i) => {
    const name = typeof e.name === 'string' ? e.name : '';
    const field = CONTRACT_ENV[name];
    return field
      ? [
          field.startsWith('spec.')
            ? `${at}.env[${i}] sets ${name}, which the operator sets from ${field}: set it there and remove it from ${at}.env.`
            : `${at}.env[${i}] sets ${name}, the operator’s own ${field.replace(/^\(the operator: |\)$/g, '')}: remove it from ${at}.env.`,
        ]
      : [];
  });
}

/** The restricted Pod Security profile, by default. */
const restrictedContainer = {
  allowPrivilegeEscalation: false,
  capabilities: { drop: ['ALL'] },
  readOnlyRootFilesystem: true,
  runAsNonRoot: true,
  seccompProfile: { type: 'RuntimeDefault' },
};

const probe = (path: string, periodSeconds: number, failureThreshold: number) => ({
  httpGet: { path, port: 'metrics' },
  periodSeconds,
  failureThreshold,
  timeoutSeconds: 2,
});

/**
 * The worker container: the user's, with what the operator owns set over it
 * (the CRD refuses a template that sets any of it, so nothing of the user's
 * is silently replaced). The user's other fields — command, args, envFrom,
 * startupProbe, lifecycle… — are kept as written.
 */
function workerContainer(jw: JobWorker, revision: string, user: Container): Container {
  const {
    env = [],
    ports = [],
    resources,
    securityContext,
    volumeMounts = [],
    terminationMessagePolicy,
    ...rest
  } = user;
  return {
    ...rest,
    name: WORKER_CONTAINER,
    image: jw.spec.image,
    env: [...contractEnv(jw, revision), ...(env as unknown[])],
    ports: [
      { name: 'metrics', containerPort: METRICS_PORT, protocol: 'TCP' },
      ...(ports as unknown[]),
    ],
    readinessProbe: probe('/readyz', 5, 2),
    livenessProbe: probe('/healthz', 10, 6),
    // A worker that refuses to start (a refused password, a missing
    // database) exits with the cause in its last log lines: the pod's
    // last termination message then says it.
    terminationMessagePolicy: terminationMessagePolicy ?? 'FallbackToLogsOnError',
    ...(resources ? { resources } : {}),
    securityContext: { ...restrictedContainer, ...(securityContext as object | undefined) },
    // a writable /tmp on a read-only root filesystem
    volumeMounts: [{ name: 'tmp', mountPath: '/tmp' }, ...(volumeMounts as unknown[])],
  };
}

/**
 * The pod template: the user's (spec.template) with what the operator owns.
 * Its hash, taken before the revision label is added, identifies the
 * revision: an identical template is the same revision. The keys keep the
 * order they had before spec.template existed, so a JobWorker written with
 * podTemplate hashes as before and an operator upgrade rolls nothing
 * (test/unit/pod-template.test.ts holds it to a recorded template).
 */
export function podTemplate(jw: JobWorker, revision: string): Record<string, unknown> {
  const s = jw.spec;
  const t = userTemplate(s);
  const {
    serviceAccountName,
    automountServiceAccountToken,
    securityContext,
    nodeSelector,
    tolerations,
    containers = [],
    volumes = [],
    ...rest
  } = t.spec ?? {};
  const named = containers.some((c) => c.name === WORKER_CONTAINER);
  const all = named ? containers : [{ name: WORKER_CONTAINER }, ...containers];
  return {
    metadata: {
      // user labels first: ours win, so the selector cannot be broken
      labels: {
        ...(t.metadata?.labels ?? {}),
        ...commonLabels(jw),
        [LABEL_REVISION]: revision,
      },
      annotations: {
        ...(t.metadata?.annotations ?? {}),
        [ANNOTATION_CONTRACT_HASH]: contractHash(s),
      },
    },
    spec: {
      ...rest,
      ...(serviceAccountName ? { serviceAccountName } : {}),
      // Workers talk to RabbitMQ and PostgreSQL, not to the Kubernetes API.
      automountServiceAccountToken: automountServiceAccountToken ?? false,
      terminationGracePeriodSeconds: s.shutdown.drainDeadlineSeconds + TERMINATION_MARGIN_SECONDS,
      securityContext: {
        runAsNonRoot: true,
        seccompProfile: { type: 'RuntimeDefault' },
        ...securityContext,
      },
      ...(nodeSelector ? { nodeSelector } : {}),
      ...(tolerations ? { tolerations } : {}),
      containers: all.map((c) =>
        c.name === WORKER_CONTAINER ? workerContainer(jw, revision, c) : c,
      ),
      volumes: [{ name: 'tmp', emptyDir: {} }, ...volumes],
    },
  };
}

/**
 * The contract a live Deployment's pods run, read back from the worker
 * container's JOBFLEET_KEY_RULE / JOBFLEET_SCHEMA_VERSIONS: the truth the
 * gate compares against. Undefined when the template does not carry both.
 */
/** The revision a Deployment's pod template carries. */
export const revisionOf = (d: KubeObject | undefined): string | undefined =>
  (d?.spec as { template?: { metadata?: { labels?: Record<string, string> } } } | undefined)
    ?.template?.metadata?.labels?.[LABEL_REVISION];

/**
 * The history entry of the revision our Deployment runs, read back from it
 * (its revision label, template and contract hashes, image and contract), for
 * a plan whose JobWorker has no status yet to hold its history: a new
 * JobWorker's first status is held (../status/first-status.ts), or an operator
 * stopped before writing it. An edit is then numbered after this revision,
 * not as revision 1 again. Undefined for a Deployment that does not carry it all.
 */
export function deployedRevision(deployment: KubeObject | undefined): HistoryEntryRead | undefined {
  const revision = revisionOf(deployment);
  const contract = deployedContract(deployment);
  const template = (deployment?.spec as { template?: PodTemplateRead } | undefined)?.template;
  const templateHash = deployment?.metadata.annotations?.[ANNOTATION_TEMPLATE_HASH];
  const contractHash = template?.metadata?.annotations?.[ANNOTATION_CONTRACT_HASH];
  const image = template?.spec?.containers?.find((c) => c.name === WORKER_CONTAINER)?.image;
  const created = deployment?.metadata.creationTimestamp;
  if (!revision || !contract || !templateHash || !contractHash || !image || !created)
    return undefined;
  return { revision, image, contractHash, templateHash, ...contract, deployedAt: created };
}

interface PodTemplateRead {
  metadata?: { annotations?: Record<string, string> };
  spec?: { containers?: Array<{ name?: string; image?: string }> };
}

/** A revision's entry in status.history, as read back from its Deployment. */
export interface HistoryEntryRead {
  revision: string;
  image: string;
  contractHash: string;
  templateHash: string;
  keyRule: string;
  schemaVersions: number[];
  deployedAt: string;
}

export function deployedContract(
  deployment: { [k: string]: unknown } | undefined,
): { keyRule: string; schemaVersions: number[] } | undefined {
  const containers = (
    deployment?.spec as
      { template?: { spec?: { containers?: Array<{ name?: string; env?: unknown }> } } } | undefined
  )?.template?.spec?.containers;
  const env = containers?.find((c) => c.name === 'worker')?.env as
    Array<{ name?: string; value?: string }> | undefined;
  const value = (name: string) => env?.find((e) => e.name === name)?.value;
  const keyRule = value(ENV.keyRule);
  const versions = value(ENV.schemaVersions);
  if (!keyRule || !versions) return undefined;
  const schemaVersions = versions.split(',').map(Number);
  if (schemaVersions.some((v) => !Number.isInteger(v) || v < 1)) return undefined;
  return { keyRule, schemaVersions };
}

/**
 * Kept per parsed spec (the observer parses once per generation, so a
 * resync of an unchanged JobWorker hashes nothing) and name, the template's
 * only other input.
 */
const templateHashes = new WeakMap<JobWorkerSpec, { name: string; hash: string }>();

export function templateHash(jw: JobWorker): string {
  const known = templateHashes.get(jw.spec);
  if (known?.name === jw.metadata.name) return known.hash;
  const h = hash(podTemplate(jw, ''));
  templateHashes.set(jw.spec, { name: jw.metadata.name, hash: h });
  return h;
}

export function desiredDeployment(jw: JobWorker, revision: string, replicas: number): KubeObject {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: {
      name: jw.metadata.name,
      namespace: jw.metadata.namespace,
      labels: commonLabels(jw),
      annotations: { [ANNOTATION_TEMPLATE_HASH]: templateHash(jw) },
      ownerReferences: [ownerReference(jw)],
    },
    spec: {
      replicas,
      selector: { matchLabels: selectorLabels(jw) },
      // Never below the running capacity during a roll: the backlog keeps draining.
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: '25%', maxUnavailable: 0 } },
      revisionHistoryLimit: jw.spec.rollout.historyLimit,
      template: podTemplate(jw, revision),
    },
  };
}

/**
 * A Cohort rollout's Deployment: the new revision's template, with the
 * cohort label and the step's prefetch. Its selector includes the label; the
 * stable Deployment's (immutable, older) does not, and matches cohort pods
 * too: owner references keep each Deployment's ReplicaSets and pods its own.
 * The pods keep the JobWorker's label, so the metrics Service, the PDB and
 * the pod reads see the whole fleet.
 */
export function desiredCohortDeployment(
  jw: JobWorker,
  revision: string,
  replicas: number,
  prefetch: number,
): KubeObject {
  const cohortJw = { ...jw, spec: { ...jw.spec, broker: { ...jw.spec.broker, prefetch } } };
  const d = desiredDeployment(cohortJw, revision, replicas);
  const template = podTemplate(cohortJw, revision) as {
    metadata: { labels: Record<string, string> };
  };
  template.metadata.labels[LABEL_COHORT] = 'true';
  return {
    ...d,
    metadata: {
      ...d.metadata,
      name: cohortDeploymentName(jw.metadata.name),
      labels: { ...d.metadata.labels, [LABEL_COHORT]: 'true' },
    },
    spec: {
      ...(d.spec as object),
      selector: { matchLabels: { ...selectorLabels(jw), [LABEL_COHORT]: 'true' } },
      template,
    },
  };
}

/** The name of the ControllerRevision that keeps a revision's spec. */
export const revisionRecordName = (jobWorker: string, revision: string) =>
  `${jobWorker}-${revision}`;

/**
 * A revision's full spec, kept once outside status (status.history holds a
 * summary): what a rollback to it, or a paused fleet holding it, deploys.
 * apps/v1 ControllerRevision, as StatefulSets keep theirs; its data never
 * changes, so it is created once and never patched.
 */
export function desiredRevisionRecord(
  jw: JobWorker,
  revision: string,
  spec: Record<string, unknown>,
): KubeObject {
  // The pause switch is not part of a revision: undoing to one must not flip it.
  const recorded = { ...spec };
  delete recorded.paused;
  return {
    apiVersion: 'apps/v1',
    kind: 'ControllerRevision',
    metadata: {
      name: revisionRecordName(jw.metadata.name, revision),
      namespace: jw.metadata.namespace,
      labels: { ...commonLabels(jw), [LABEL_REVISION]: revision },
      ownerReferences: [ownerReference(jw)],
    },
    data: recorded,
    revision: Number(revision),
  };
}

/** Headless, so that Prometheus (or a PodMonitor) discovers every worker pod. */
export function desiredMetricsService(jw: JobWorker): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: {
      name: `${jw.metadata.name}-metrics`,
      namespace: jw.metadata.namespace,
      labels: commonLabels(jw),
      ownerReferences: [ownerReference(jw)],
    },
    spec: {
      clusterIP: 'None',
      selector: selectorLabels(jw),
      ports: [{ name: 'metrics', port: METRICS_PORT, targetPort: 'metrics', protocol: 'TCP' }],
    },
  };
}

/** One worker at a time may be evicted by a node drain: the rest keep consuming. */
export function desiredPdb(jw: JobWorker): KubeObject {
  return {
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    metadata: {
      name: jw.metadata.name,
      namespace: jw.metadata.namespace,
      labels: commonLabels(jw),
      ownerReferences: [ownerReference(jw)],
    },
    spec: { maxUnavailable: 1, selector: { matchLabels: selectorLabels(jw) } },
  };
}
