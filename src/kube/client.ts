// A thin Kubernetes REST client: one generic, raw-JSON path for every kind,
// ours included, and watches. Not @kubernetes/client-node's: its generic
// KubernetesObjectApi serializes through its models and drops fields whose
// JSON names differ from the model's (x-kubernetes-validations, default,
// $ref…; kubernetes-client/javascript#2962), which silently corrupts
// server-side applies of whole objects (its typed patch* methods pass raw
// bodies but exist per built-in kind only); and loading it costs more memory
// than the rest of the operator (./kubeconfig.ts says how much).
import https from 'node:https';
import http from 'node:http';
import http2 from 'node:http2';
import type { KubeObject } from '../api/kube-object.js';
import { KubeAccess, type KubeAccessLike } from './kubeconfig.js';

// The shape of any object, the API's own (../api/kube-object.ts); exported here too,
// with the client that reads and writes it.
export type { KubeObject };

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

/** A response body: JSON when it parses, else the text (undefined when empty). */
function parseBody(text: string): unknown {
  try {
    return text ? JSON.parse(text) : undefined;
  } catch {
    return text;
  }
}

/** The error for a non-2xx answer, with the apiserver's Status reason and message when it sent one. */
function apiError(status: number, body: unknown, what: string): KubeApiError {
  const st = body as { reason?: string; message?: string } | undefined;
  return new KubeApiError(
    status,
    st?.reason ?? 'Unknown',
    st?.message ?? `${what}: HTTP ${status}`,
    body,
  );
}

/**
 * Runs `abort` when `signal` fires, for as long as `req` lives. Not
 * http.request's own `signal` option: with a keep-alive agent, a signal that
 * fires after the response would destroy the socket the next request reuses.
 */
function untilClosed(req: http.ClientRequest, signal: AbortSignal, abort: () => void): void {
  if (signal.aborted) abort();
  signal.addEventListener('abort', abort, { once: true });
  req.once('close', () => signal.removeEventListener('abort', abort));
}

export type ConnectionPurpose = 'requests' | 'watches';

/** Who watches the client: the operator's request metrics, the RBAC test's record of calls. */
export interface KubeClientObserver {
  /** every call: its method (WATCH for a watch), path and HTTP status */
  request?(method: string, path: string, status: number): void;
  /** every TCP (and TLS) connection opened to the apiserver */
  connection?(purpose: ConnectionPurpose): void;
}

/** TLS options a request's credentials set, whether on the options or on a per-call agent. */
const TLS_KEYS = [
  'ca',
  'cert',
  'key',
  'pfx',
  'passphrase',
  'rejectUnauthorized',
  'servername',
] as const;

/** One HTTP/2 connection to the apiserver and the streams open on it. */
interface Session {
  h2: http2.ClientHttp2Session;
  /** the client certificate it was opened with (exec credentials may rotate it) */
  cert: unknown;
  key: unknown;
  streams: number;
}

export class KubeClient {
  private readonly server: URL;
  /**
   * API calls share one HTTP/2 connection (the apiserver speaks h2 over
   * TLS): every reconcile's requests are streams on it, so a thousand
   * JobWorkers cost one TCP+TLS handshake, not one per concurrent call.
   * Watches keep HTTP/1.1 connections of their own (a long-lived stream each,
   * whose end must not touch the others).
   */
  private session: Session | undefined;
  /**
   * Keep-alive HTTP/1.1 agents: for watches (each holds its connection for
   * as long as it runs), and for requests to a plain-http server (tests'
   * fakes; an https apiserver gets them over `session`). client-node's
   * applyToHTTPSOptions, which tests may still pass in, builds a new
   * https.Agent per call: its TLS options are taken once, here, and its
   * agent replaced. Credentials are applied per request: tokens and exec
   * credentials rotate.
   */
  private readonly agents: Partial<Record<ConnectionPurpose, http.Agent>> = {};
  private readonly observers = new Set<KubeClientObserver>();

  constructor(readonly kc: KubeAccessLike) {
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error('kubeconfig has no current cluster');
    this.server = new URL(cluster.server);
  }

  /** Sees every call and every connection opened; returns how to stop. */
  observe(o: KubeClientObserver): () => void {
    this.observers.add(o);
    return () => this.observers.delete(o);
  }

  private requested(method: string, path: string, status: number): void {
    for (const o of this.observers) o.request?.(method, path, status);
  }

