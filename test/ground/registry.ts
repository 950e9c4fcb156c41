// A container registry that behaves like a private one: the distribution
// registry (built by build-node.sh) serving TLS with the ground's own CA and
// basic auth, so a pull needs credentials — a pod's imagePullSecrets — and a
// client that trusts the CA. It listens on localhost:5000, the name the README
// tour pushes to, so one runs per machine (or on another port, when asked).
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  createWriteStream,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { PrivateCa } from './tls.js';

const run = promisify(execFile);

export const REGISTRY_HOST = 'localhost:5000';

export interface Registry {
  host: string;
  username: string;
  password: string;
  /** what `docker login` writes: for buildah's REGISTRY_AUTH_FILE */
  authFile: string;
  /** a folder holding the CA as ca.crt: buildah's --cert-dir, containerd's hosts.toml */
  certDir: string;
  /** the `.dockerconfigjson` of an image pull Secret */
  dockerConfigJson: string;
  pid: number;
  stop(): Promise<void>;
}

/** `{"auths":{host:{auth}}}`, as `docker login` writes it and a dockerconfigjson Secret holds it. */
export function dockerConfig(host: string, username: string, password: string): string {
  const auth = Buffer.from(`${username}:${password}`).toString('base64');
  return JSON.stringify({ auths: { [host]: { username, password, auth } } });
}

/**
 * Its storage and config live in a temp folder of its own (in `under`, when given: the real
 * node's, whose teardown then covers it), removed when it stops. `port`: 5000 unless given (then
 * its host is localhost:PORT).
 */
export async function startRegistry(o: {
  binary: string;
  ca: PrivateCa;
  under?: string;
  port?: number;
}): Promise<Registry> {
  const port = o.port ?? 5000;
  const host = port === 5000 ? REGISTRY_HOST : `localhost:${port}`;
  const dir = mkdtempSync(path.join(o.under ?? os.tmpdir(), 'jobfleet-registry-'));
  const at = (f: string) => path.join(dir, f);
  mkdirSync(at('storage'), { recursive: true });
  mkdirSync(at('certs'), { recursive: true });
  writeFileSync(at('certs/ca.crt'), readFileSync(o.ca.caFile));
  const username = 'jobfleet';
  const password = randomBytes(12).toString('hex');
  // bcrypt, the only hash the registry's htpasswd accepts (Debian's apache2-utils)
  const { stdout } = await run('htpasswd', ['-Bbn', username, password]);
  writeFileSync(at('htpasswd'), stdout.trim() + '\n');
  writeFileSync(
    at('config.yml'),
    JSON.stringify({
      version: 0.1,
      log: { level: 'warn' },
      storage: { filesystem: { rootdirectory: at('storage') }, delete: { enabled: true } },
      http: {
        addr: `127.0.0.1:${port}`,
        tls: { certificate: o.ca.certFile, key: o.ca.keyFile },
      },
      auth: { htpasswd: { realm: 'jobfleet-ground', path: at('htpasswd') } },
    }),
  );
  const config = dockerConfig(host, username, password);
  writeFileSync(at('auth.json'), config);

  const log = createWriteStream(at('registry.log'));
  const child = spawn(o.binary, ['serve', at('config.yml')], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout.pipe(log);
  child.stderr.pipe(log);
  const exited = new Promise((r) => child.once('exit', r));
  const deadline = Date.now() + 15_000;
  const stop = async () => {
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  for (;;) {
    if (child.exitCode !== null) {
      const log = readFileSync(at('registry.log'), 'utf8');
      await stop();
      throw new Error(`the registry exited (is port ${port} taken?):\n${log}`);
    }
    const status = await fetchStatus(o.ca.caFile, port).catch(() => 0);
    if (status === 401) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`the registry did not answer on ${host}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    host,
    username,
    password,
    authFile: at('auth.json'),
    certDir: at('certs'),
    dockerConfigJson: config,
    pid: child.pid!,
    stop,
  };
}

/** The registry's /v2/ status without credentials: 401 once it serves (auth required). */
async function fetchStatus(caFile: string, port: number): Promise<number> {
  const https = await import('node:https');
  return new Promise((resolve, reject) => {
    const req = https.get(
      `https://127.0.0.1:${port}/v2/`,
      { ca: readFileSync(caFile), servername: 'localhost' },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on('error', reject);
    req.setTimeout(2000, () => req.destroy(new Error('timeout')));
  });
}
