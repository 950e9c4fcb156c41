// Where the apiserver is and how to prove who we are: a kubeconfig file
// (KUBECONFIG, else ~/.kube/config) or, in a pod, the service account.
// Written here rather than taken from @kubernetes/client-node, whose module
// graph (every generated API) costs the operator ~24 MiB of heap and ~100 MiB
// of RSS before it does anything (bench/RESULTS.md, operator). What it reads:
// server, certificate-authority(-data), insecure-skip-tls-verify,
// tls-server-name; token, tokenFile, client-certificate(-data) and
// client-key(-data), username/password, and exec credential plugins (how
// EKS, GKE and AKS clusters authenticate). Token files are re-read when they
// change (projected service-account tokens rotate), exec credentials when
// they expire. Legacy auth-provider entries are refused with the fix.
import { execFile } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import type https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { parse } from 'yaml';

/** What KubeClient needs of a kubeconfig (client-node's KubeConfig has the same shape). */
export interface KubeAccessLike {
  getCurrentCluster(): { server: string } | null;
  getCurrentContext(): string;
  getContextObject(name: string): { namespace?: string } | null;
  applyToHTTPSOptions(opts: https.RequestOptions): Promise<void>;
}

interface NamedCluster {
  name: string;
  cluster: {
    server: string;
    'certificate-authority'?: string;
    'certificate-authority-data'?: string;
    'insecure-skip-tls-verify'?: boolean;
    'tls-server-name'?: string;
  };
}

interface ExecConfig {
  command: string;
  args?: string[];
  env?: Array<{ name: string; value: string }>;
  apiVersion?: string;
}

interface NamedUser {
  name: string;
  user: {
    token?: string;
    tokenFile?: string;
    'client-certificate'?: string;
    'client-certificate-data'?: string;
    'client-key'?: string;
    'client-key-data'?: string;
    username?: string;
    password?: string;
    exec?: ExecConfig;
    'auth-provider'?: { name?: string };
  };
}

interface NamedContext {
  name: string;
  context: { cluster: string; user?: string; namespace?: string };
}

interface KubeConfigFile {
  clusters?: NamedCluster[];
  users?: NamedUser[];
  contexts?: NamedContext[];
  'current-context'?: string;
}

const SERVICE_ACCOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';

/** A file re-read when its modification time changes. */
class WatchedFile {
  private mtimeMs = -1;
  private text = '';
  constructor(readonly path: string) {}
  read(): string {
    const m = statSync(this.path).mtimeMs;
    if (m !== this.mtimeMs) {
      this.text = readFileSync(this.path, 'utf8').trim();
      this.mtimeMs = m;
    }
    return this.text;
  }
}

interface ExecCredential {
  token?: string;
  clientCertificateData?: string;
  clientKeyData?: string;
  /** ms since the epoch; undefined: good until the process ends */
  expiresAt?: number;
}

export class KubeAccess implements KubeAccessLike {
  private readonly tls: https.AgentOptions = {};
  private tokenFile: WatchedFile | undefined;
  private exec:
    { config: ExecConfig; cached?: ExecCredential; running?: Promise<ExecCredential> } | undefined;
  private authorization: string | undefined;
  private impersonation: { 'impersonate-user': string; 'impersonate-group'?: string[] } | undefined;

  private constructor(
    readonly server: string,
    private readonly context: { name: string; namespace?: string },
  ) {}

  /**
   * KUBECONFIG (several files: the first to name a thing wins), else
   * ~/.kube/config, else the pod's service account. `context` picks another
   * context than the current one (kubectl's --context).
   */
  static fromDefault(env: NodeJS.ProcessEnv = process.env, context?: string): KubeAccess {
    const files = env.KUBECONFIG?.split(path.delimiter).filter(Boolean) ?? [];
    if (files.length) return KubeAccess.fromFiles(files, context);
    if (env.KUBERNETES_SERVICE_HOST && !context) return KubeAccess.inCluster(env);
    return KubeAccess.fromFiles([path.join(os.homedir(), '.kube', 'config')], context);
  }

  static fromFile(file: string, context?: string): KubeAccess {
    return KubeAccess.fromFiles([file], context);
  }

