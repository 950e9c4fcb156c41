// One RabbitMQ 4 node of the test ground, run from the chroot that
// build-rabbitmq.sh makes: its own ports, node name, epmd and data folder, so
// it runs beside the machine's RabbitMQ. Each node runs in private mount and
// PID namespaces (unshare): /proc is mounted for it alone, and when the node's
// first process dies the kernel ends the rest (epmd included), so a SIGKILL
// leaves nothing behind. In a network namespace (`netns`) it is a host of its
// own, with its own address: how the cluster ground kills or cuts one node.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { groundVersions, repoRoot } from './control-plane.js';

const run = promisify(execFile);
const here = path.dirname(fileURLToPath(import.meta.url));

/** The chroot folder (built by `make rabbitmq4`), or undefined when it was never built. */
export function rabbitmq4Root(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const cache = env.JOBFLEET_CACHE_DIR ?? path.join(repoRoot, '.cache');
  const dir = path.join(cache, 'rabbitmq', `debian-${groundVersions().RABBITMQ4_DEBIAN_SUITE}`);
  return existsSync(path.join(dir, 'complete')) ? path.join(dir, 'root') : undefined;
}

export interface RabbitNodeOptions {
  /** the chroot (rabbitmq4Root()) */
  root: string;
  /** short name, unique among running nodes: the node is `<name>@<host>` */
  name: string;
  /** the address it listens on and is named by (default 127.0.0.1, short name `localhost`) */
  host?: string;
  /** run inside this network namespace (made by the cluster ground) */
  netns?: string;
  amqpPort: number;
  mgmtPort: number;
  distPort: number;
  epmdPort: number;
  /** the Erlang cookie; nodes of one cluster share it */
  cookie?: string;
  /** extra rabbitmq.conf lines */
  config?: string[];
  /** stop the node (and remove its data) when this process dies, even by SIGKILL */
  reapWith?: number;
}

export interface RabbitNode {
  /** `name@host`, as rabbitmqctl -n takes it */
  nodename: string;
  host: string;
  amqpUrl: string;
  mgmtUrl: string;
  /** the server's version, e.g. 4.0.5 */
  version: string;
  pid: number;
  /** rabbitmqctl (or another CLI of the package) against this node */
  ctl(
    tool: 'rabbitmqctl' | 'rabbitmq-queues' | 'rabbitmq-diagnostics',
    ...args: string[]
  ): Promise<string>;
  /** graceful stop (SIGTERM), then SIGKILL after `graceMs` */
  stop(graceMs?: number): Promise<void>;
  /** SIGKILL, as a crashed host */
  kill(): Promise<void>;
  /** the node's data survives stop/kill until this (a restarted node reuses it) */
  removeData(): Promise<void>;
  exited: Promise<number | null>;
}

const PLUGINS = '/usr/lib/rabbitmq/lib';

function pluginsDir(root: string): string {
  const dirs = readdirSync(path.join(root, PLUGINS)).filter((d) =>
    d.startsWith('rabbitmq_server-'),
  );
  if (!dirs[0])
    throw new Error(`no rabbitmq_server-* in ${root}${PLUGINS}: rebuild with make rabbitmq4`);
  return `${PLUGINS}/${dirs[0]}/plugins`;
}

/** A node's own folder: `home` inside the chroot, `hostHome` the same seen from here. */
export function rabbitNodeHome(root: string, name: string): { home: string; hostHome: string } {
  const home = `/run/jobfleet/${name}`;
  return { home, hostHome: path.join(root, home) };
}

