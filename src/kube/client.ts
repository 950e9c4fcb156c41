// A thin Kubernetes REST client over the KubeConfig from @kubernetes/client-node
// (2.x: credentials, exec plugins and token files). Still needed beside it:
// one generic, raw-JSON path for every kind, ours included. client-node's
// generic KubernetesObjectApi serializes through its models and drops fields
// whose JSON names differ from the model's (x-kubernetes-validations,
// default, $ref…; kubernetes-client/javascript#2962), which silently corrupts
// server-side applies of whole objects; its typed patch* methods pass raw
// bodies but exist per built-in kind only.
import * as k8s from '@kubernetes/client-node';
import https from 'node:https';
import http from 'node:http';

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    generation?: number;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: Array<Record<string, unknown>>;
    deletionTimestamp?: string;
    creationTimestamp?: string;
    [k: string]: unknown;
  };
  [k: string]: unknown;
}

export interface KubeList<T = KubeObject> {
  metadata: { resourceVersion: string; continue?: string };
  items: T[];
}

export class KubeApiError extends Error {
  override readonly name = 'KubeApiError';
  constructor(
    readonly status: number,
    readonly reason: string,
    message: string,
    readonly body: unknown,
  ) {
    super(message);
  }
}

/** Known core/apps/… kinds → their REST path segment. Custom kinds register theirs. */
const PLURALS: Record<string, string> = {
  Deployment: 'deployments',
  ReplicaSet: 'replicasets',
  ControllerRevision: 'controllerrevisions',
  Pod: 'pods',
  Service: 'services',
  Secret: 'secrets',
  Event: 'events',
  Namespace: 'namespaces',
  PodDisruptionBudget: 'poddisruptionbudgets',
  Lease: 'leases',
  Node: 'nodes',
  CustomResourceDefinition: 'customresourcedefinitions',
  ServiceAccount: 'serviceaccounts',
  ConfigMap: 'configmaps',
  JobWorker: 'jobworkers',
  JobReplay: 'jobreplays',
};

export function resourcePath(
  apiVersion: string,
  kind: string,
  namespace?: string,
  name?: string,
): string {
  const plural = PLURALS[kind];
  if (!plural) throw new Error(`no REST path known for kind ${kind}`);
  const base = apiVersion.includes('/') ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
  return `${base}${namespace ? `/namespaces/${namespace}` : ''}/${plural}${name ? `/${encodeURIComponent(name)}` : ''}`;
}

export class KubeClient {
  private readonly server: URL;
  /**
   * One keep-alive agent for every request: client-node's applyToHTTPSOptions
   * builds a new https.Agent per call, so each API call paid a fresh TCP+TLS
   * handshake on both sides. Its TLS material is taken once, here; per
   * request it still runs (credentials that rotate: tokens, exec plugins),
   * and the agent it builds is replaced by this one.
   */
  private agent: http.Agent | undefined;
  /** sees every call (method, path, status): the RBAC test records what the operator uses */
  onRequest?: (method: string, path: string, status: number) => void;
  /** also sees every call: the operator's request metrics */
  onRequestDone?: (method: string, path: string, status: number) => void;

  constructor(readonly kc: k8s.KubeConfig) {
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error('kubeconfig has no current cluster');
    this.server = new URL(cluster.server);
  }

  private keepAlive(perRequest: http.Agent | undefined): http.Agent {
    if (!this.agent) {
      const tls = (perRequest as https.Agent | undefined)?.options ?? {};
      this.agent =
        this.server.protocol === 'https:'
          ? new https.Agent({ ...tls, keepAlive: true })
          : new http.Agent({ keepAlive: true });
    }
    return this.agent;
  }

  static fromFile(path: string): KubeClient {
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(path);
    return new KubeClient(kc);
  }

  static fromDefault(): KubeClient {
    const kc = new k8s.KubeConfig();
    kc.loadFromDefault();
    return new KubeClient(kc);
  }