  /** Merged as kubectl merges them: the first file to name a thing wins. */
  static fromFiles(files: string[], context?: string): KubeAccess {
    const merged: Required<KubeConfigFile> = {
      clusters: [],
      users: [],
      contexts: [],
      'current-context': '',
    };
    for (const file of files) {
      let doc: KubeConfigFile;
      try {
        doc = (parse(readFileSync(file, 'utf8')) ?? {}) as KubeConfigFile;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT' && files.length > 1) continue;
        throw new Error(`kubeconfig ${file}: ${(err as Error).message}`, { cause: err });
      }
      const base = path.dirname(file);
      for (const c of doc.clusters ?? [])
        if (!merged.clusters.some((x) => x.name === c.name))
          merged.clusters.push({ ...c, cluster: relative(c.cluster, base) });
      for (const u of doc.users ?? [])
        if (!merged.users.some((x) => x.name === u.name))
          merged.users.push({ ...u, user: relative(u.user, base) });
      for (const c of doc.contexts ?? [])
        if (!merged.contexts.some((x) => x.name === c.name)) merged.contexts.push(c);
      merged['current-context'] ||= doc['current-context'] ?? '';
    }
    if (context) {
      if (!merged.contexts.some((c) => c.name === context))
        throw new Error(
          `kubeconfig ${files.join(path.delimiter)}: no context named ${context} (kubectl config get-contexts lists them)`,
        );
      merged['current-context'] = context;
    }
    return KubeAccess.fromConfig(merged, files.join(path.delimiter));
  }

  private static fromConfig(doc: Required<KubeConfigFile>, where: string): KubeAccess {
    const name = doc['current-context'];
    const context = doc.contexts.find((c) => c.name === name)?.context;
    if (!context)
      throw new Error(
        `kubeconfig ${where}: no current context${name ? ` named ${name}` : ''}: set one with kubectl config use-context`,
      );
    const cluster = doc.clusters.find((c) => c.name === context.cluster)?.cluster;
    if (!cluster?.server)
      throw new Error(
        `kubeconfig ${where}: context ${name} names cluster ${context.cluster}, which has no server`,
      );
    const access = new KubeAccess(cluster.server, { name, namespace: context.namespace });
    const ca = dataOrFile(cluster['certificate-authority-data'], cluster['certificate-authority']);
    if (ca) access.tls.ca = ca;
    if (cluster['insecure-skip-tls-verify']) access.tls.rejectUnauthorized = false;
    if (cluster['tls-server-name']) access.tls.servername = cluster['tls-server-name'];
    const user = context.user ? doc.users.find((u) => u.name === context.user)?.user : undefined;
    if (!user) return access;
    if (user['auth-provider'])
      throw new Error(
        `kubeconfig ${where}: user ${context.user} uses the auth-provider "${user['auth-provider'].name ?? '?'}", which jobfleet does not support: use its exec credential plugin instead (e.g. gke-gcloud-auth-plugin, kubelogin, aws eks get-token)`,
      );
    const cert = dataOrFile(user['client-certificate-data'], user['client-certificate']);
    const key = dataOrFile(user['client-key-data'], user['client-key']);
    if (cert) access.tls.cert = cert;
    if (key) access.tls.key = key;
    if (user.token) access.authorization = `Bearer ${user.token}`;
    else if (user.tokenFile) access.tokenFile = new WatchedFile(user.tokenFile);
    else if (user.username !== undefined)
      access.authorization = `Basic ${Buffer.from(`${user.username}:${user.password ?? ''}`).toString('base64')}`;
    if (user.exec) access.exec = { config: user.exec };
    return access;
  }

  /** In a pod: the apiserver's service address, the service account's token (re-read as it rotates) and CA. */
  static inCluster(env: NodeJS.ProcessEnv = process.env, dir = SERVICE_ACCOUNT): KubeAccess {
    const host = env.KUBERNETES_SERVICE_HOST ?? '';
    const port = env.KUBERNETES_SERVICE_PORT ?? '443';
    let namespace: string | undefined;
    try {
      namespace = readFileSync(path.join(dir, 'namespace'), 'utf8').trim();
    } catch {
      // not mounted: the default namespace
    }
    const access = new KubeAccess(`https://${host.includes(':') ? `[${host}]` : host}:${port}`, {
      name: 'inCluster',
      namespace,
    });
    access.tls.ca = readFileSync(path.join(dir, 'ca.crt'));
    access.tokenFile = new WatchedFile(path.join(dir, 'token'));
    return access;
  }

