// A private CA and the servers that trust it, made by the test ground itself
// so the machine's own services stay untouched: a certificate authority
// (openssl), a PostgreSQL cluster made with the Debian package's initdb
// serving TLS with a certificate the CA signed, and the TLS listeners of a
// RabbitMQ 4 node (amqps and management https). The certificates name
// `localhost` and 127.0.0.1, so verify-full and hostname checks pass only
// for a client that trusts this CA.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { copyFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { poolConfig } from '../../worker/claim-store.js';
import { freePort } from './control-plane.js';

const run = promisify(execFile);

export interface PrivateCa {
  dir: string;
  /** the CA certificate (PEM): what JOBFLEET_TLS_CA_FILE and NODE_EXTRA_CA_CERTS name */
  caFile: string;
  /** a server certificate and key for localhost / 127.0.0.1, signed by the CA */
  certFile: string;
  keyFile: string;
  cleanup(): void;
}

export async function privateCa(): Promise<PrivateCa> {
  const dir = mkdtempSync(path.join(tmpdir(), 'jobfleet-ca-'));
  const at = (f: string) => path.join(dir, f);
  const openssl = (...args: string[]) => run('openssl', args, { cwd: dir });
  await openssl(
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-days',
    '2',
    '-subj',
    '/CN=jobfleet test CA',
    '-keyout',
    at('ca.key'),
    '-out',
    at('ca.crt'),
  );
  await openssl(
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-subj',
    '/CN=localhost',
    '-keyout',
    at('server.key'),
    '-out',
    at('server.csr'),
  );
  writeFileSync(
    at('san.ext'),
    'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n',
  );
  await openssl(
    'x509',
    '-req',
    '-in',
    at('server.csr'),
    '-CA',
    at('ca.crt'),
    '-CAkey',
    at('ca.key'),
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    at('san.ext'),
    '-out',
    at('server.crt'),
  );
  return {
    dir,
    caFile: at('ca.crt'),
    certFile: at('server.crt'),
    keyFile: at('server.key'),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/**
 * A client certificate the CA signs (clientAuth): what a server that asks for one and trusts the
 * CA accepts, e.g. the apiserver's `--kubelet-client-certificate` to a node's kubelet port.
 */
export async function clientCertificate(
  ca: PrivateCa,
  name: string,
): Promise<{ certFile: string; keyFile: string }> {
  const at = (f: string) => path.join(ca.dir, f);
  const openssl = (...args: string[]) => run('openssl', args, { cwd: ca.dir });
  await openssl(
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-subj',
    `/CN=${name}`,
    '-keyout',
    at(`${name}.key`),
    '-out',
    at(`${name}.csr`),
  );
  writeFileSync(at(`${name}.ext`), 'extendedKeyUsage=clientAuth\n');
  await openssl(
    'x509',
    '-req',
    '-in',
    at(`${name}.csr`),
    '-CA',
    at('ca.crt'),
    '-CAkey',
    at('ca.key'),
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    at(`${name}.ext`),
    '-out',
    at(`${name}.crt`),
  );
  return { certFile: at(`${name}.crt`), keyFile: at(`${name}.key`) };
}

/** Debian's PostgreSQL binaries (the package the machine's server came from). */
function pgBin(): string {
  const base = '/usr/lib/postgresql';
  const version = existsSync(base) ? readdirSync(base).sort().at(-1) : undefined;
  if (!version) throw new Error(`no PostgreSQL under ${base}: install Debian's postgresql package`);
  return path.join(base, version, 'bin');
}

export interface TlsPostgres {
  port: number;
  /** a verify-full URL naming localhost; the client brings the CA */
  url: string;
  stop(): Promise<void>;
}

/**
 * A PostgreSQL cluster of its own (initdb into a temporary folder, run as the
 * `postgres` user, which PostgreSQL requires), TLS only over TCP, trust auth.
 */
export async function tlsPostgres(ca: PrivateCa): Promise<TlsPostgres> {
  const bin = pgBin();
  const dir = mkdtempSync(path.join(tmpdir(), 'jobfleet-pg-'));
  const { uid, gid } = await userIds('postgres');
  chownSync(dir, uid, gid);
  const asPostgres = { uid, gid, cwd: dir, env: { ...process.env, HOME: dir } };
  const data = path.join(dir, 'data');
  await run(
    path.join(bin, 'initdb'),
    ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync'],
    asPostgres,
  );
  for (const [from, to] of [
    [ca.certFile, 'server.crt'],
    [ca.keyFile, 'server.key'],
  ] as const) {
    await run('install', ['-o', 'postgres', '-m', '0600', from, path.join(data, to)]);
  }
  // TLS is required: a plain connection is refused (hostssl only)
  writeFileSync(
    path.join(data, 'pg_hba.conf'),
    'local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n',
  );
  const port = await freePort();
  const server: ChildProcess = spawn(
    path.join(bin, 'postgres'),
    [
      '-D',
      data,
      '-c',
      `port=${port}`,
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      `unix_socket_directories=${dir}`,
      '-c',
      'ssl=on',
      '-c',
      'fsync=off',
    ],
    { ...asPostgres, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let log = '';
  server.stderr?.on('data', (b: Buffer) => (log = (log + b.toString()).slice(-4000)));
  const exited = new Promise<void>((r) => server.once('exit', () => r()));
  const url = `postgres://postgres@localhost:${port}/postgres?sslmode=verify-full`;
  const stop = async () => {
    server.kill('SIGINT'); // fast shutdown
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  for (const until = Date.now() + 30_000; ;) {
    const c = new pg.Client(poolConfig(url, ca.caFile));
    try {
      await c.connect();
      await c.end();
      break;
    } catch (err) {
      await c.end().catch(() => undefined);
      if (server.exitCode !== null || Date.now() > until) {
        await stop();
        throw new Error(`the TLS PostgreSQL did not start: ${String(err)}\n${log}`, { cause: err });
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  return { port, url, stop };
}

async function userIds(user: string): Promise<{ uid: number; gid: number }> {
  const [uid, gid] = await Promise.all([
    run('id', ['-u', user]).then((r) => Number(r.stdout.trim())),
    run('id', ['-g', user]).then((r) => Number(r.stdout.trim())),
  ]);
  return { uid, gid };
}

/**
 * rabbitmq.conf lines for a node's TLS listeners, the certificates copied
 * into its chroot folder (`hostHome` on this side, `home` inside).
 */
export async function rabbitTlsConfig(
  ca: PrivateCa,
  where: { hostHome: string; home: string },
  ports: { amqps: number; https: number },
): Promise<string[]> {
  await mkdir(path.join(where.hostHome, 'tls'), { recursive: true });
  for (const f of [ca.caFile, ca.certFile, ca.keyFile])
    await copyFile(f, path.join(where.hostHome, 'tls', path.basename(f)));
  const file = (f: string) => `${where.home}/tls/${path.basename(f)}`;
  const pem = [
    ['cacertfile', file(ca.caFile)],
    ['certfile', file(ca.certFile)],
    ['keyfile', file(ca.keyFile)],
  ];
  return [
    `listeners.ssl.default = 127.0.0.1:${ports.amqps}`,
    ...pem.map(([k, v]) => `ssl_options.${k} = ${v}`),
    'ssl_options.verify = verify_none',
    'ssl_options.fail_if_no_peer_cert = false',
    `management.ssl.port = ${ports.https}`,
    'management.ssl.ip = 127.0.0.1',
    ...pem.map(([k, v]) => `management.ssl.${k} = ${v}`),
  ];
}
