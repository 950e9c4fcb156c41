// The kubeconfig reader: what kubectl users' files hold, the pod's service
// account, credentials that rotate, and the errors that say what to fix.
import { mkdtempSync, utimesSync, writeFileSync } from 'node:fs';
import type https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { KubeAccess } from '../../src/kube/kubeconfig.js';

const tmp = () => mkdtempSync(path.join(os.tmpdir(), 'kubeconfig-'));

function config(user: Record<string, unknown>, cluster: Record<string, unknown> = {}): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Config',
    'current-context': 'dev',
    contexts: [{ name: 'dev', context: { cluster: 'c', user: 'u', namespace: 'team-a' } }],
    clusters: [{ name: 'c', cluster: { server: 'https://10.0.0.1:6443', ...cluster } }],
    users: [{ name: 'u', user }],
  });
}

async function applied(access: KubeAccess): Promise<https.RequestOptions> {
  const opts: https.RequestOptions = { headers: { accept: 'application/json' } };
  await access.applyToHTTPSOptions(opts);
  return opts;
}

describe('KubeAccess', () => {
  it('reads a static token, the CA (relative to the file), and the context namespace', async () => {
    const dir = tmp();
    writeFileSync(path.join(dir, 'ca.crt'), 'CA PEM');
    const file = path.join(dir, 'config');
    writeFileSync(file, config({ token: 's3cret' }, { 'certificate-authority': 'ca.crt' }));
    const access = KubeAccess.fromFile(file);
    expect(access.getCurrentCluster().server).toBe('https://10.0.0.1:6443');
    expect(access.getContextObject(access.getCurrentContext())?.namespace).toBe('team-a');
    const opts = await applied(access);
    expect(opts.headers).toMatchObject({
      authorization: 'Bearer s3cret',
      accept: 'application/json',
    });
    expect(String(opts.ca)).toBe('CA PEM');
  });

  it('re-reads a token file when it changes (projected tokens rotate)', async () => {
    const dir = tmp();
    const token = path.join(dir, 'token');
    writeFileSync(token, 'first\n');
    const file = path.join(dir, 'config');
    writeFileSync(file, config({ tokenFile: token }));
    const access = KubeAccess.fromFile(file);
    expect((await applied(access)).headers).toMatchObject({ authorization: 'Bearer first' });
    writeFileSync(token, 'second\n');
    utimesSync(token, new Date(), new Date(Date.now() + 5000));
    expect((await applied(access)).headers).toMatchObject({ authorization: 'Bearer second' });
  });

  it('takes client certificates inline (base64) and basic auth', async () => {
    const dir = tmp();
    const file = path.join(dir, 'config');
    writeFileSync(
      file,
      config({
        'client-certificate-data': Buffer.from('CERT').toString('base64'),
        'client-key-data': Buffer.from('KEY').toString('base64'),
        username: 'admin',
        password: 'pw',
      }),
    );
    const opts = await applied(KubeAccess.fromFile(file));
    expect(String(opts.cert)).toBe('CERT');
    expect(String(opts.key as Buffer)).toBe('KEY');
    expect(opts.headers).toMatchObject({
      authorization: `Basic ${Buffer.from('admin:pw').toString('base64')}`,
    });
  });

  it('runs an exec credential plugin once until its credential nears expiry, even for requests at once', async () => {
    const dir = tmp();
    const counter = path.join(dir, 'runs');
    writeFileSync(counter, '');
    const plugin = path.join(dir, 'plugin.mjs');
    writeFileSync(
      plugin,
      `import { appendFileSync } from 'node:fs';
       appendFileSync(${JSON.stringify(counter)}, 'x');
       const info = JSON.parse(process.env.KUBERNETES_EXEC_INFO);
       console.log(JSON.stringify({ apiVersion: info.apiVersion, kind: 'ExecCredential',
         status: { token: 'from-' + process.env.CLUSTER, expirationTimestamp: new Date(Date.now() + 3600e3).toISOString() } }));`,
    );
    const file = path.join(dir, 'config');
    writeFileSync(
      file,
      config({
        exec: {
          apiVersion: 'client.authentication.k8s.io/v1',
          command: process.execPath,
          args: [plugin],
          env: [{ name: 'CLUSTER', value: 'prod' }],
        },
      }),
    );
    const access = KubeAccess.fromFile(file);
    // requests at once (concurrent reconciles) share one run of the plugin
    const first = await Promise.all([applied(access), applied(access), applied(access)]);
    for (const o of first) expect(o.headers).toMatchObject({ authorization: 'Bearer from-prod' });
    expect((await applied(access)).headers).toMatchObject({ authorization: 'Bearer from-prod' });
    const { readFileSync } = await import('node:fs');
    expect(readFileSync(counter, 'utf8')).toBe('x');
  });

  it('refuses legacy auth-provider entries, naming the fix', () => {
    const dir = tmp();
    const file = path.join(dir, 'config');
    writeFileSync(file, config({ 'auth-provider': { name: 'gcp' } }));
    expect(() => KubeAccess.fromFile(file)).toThrow(/auth-provider "gcp".*exec credential plugin/);
  });

  it('says what to fix when there is no current context', () => {
    const dir = tmp();
    const file = path.join(dir, 'config');
    writeFileSync(file, JSON.stringify({ clusters: [], contexts: [], users: [] }));
    expect(() => KubeAccess.fromFile(file)).toThrow(/no current context.*use-context/);
  });

  it('merges KUBECONFIG files as kubectl does: the first to name a thing wins', () => {
    const dir = tmp();
    const a = path.join(dir, 'a');
    const b = path.join(dir, 'b');
    writeFileSync(a, JSON.stringify({ 'current-context': 'dev' }));
    writeFileSync(b, config({ token: 't' }));
    const access = KubeAccess.fromDefault({ KUBECONFIG: `${a}${path.delimiter}${b}` });
    expect(access.getCurrentCluster().server).toBe('https://10.0.0.1:6443');
  });

  it('in a pod: the service address, its CA, the namespace and the rotating token', async () => {
    const dir = tmp();
    writeFileSync(path.join(dir, 'ca.crt'), 'POD CA');
    writeFileSync(path.join(dir, 'token'), 'pod-token');
    writeFileSync(path.join(dir, 'namespace'), 'jobfleet-system');
    const access = KubeAccess.inCluster(
      { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' },
      dir,
    );
    expect(access.getCurrentCluster().server).toBe('https://[fd00::1]:443');
    expect(access.getContextObject(access.getCurrentContext())?.namespace).toBe('jobfleet-system');
    const opts = await applied(access);
    expect(String(opts.ca)).toBe('POD CA');
    expect(opts.headers).toMatchObject({ authorization: 'Bearer pod-token' });
  });
});