  getCurrentCluster(): { server: string } {
    return { server: this.server };
  }

  getCurrentContext(): string {
    return this.context.name;
  }

  getContextObject(name: string): { namespace?: string } | null {
    return name === this.context.name ? { namespace: this.context.namespace } : null;
  }

  /** Acts as another user (kubectl's --as and --as-group): the apiserver authorizes the request as them. */
  impersonate(user: string, groups: string[] = []): this {
    this.impersonation = {
      'impersonate-user': user,
      ...(groups.length && { 'impersonate-group': groups }),
    };
    return this;
  }

  /** TLS material (fixed for the process) and this request's credentials. */
  async applyToHTTPSOptions(opts: https.RequestOptions): Promise<void> {
    Object.assign(opts, this.tls);
    let authorization = this.authorization;
    if (this.tokenFile) authorization = `Bearer ${this.tokenFile.read()}`;
    if (this.exec) {
      const cred = await this.execCredential();
      if (cred.token) authorization = `Bearer ${cred.token}`;
      if (cred.clientCertificateData) opts.cert = cred.clientCertificateData;
      if (cred.clientKeyData) opts.key = cred.clientKeyData;
    }
    if (authorization) opts.headers = { ...opts.headers, authorization };
    if (this.impersonation) opts.headers = { ...opts.headers, ...this.impersonation };
  }

  /**
   * The exec plugin's credential, run again a minute before it expires; the
   * concurrent requests that find it expired share one run of the plugin.
   */
  private execCredential(): Promise<ExecCredential> {
    const e = this.exec as NonNullable<KubeAccess['exec']>;
    const c = e.cached;
    if (c && (c.expiresAt === undefined || c.expiresAt - Date.now() > 60_000))
      return Promise.resolve(c);
    e.running ??= this.runExec(e.config).then(
      (cred) => {
        e.cached = cred;
        e.running = undefined;
        return cred;
      },
      (err: unknown) => {
        e.running = undefined;
        throw err;
      },
    );
    return e.running;
  }

  private async runExec(config: ExecConfig): Promise<ExecCredential> {
    const { command, args = [], env = [], apiVersion } = config;
    const info = {
      apiVersion: apiVersion ?? 'client.authentication.k8s.io/v1',
      kind: 'ExecCredential',
      spec: { interactive: false },
    };
    const stdout = await new Promise<string>((resolve, reject) =>
      execFile(
        command,
        args,
        {
          env: {
            ...process.env,
            ...Object.fromEntries(env.map((v) => [v.name, v.value])),
            KUBERNETES_EXEC_INFO: JSON.stringify(info),
          },
          timeout: 30_000,
        },
        (err, out, stderr) =>
          err
            ? reject(
                new Error(
                  `kubeconfig exec plugin ${command} failed: ${(stderr || err.message).trim().slice(0, 300)}`,
                ),
              )
            : resolve(out),
      ),
    );
    const status = (
      JSON.parse(stdout) as {
        status?: {
          token?: string;
          clientCertificateData?: string;
          clientKeyData?: string;
          expirationTimestamp?: string;
        };
      }
    ).status;
    if (!status?.token && !status?.clientCertificateData)
      throw new Error(`kubeconfig exec plugin ${command} returned no token and no certificate`);
    return {
      token: status.token,
      clientCertificateData: status.clientCertificateData,
      clientKeyData: status.clientKeyData,
      expiresAt: status.expirationTimestamp ? Date.parse(status.expirationTimestamp) : undefined,
    };
  }
}

/** A kubeconfig's `<x>-data` (base64) or, failing that, the file `<x>` names. */
function dataOrFile(data: string | undefined, file: string | undefined): Buffer | undefined {
  if (data) return Buffer.from(data, 'base64');
  return file ? readFileSync(file) : undefined;
}

/** Relative file paths in a kubeconfig are relative to the file. */
function relative<T extends object>(entry: T, base: string): T {
  const out = { ...entry } as Record<string, unknown>;
  for (const k of ['certificate-authority', 'client-certificate', 'client-key', 'tokenFile'])
    if (typeof out[k] === 'string' && !path.isAbsolute(out[k])) out[k] = path.join(base, out[k]);
  return out as T;
}