  async request<T = unknown>(
    method: string,
    path: string,
    body?: unknown,
    contentType = 'application/json',
    signal?: AbortSignal,
  ): Promise<T> {
    const opts: https.RequestOptions = {
      method,
      hostname: this.server.hostname,
      port: this.server.port || (this.server.protocol === 'https:' ? 443 : 80),
      path: `${this.server.pathname.replace(/\/$/, '')}${path}`,
      headers: {
        accept: 'application/json',
        ...(body !== undefined ? { 'content-type': contentType } : {}),
      },
    };
    await this.kc.applyToHTTPSOptions(opts);
    opts.agent = this.keepAlive(opts.agent as http.Agent | undefined);
    const payload =
      body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
    const lib = this.server.protocol === 'https:' ? https : http;
    return new Promise<T>((resolve, reject) => {
      const req = lib.request(opts, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown = text;
          try {
            parsed = text ? JSON.parse(text) : undefined;
          } catch {
            // not JSON: keep the text
          }
          const status = res.statusCode ?? 0;
          this.onRequest?.(method, path, status);
          this.onRequestDone?.(method, path, status);
          if (status >= 200 && status < 300) {
            resolve(parsed as T);
            return;
          }
          const st = parsed as { reason?: string; message?: string } | undefined;
          reject(
            new KubeApiError(
              status,
              st?.reason ?? 'Unknown',
              st?.message ?? `${method} ${path}: HTTP ${status}`,
              parsed,
            ),
          );
        });
        res.on('error', reject);
      });
      req.on('error', reject);
      req.setTimeout(30_000, () => req.destroy(new Error(`${method} ${path}: timed out`)));
      // Not http.request's own `signal` option: with a keep-alive agent, a
      // signal that fires after the response would destroy the socket the
      // next request (a watch) reuses. The listener lives as long as the request.
      if (signal) {
        const abort = () => req.destroy(signal.reason as Error);
        if (signal.aborted) abort();
        signal.addEventListener('abort', abort, { once: true });
        req.once('close', () => signal.removeEventListener('abort', abort));
      }
      if (payload !== undefined) req.write(payload);
      req.end();
    });
  }

  get<T extends KubeObject>(
    apiVersion: string,
    kind: string,
    namespace: string | undefined,
    name: string,
    signal?: AbortSignal,
  ): Promise<T> {
    return this.request<T>(
      'GET',
      resourcePath(apiVersion, kind, namespace, name),
      undefined,
      undefined,
      signal,
    );
  }

  /** undefined when absent */
  async find<T extends KubeObject>(
    apiVersion: string,
    kind: string,
    namespace: string | undefined,
    name: string,
    signal?: AbortSignal,
  ): Promise<T | undefined> {
    try {
      return await this.get<T>(apiVersion, kind, namespace, name, signal);
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) return undefined;
      throw err;
    }
  }

  list<T extends KubeObject>(
    apiVersion: string,
    kind: string,
    namespace?: string,
    query: Record<string, string> = {},
  ): Promise<KubeList<T>> {
    const qs = new URLSearchParams(query).toString();
    return this.request<KubeList<T>>(
      'GET',
      `${resourcePath(apiVersion, kind, namespace)}${qs ? `?${qs}` : ''}`,
    );
  }

  /** Server-side apply under `fieldManager`, forcing ownership of the fields we set. */
  apply<T extends KubeObject>(
    obj: KubeObject,
    fieldManager: string,
    opts: { subresource?: 'status'; dryRun?: boolean } = {},
  ): Promise<T> {
    const path = resourcePath(obj.apiVersion, obj.kind, obj.metadata.namespace, obj.metadata.name);
    const qs = new URLSearchParams({ fieldManager, force: 'true' });
    if (opts.dryRun) qs.set('dryRun', 'All');
    return this.request<T>(
      'PATCH',
      `${path}${opts.subresource ? `/${opts.subresource}` : ''}?${qs.toString()}`,
      obj,
      'application/apply-patch+yaml',
    );
  }

  create<T extends KubeObject>(obj: KubeObject, signal?: AbortSignal): Promise<T> {
    return this.request<T>(
      'POST',
      resourcePath(obj.apiVersion, obj.kind, obj.metadata.namespace),
      obj,
      undefined,
      signal,
    );
  }

  /** PUT with the object's resourceVersion: fails with 409 when someone else wrote first. */
  replace<T extends KubeObject>(obj: KubeObject, signal?: AbortSignal): Promise<T> {
    return this.request<T>(
      'PUT',
      resourcePath(obj.apiVersion, obj.kind, obj.metadata.namespace, obj.metadata.name),
      obj,
      undefined,
      signal,
    );
  }

  async delete(
    apiVersion: string,
    kind: string,
    namespace: string | undefined,
    name: string,
  ): Promise<void> {
    try {
      await this.request('DELETE', resourcePath(apiVersion, kind, namespace, name));
    } catch (err) {
      if (!(err instanceof KubeApiError && err.status === 404)) throw err;
    }
  }
}