/** Starts a node (or restarts one on its kept data) and waits for its management API. */
export async function startRabbitNode(o: RabbitNodeOptions): Promise<RabbitNode> {
  const host = o.host ?? '127.0.0.1';
  const longnames = host !== '127.0.0.1';
  const nodename = `${o.name}@${longnames ? host : 'localhost'}`;
  const { home, hostHome } = rabbitNodeHome(o.root, o.name);
  await mkdir(path.join(hostHome, 'data'), { recursive: true });
  await mkdir(path.join(hostHome, 'log'), { recursive: true });
  const cookiePath = path.join(hostHome, '.erlang.cookie');
  await rm(cookiePath, { force: true });
  await writeFile(cookiePath, o.cookie ?? randomBytes(16).toString('hex'), { mode: 0o400 });
  await writeFile(
    path.join(hostHome, 'rabbitmq.conf'),
    [
      `listeners.tcp.default = ${host}:${o.amqpPort}`,
      `management.tcp.ip = ${host}`,
      `management.tcp.port = ${o.mgmtPort}`,
      'loopback_users = none',
      // the test ground's machines have far less free disk than a broker host
      'disk_free_limit.absolute = 50MB',
      ...(o.config ?? []),
    ].join('\n') + '\n',
  );
  await writeFile(path.join(hostHome, 'enabled_plugins'), '[rabbitmq_management].\n');
  const env = {
    HOME: home,
    PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
    LANG: 'C.UTF-8',
    ERL_EPMD_PORT: String(o.epmdPort),
    ERL_EPMD_ADDRESS: host,
    RABBITMQ_NODENAME: nodename,
    RABBITMQ_USE_LONGNAME: String(longnames),
    RABBITMQ_NODE_IP_ADDRESS: host,
    RABBITMQ_NODE_PORT: String(o.amqpPort),
    RABBITMQ_DIST_PORT: String(o.distPort),
    RABBITMQ_CONFIG_FILE: `${home}/rabbitmq.conf`,
    RABBITMQ_ENABLED_PLUGINS_FILE: `${home}/enabled_plugins`,
    RABBITMQ_MNESIA_BASE: `${home}/data`,
    RABBITMQ_LOG_BASE: `${home}/log`,
    RABBITMQ_PLUGINS_DIR: pluginsDir(o.root),
  };
  const envArgs = Object.entries(env).map(([k, v]) => `${k}=${v}`);
  const inRoot = (cmd: string[]) => [
    ...(o.netns ? ['ip', 'netns', 'exec', o.netns] : []),
    'unshare',
    '--mount',
    '--pid',
    '--fork',
    '--kill-child=SIGTERM',
    `--mount-proc=${path.join(o.root, 'proc')}`,
    'chroot',
    o.root,
    'env',
    '-i',
    ...envArgs,
    ...cmd,
  ];
  const argv = inRoot(['/usr/lib/rabbitmq/bin/rabbitmq-server']);
  const child: ChildProcess = spawn(argv[0] as string, argv.slice(1), {
    stdio: ['ignore', 'ignore', 'pipe'],
    detached: true,
  });
  if (o.reapWith) {
    const reaper = spawn(
      process.execPath,
      // the process group (a negative pid): the node's first process, a shell
      // in its own PID namespace, ignores a signal sent to it alone
      [path.join(here, 'reaper.mjs'), String(o.reapWith), hostHome, String(-(child.pid as number))],
      { detached: true, stdio: 'ignore' },
    );
    reaper.unref();
    child.once('exit', () => reaper.kill('SIGTERM'));
  }
  let stderr = '';
  child.stderr?.on('data', (b: Buffer) => {
    stderr = (stderr + b.toString()).slice(-4000);
  });
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => resolve(code)),
  );
  const amqpUrl = `amqp://guest:guest@${host}:${o.amqpPort}`;
  const mgmtUrl = `http://guest:guest@${host}:${o.mgmtPort}`;
  const auth = 'Basic ' + Buffer.from('guest:guest').toString('base64');

  let dead = false;
  void exited.then(() => (dead = true));
  let version = '';
  for (const until = Date.now() + 90_000; !version;) {
    if (dead || Date.now() > until) {
      const logFile = path.join(hostHome, 'log', `${nodename}.log`);
      const tail = existsSync(logFile) ? readFileSync(logFile, 'utf8').slice(-2000) : stderr;
      if (!dead) process.kill(-(child.pid as number), 'SIGKILL');
      throw new Error(`RabbitMQ node ${nodename} did not start: ${tail}`);
    }
    try {
      const res = await fetch(`http://${host}:${o.mgmtPort}/api/overview`, {
        headers: { authorization: auth },
        signal: AbortSignal.timeout(2000),
      });
      if (res.ok) version = ((await res.json()) as { rabbitmq_version: string }).rabbitmq_version;
    } catch {
      // not up yet
    }
    if (!version) await new Promise((r) => setTimeout(r, 300));
  }

  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-(child.pid as number), sig);
    } catch {
      // gone already
    }
  };
  return {
    nodename,
    host,
    amqpUrl,
    mgmtUrl,
    version,
    pid: child.pid as number,
    exited,
    ctl: async (tool, ...args) => {
      const cli = inRoot([`/usr/lib/rabbitmq/bin/${tool}`, '-n', nodename, ...args]);
      const { stdout } = await run(cli[0] as string, cli.slice(1), { timeout: 60_000 });
      return stdout;
    },
    stop: async (graceMs = 15_000) => {
      if (dead) return;
      signal('SIGTERM');
      const t = setTimeout(() => signal('SIGKILL'), graceMs);
      await exited;
      clearTimeout(t);
    },
    kill: async () => {
      if (dead) return;
      signal('SIGKILL');
      await exited;
    },
    removeData: () => rm(hostHome, { recursive: true, force: true }),
  };
}
