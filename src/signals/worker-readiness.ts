// What a JobWorker's unready pods say about themselves: each running one's
// /readyz answer (on its pod IP and metrics port, as Prometheus reaches it),
// or, for a worker that exited, the last line it logged, kept in its
// container's last termination message. A few pods at most, in parallel,
// each with a short timeout: enough to name the fault.
import type { KubeObject } from '../kube/client.js';
import { METRICS_PORT } from '../reconcile/children/index.js';
import { PASSING } from '../../worker/readiness.js';
import { CONTAINER_REASONS, TERMINATED_REASONS, type ContainerReason } from '../api/reasons.js';
import { parseWorkerWords, type WorkerReport } from '../reconcile/status/index.js';

const ASK_AT_MOST = 5;

const TIMEOUT_MS = 1000;

/** What the operator reads of a worker pod; its pod cache keeps only this (slimPod). */
export interface PodShape {
  spec?: {
    containers?: Array<{
      name?: string;
      image?: string;
      ports?: Array<{ name?: string; containerPort?: number }>;
      resources?: { limits?: { memory?: string } };
    }>;
  };
  status?: {
    podIP?: string;
    conditions?: Array<{ type: string; status: string }>;
    containerStatuses?: Array<{
      name?: string;
      restartCount?: number;
      state?: { waiting?: { reason?: string; message?: string } };
      lastState?: { terminated?: { exitCode?: number; reason?: string; message?: string } };
    }>;
  };
}

export const isReady = (p: PodShape): boolean =>
  p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

/** The most any of the pod's containers has restarted. */
export const restartsOf = (p: PodShape): number =>
  Math.max(0, ...(p.status?.containerStatuses ?? []).map((c) => c.restartCount ?? 0));

/**
 * A pod as the operator's cache keeps it: what PodShape names and the
 * metadata (most of a pod — volumes, env, probes, managed fields — is never
 * read here, and a fleet has many pods).
 */
export function slimPod(pod: KubeObject): KubeObject {
  const p = pod as KubeObject & PodShape;
  const m = p.metadata;
  return {
    apiVersion: p.apiVersion,
    kind: p.kind,
    metadata: {
      name: m.name,
      namespace: m.namespace,
      uid: m.uid,
      resourceVersion: m.resourceVersion,
      creationTimestamp: m.creationTimestamp,
      ...(m.deletionTimestamp && { deletionTimestamp: m.deletionTimestamp }),
      ...(m.labels && { labels: m.labels }),
      ...(m.annotations && { annotations: m.annotations }),
    },
    spec: {
      containers: (p.spec?.containers ?? []).map((c) => ({
        name: c.name,
        image: c.image,
        ports: c.ports,
        ...(c.resources?.limits?.memory && {
          resources: { limits: { memory: c.resources.limits.memory } },
        }),
      })),
    },
    status: {
      podIP: p.status?.podIP,
      conditions: (p.status?.conditions ?? []).map((c) => ({ type: c.type, status: c.status })),
      containerStatuses: (p.status?.containerStatuses ?? []).map((c) => ({
        name: c.name,
        restartCount: c.restartCount,
        state: c.state,
        lastState: c.lastState,
      })),
    },
  };
}

export async function readWorkerReports(
  pods: Array<KubeObject & PodShape>,
): Promise<WorkerReport[]> {
  return Promise.all(askable(pods).map(reportOf));
}

/** The pods readWorkerReports asks: the unready ones, not terminating, at most ASK_AT_MOST. */
function askable(pods: Array<KubeObject & PodShape>): Array<KubeObject & PodShape> {
  return pods
    .filter((p) => !p.metadata.deletionTimestamp)
    .filter((p) => !isReady(p))
    .slice(0, ASK_AT_MOST);
}

/** Which pods readWorkerReports would ask now, by name (a last answer stands only for the same pods). */
export function podsToAsk(pods: Array<KubeObject & PodShape>): string {
  return askable(pods)
    .map((p) => p.metadata.name)
    .sort()
    .join(',');
}

/** A worker pod's own endpoint (its pod IP and metrics port, as Prometheus reaches it); none without an IP. */
export function workerUrl(pod: PodShape, path: string): string | undefined {
  const ip = pod.status?.podIP;
  if (!ip) return undefined;
  const port =
    pod.spec?.containers?.find((c) => c.name === 'worker')?.ports?.find((p) => p.name === 'metrics')
      ?.containerPort ?? METRICS_PORT;
  return `http://${ip.includes(':') ? `[${ip}]` : ip}:${port}${path}`;
}

/** The kubelet's own words, bounded: they name the image and the registry's answer, never a credential. */
const kubeletWords = (m: string | undefined) => (m ? ` (the kubelet: ${m.slice(0, 240)})` : '');

async function reportOf(pod: KubeObject & PodShape): Promise<WorkerReport> {
  const name = pod.metadata.name;
  const worker = pod.status?.containerStatuses?.find((c) => c.name === 'worker');
  const spec = pod.spec?.containers?.find((c) => c.name === 'worker');
  // A worker that exited saying why, and is starting again, still has that fault until it is ready.
  const last = worker?.lastState?.terminated;
  const lastWords = last ? parseWorkerWords(last.message ?? '') : undefined;
  // The kubelet cannot start the container at all: the image or its config.
  const waiting = worker?.state?.waiting;
  if (waiting?.reason && Object.hasOwn(CONTAINER_REASONS, waiting.reason)) {
    const r = CONTAINER_REASONS[waiting.reason as ContainerReason];
    return {
      pod: name,
      reason: waiting.reason as ContainerReason,
      message: `${r.message}: ${spec?.image ?? 'spec.image'}${kubeletWords(waiting.message)}`,
      fix: r.fix,
    };
  }
  // The kernel killed it for memory: its words, if any, are not why.
  if (last?.reason === 'OOMKilled') {
    const limit = spec?.resources?.limits?.memory;
    return {
      pod: name,
      reason: 'OOMKilled',
      message: `${TERMINATED_REASONS.OOMKilled.message} (limit ${limit ?? 'none set: the node ran out'}; ${worker?.restartCount ?? 0} restarts)`,
      fix: TERMINATED_REASONS.OOMKilled.fix,
    };
  }
  const url = workerUrl(pod, '/readyz');
  if (url && !waiting) {
    const body = await fetch(url, {
      signal: AbortSignal.timeout(TIMEOUT_MS),
    }).then(
      (r) => r.text(),
      () => undefined,
    );
    const said = body !== undefined ? parseWorkerWords(body) : undefined;
    if (said && !(PASSING.has(said.reason) && lastWords)) return { pod: name, ...said };
  }
  if (lastWords) return { pod: name, ...lastWords };
  if (last)
    return {
      pod: name,
      reason: 'WorkerExits',
      message: `the worker container exits (code ${last.exitCode ?? '?'}) without saying why`,
      fix: `read \`kubectl logs ${name} --previous\``,
    };
  return { pod: name, reason: 'Starting', message: 'not ready yet' };
}