  private agent(purpose: ConnectionPurpose, perRequest: http.Agent | undefined): http.Agent {
    let agent = this.agents[purpose];
    if (!agent) {
      const tls = (perRequest as https.Agent | undefined)?.options ?? {};
      agent = this.agents[purpose] =
        this.server.protocol === 'https:'
          ? new https.Agent({ ...tls, keepAlive: true })
          : new http.Agent({ keepAlive: true });
      const open = agent.createConnection.bind(agent);
      agent.createConnection = (...args) => {
        for (const o of this.observers) o.connection?.(purpose);
        return open(...args);
      };
    }
    return agent;
  }

  static fromFile(path: string): KubeClient {
    return new KubeClient(KubeAccess.fromFile(path));
  }

  /** KUBECONFIG, else ~/.kube/config, else the pod's service account. */
  static fromDefault(): KubeClient {
    return new KubeClient(KubeAccess.fromDefault());
  }

  /** The namespace of the kubeconfig's current context, if it names one. */
  contextNamespace(): string | undefined {
    return this.kc.getContextObject(this.kc.getCurrentContext())?.namespace;
  }

  private async options(
    method: string,
    path: string,
    headers: http.OutgoingHttpHeaders,
    purpose: ConnectionPurpose = 'requests',
  ): Promise<https.RequestOptions> {
    const opts: https.RequestOptions = {
      method,
      hostname: this.server.hostname.replace(/^\[(.*)\]$/, '$1'),
      port: this.server.port || (this.server.protocol === 'https:' ? 443 : 80),
      path: `${this.server.pathname.replace(/\/$/, '')}${path}`,
      headers: { accept: 'application/json', ...headers },
    };
    await this.kc.applyToHTTPSOptions(opts);
    // HTTP/2 requests take their TLS options from here (h2()); the rest go through an agent
    if (purpose === 'watches' || this.server.protocol !== 'https:')
      opts.agent = this.agent(purpose, opts.agent as http.Agent | undefined);
    return opts;
  }

  private get lib() {
    return this.server.protocol === 'https:' ? https : http;
  }

  /** The HTTP/2 session for these TLS options: the open one, or a new one (counted as a connection). */
  private h2(opts: https.RequestOptions): Session {
    const agentTls = ((opts.agent as https.Agent | undefined)?.options ?? {}) as Record<
      string,
      unknown
    >;
    const tls: Record<string, unknown> = {};
    for (const k of TLS_KEYS) {
      const v = (opts as Record<string, unknown>)[k] ?? agentTls[k];
      if (v !== undefined) tls[k] = v;
    }
    const cur = this.session;
    if (cur && !cur.h2.closed && !cur.h2.destroyed && cur.cert === tls.cert && cur.key === tls.key)
      return cur;
    if (cur && cur.streams === 0) cur.h2.close();
    for (const o of this.observers) o.connection?.('requests');
    const h2 = http2.connect(this.server.origin, tls);
    const session: Session = { h2, cert: tls.cert, key: tls.key, streams: 0 };
    // A connection that fails fails its streams, which report it; this only keeps it from crashing the process.
    h2.on('error', () => undefined);
    const forget = () => {
      if (this.session === session) this.session = undefined;
    };
    h2.on('close', forget);
    h2.on('goaway', forget);
    h2.unref(); // an idle connection keeps no process alive; open streams ref it
    this.session = session;
    return session;
  }

  async request<T = unknown>(
    method: string,
    path: string,
    body?: unknown,
    contentType = 'application/json',
    signal?: AbortSignal,
  ): Promise<T> {
    const opts = await this.options(
      method,
      path,
      body !== undefined ? { 'content-type': contentType } : {},
    );
    const payload =
      body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
    if (this.server.protocol === 'https:')
      return this.requestH2<T>(method, path, opts, payload, signal);
    const lib = this.lib;
    return new Promise<T>((resolve, reject) => {
      const req = lib.request(opts, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const parsed = parseBody(Buffer.concat(chunks).toString('utf8'));
          const status = res.statusCode ?? 0;
          this.requested(method, path, status);
          if (status >= 200 && status < 300) resolve(parsed as T);
          else reject(apiError(status, parsed, `${method} ${path}`));
        });
        res.on('error', reject);
      });
      req.on('error', reject);
      req.setTimeout(30_000, () => req.destroy(new Error(`${method} ${path}: timed out`)));
      if (signal) untilClosed(req, signal, () => req.destroy(signal.reason as Error));
      if (payload !== undefined) req.write(payload);
      req.end();
    });
  }

  private requestH2<T>(
    method: string,
    path: string,
    opts: https.RequestOptions,
    payload: string | undefined,
    signal: AbortSignal | undefined,
  ): Promise<T> {
    const session = this.h2(opts);
    const headers: http2.OutgoingHttpHeaders = {
      ...(opts.headers as http.OutgoingHttpHeaders),
      ':method': method,
      ':path': opts.path as string,
    };
    delete headers.host;
    delete headers.connection;
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      const fail = (err: unknown) => {
        if (settled) return;
        settled = true;
        reject(err instanceof Error ? err : new Error(String(err)));
      };
      const stream = session.h2.request(headers, { endStream: payload === undefined });
      session.streams++;
      session.h2.ref();
      let status = 0;
      const chunks: Buffer[] = [];
      stream.on('response', (h) => {
        status = Number(h[':status'] ?? 0);
      });
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        if (settled) return;
        settled = true;
        const parsed = parseBody(Buffer.concat(chunks).toString('utf8'));
        this.requested(method, path, status);
        if (status >= 200 && status < 300) resolve(parsed as T);
        else reject(apiError(status, parsed, `${method} ${path}`));
      });
      stream.on('error', fail);
      stream.on('close', () => {
        if (--session.streams === 0) {
          session.h2.unref();
          if (this.session !== session) session.h2.close(); // replaced (a rotated certificate): done with it
        }
        fail(
          new Error(
            `${method} ${path}: the stream closed before its response (code ${stream.rstCode})`,
          ),
        );
      });
      stream.setTimeout(30_000, () => {
        fail(new Error(`${method} ${path}: timed out`));
        stream.close(http2.constants.NGHTTP2_CANCEL);
      });
      if (signal) {
        const abort = () => {
          fail(signal.reason);
          stream.close(http2.constants.NGHTTP2_CANCEL);
        };
        if (signal.aborted) abort();
        else {
          signal.addEventListener('abort', abort, { once: true });
          stream.once('close', () => signal.removeEventListener('abort', abort));
        }
      }
      if (payload !== undefined) stream.end(payload);
    });
  }

  /**
   * A watch on `path` from `query.resourceVersion`: `onEvent` for each event
   * (type, object) until the server ends the stream (resolves) or it fails
   * (rejects; an HTTP error as KubeApiError). `signal` ends it early.
   */
  async watch(
    path: string,
    query: Record<string, string>,
    onEvent: (type: string, obj: KubeObject & { code?: number }) => void,
    signal: AbortSignal,
  ): Promise<void> {
    const qs = new URLSearchParams({ ...query, watch: 'true' }).toString();
    const opts = await this.options('GET', `${path}?${qs}`, {}, 'watches');
    const lib = this.lib;
    return new Promise<void>((resolve, reject) => {
      const req = lib.request(opts, (res) => {
        const status = res.statusCode ?? 0;
        this.requested('WATCH', path, status);
        res.setEncoding('utf8');
        if (status !== 200) {
          let text = '';
          res.on('data', (c: string) => (text += c));
          res.on('end', () => reject(apiError(status, parseBody(text), `watch ${path}`)));
          return;
        }
        let buffered = '';
        res.on('data', (chunk: string) => {
          buffered += chunk;
          let nl: number;
          try {
            while ((nl = buffered.indexOf('\n')) >= 0) {
              const line = buffered.slice(0, nl).trim();
              buffered = buffered.slice(nl + 1);
              if (!line) continue;
              const e = JSON.parse(line) as {
                type: string;
                object: KubeObject & { code?: number };
              };
              onEvent(e.type, e.object);
            }
          } catch (err) {
            req.destroy();
            reject(err instanceof Error ? err : new Error(String(err)));
          }
        });
        res.on('end', () => resolve());
        res.on('error', reject);
      });
      req.on('error', reject);
      // Silent for longer than the server's own timeoutSeconds: the connection
      // died without a word (no FIN, no RST); the caller reopens the watch.
      const timeout = Number(query.timeoutSeconds ?? 0);
      if (timeout > 0)
        req.setTimeout((timeout + Math.min(30, timeout)) * 1000, () =>
          req.destroy(new Error(`watch ${path}: no data past its timeout; reconnecting`)),
        );
      untilClosed(req, signal, () => {
        req.destroy();
        resolve();
      });
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

  /** POST: fails with 409 when the object exists. `fieldManager` names who wrote its fields. */
  create<T extends KubeObject>(
    obj: KubeObject,
    signal?: AbortSignal,
    fieldManager?: string,
  ): Promise<T> {
    const qs = fieldManager ? `?${new URLSearchParams({ fieldManager }).toString()}` : '';
    return this.request<T>(
      'POST',
      `${resourcePath(obj.apiVersion, obj.kind, obj.metadata.namespace)}${qs}`,
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
