// `make dev` as a user runs it: the make target itself, its printed exports
// pasted into a shell of its own (a HOME of its own: the tour installs the
// plugin into ~/.local/bin), and the ways it is stopped. What a user of the
// dev ground does beyond the tour: `kubectl logs` on a worker pod (served by
// the local runner's kubelet port, through the apiserver), `kubectl plugin
// list` after the tour installed the released plugin, and a stop by a signal
// to make (SIGTERM or SIGINT to make alone, as a supervisor or `kill` sends
// it; Ctrl-C, which signals the whole foreground group) that leaves no
// process of the ground running and no port of it listening, and says so.
// The registry goes on a port of its own (REGISTRY_PORT): the tour's suite
// may hold localhost:5000 meanwhile.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildRelease } from '../../plugins/build.js';
import { freePort, repoRoot } from '../ground/control-plane.js';
import { eventually } from '../ground/eventually.js';
import { createSchema, type PgSchema } from '../ground/postgres.js';
import { createVhost, type RabbitVhost } from '../ground/rabbit.js';
import { findServices } from '../ground/services.js';
import { shellRun, type ShellResult } from '../fixtures/doc-shell.js';
import { tourCommands } from '../fixtures/tour.js';

interface MakeDev {
  make: ChildProcess;
  /** everything it printed so far, stdout and stderr */
  output(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** a command in a shell with make dev's exports, as the user pastes them */
  run(command: string, timeout?: number): Promise<ShellResult>;
  /** the same, left running: its output streams */
  start(command: string): ChildProcess;
  /** the shell's HOME */
  home: string;
  registryPort: number;
  cleanup(): void;
}

/** `make dev` in a process group of its own (a terminal's foreground job), up once it says so. */
async function startMakeDev(): Promise<MakeDev> {
  const home = mkdtempSync(path.join(os.tmpdir(), 'jobfleet-make-dev-'));
  const registryPort = await freePort();
  // a user's environment: not the make that runs these tests
  const env = { ...process.env };
  for (const v of ['MAKEFLAGS', 'MAKELEVEL', 'MFLAGS', 'MAKE_TERMOUT', 'MAKE_TERMERR'])
    delete env[v];
  const make = spawn('make', ['dev', `REGISTRY_PORT=${registryPort}`], {
    cwd: repoRoot,
    env,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  make.stdout.on('data', (b: Buffer) => (out += b.toString()));
  make.stderr.on('data', (b: Buffer) => (out += b.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    make.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const cleanup = () => {
    if (make.exitCode === null && make.signalCode === null) process.kill(-make.pid!, 'SIGKILL');
    rmSync(home, { recursive: true, force: true });
  };
  try {
    await eventually(
      'make dev to print that the dev ground is up',
      () => {
        if (make.exitCode !== null || make.signalCode !== null)
          throw new Error(`make dev exited:\n${out}`);
        return Promise.resolve(/^Ctrl-C .* stops it all\.$/m.test(out) || undefined);
      },
      480_000,
      250,
    );
  } catch (err) {
    cleanup();
    throw err;
  }
  const exports = out
    .split('\n')
    .filter((l) => /^\s+export /.test(l))
    .map((l) => l.trim())
    .join('\n');
  // the user's own PATH (node, the system) with ~/.local/bin already on it, as Debian's
  // ~/.profile puts it once it exists
  const userEnv: NodeJS.ProcessEnv = {
    ...env,
    HOME: home,
    PATH: `${path.dirname(process.execPath)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${home}/.local/bin`,
  };
  delete userEnv.KUBECONFIG;
  return {
    make,
    output: () => out,
    exited,
    home,
    registryPort,
    run: (command, timeout = 600_000) =>
      shellRun(`${exports}\n${command}`, { cwd: repoRoot, env: userEnv, timeoutMs: timeout }),
    start: (command) =>
      spawn('bash', ['-c', `${exports}\n${command}`], {
        cwd: repoRoot,
        env: userEnv,
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    cleanup,
  };
}

interface Proc {
  pid: number;
  comm: string;
  /** field 22 of /proc/PID/stat: tells this process from a later one with its pid */
  start: string;
}

function stat(pid: number): { ppid: number; comm: string; start: string } | undefined {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const close = s.lastIndexOf(')');
    const rest = s.slice(close + 2).split(' ');
    return { comm: s.slice(s.indexOf('(') + 1, close), ppid: Number(rest[1]), start: rest[19]! };
  } catch {
    return undefined;
  }
}

/** Every process below `root` (children, theirs, … detached ones too: parentage is kept). */
function descendants(root: number): Proc[] {
  const all = readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map((d) => ({ pid: Number(d), ...stat(Number(d)) }))
    .filter((p): p is Proc & { ppid: number } => p.comm !== undefined);
  const out: Proc[] = [];
  const walk = (pid: number) => {
    for (const p of all.filter((c) => c.ppid === pid)) {
      out.push({ pid: p.pid, comm: p.comm, start: p.start });
      walk(p.pid);
    }
  };
  walk(root);
  return out;
}

const alive = (p: Proc) => {
  const s = stat(p.pid);
  return (
    !!s && s.start === p.start && !readFileSync(`/proc/${p.pid}/stat`, 'utf8').includes(') Z ')
  );
};

/** TCP ports listening, with the pids that hold them (ss, iproute2). */
function listening(): Array<{ port: number; pids: number[] }> {
  return execFileSync('ss', ['-Hltnp'], { encoding: 'utf8' })
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      const cols = l.trim().split(/\s+/);
      return {
        port: Number(cols[3]!.slice(cols[3]!.lastIndexOf(':') + 1)),
        pids: [...l.matchAll(/pid=(\d+)/g)].map((m) => Number(m[1])),
      };
    });
}

/** A pod of the example worker's image on the dev ground: the runner runs its entrypoint. */
function workerPod(name: string, env: Record<string, string>): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default' },
    spec: {
      terminationGracePeriodSeconds: 10,
      containers: [
        {
          name: 'worker',
          image: 'localhost:5000/jobfleet-example-worker:dev',
          env: Object.entries(env).map(([n, value]) => ({ name: n, value })),
        },
      ],
    },
  });
}

interface Services {
  rabbit: RabbitVhost;
  db: PgSchema;
  env: Record<string, string>;
}

async function workerServices(): Promise<Services> {
  const { urls } = await findServices(process.env, { containers: false });
  const rabbit = await createVhost(urls.amqpUrl, urls.rabbitMgmtUrl);
  const db = await createSchema(urls.pgUrl);
  return {
    rabbit,
    db,
    env: {
      JOBFLEET_QUEUE: 'orders',
      JOBFLEET_BROKER_URL: rabbit.amqpUrl,
      JOBFLEET_CLAIMS_URL: db.url,
    },
  };
}

/** Applies the pod (once the namespace's service account exists) and waits for its process. */
async function runPod(dev: MakeDev, manifest: string, until: RegExp): Promise<void> {
  await eventually(
    'the pod to be created',
    async () => {
      const r = await dev.run(`kubectl apply -f - <<'EOF'\n${manifest}\nEOF`);
      return r.code === 0 || undefined;
    },
    60_000,
    500,
  );
  const name = (JSON.parse(manifest) as { metadata: { name: string } }).metadata.name;
  // the first pod builds the compiled entrypoints (tsc) when they are stale
  await eventually(
    `kubectl logs ${name} to show ${until}`,
    async () => until.test((await dev.run(`kubectl logs ${name}`)).stdout) || undefined,
    240_000,
    500,
  );
}

/**
 * Signals make dev, then holds it to what a user expects: make exits, the line saying what was
 * stopped, and nothing of the ground left — no process below make, no port they listened on.
 */
async function stopsCleanly(dev: MakeDev, signal: () => void, pods: number): Promise<string> {
  const processes = descendants(dev.make.pid!);
  const comms = processes.map((p) => p.comm);
  // what there is to stop: the control plane, the registry, the node (node itself) and the pods
  for (const c of ['etcd', 'kube-apiserver', 'kube-controller', 'kube-scheduler', 'registry'])
    expect(
      comms.some((n) => n.startsWith(c)),
      `${c} in ${comms.join(' ')}`,
    ).toBe(true);
  const pids = new Set(processes.map((p) => p.pid));
  const ports = listening()
    .filter((l) => l.pids.some((p) => pids.has(p)))
    .map((l) => l.port);
  expect(ports).toContain(dev.registryPort);

  signal();
  const exit = await Promise.race([
    dev.exited,
    new Promise((_, reject) =>
      setTimeout(() => reject(new Error(`make dev still runs 60 s on:\n${dev.output()}`)), 60_000),
    ),
  ]);
  expect(exit).toBeDefined();
  const stopped = /^stopped the dev ground: (.*); none of it is running any more$/m.exec(
    dev.output(),
  );
  expect(stopped, dev.output()).not.toBeNull();
  expect(stopped![1]).toContain(`the registry on localhost:${dev.registryPort}`);
  expect(stopped![1]).toContain(`the node dev-node and its ${pods} pod process`);
  await eventually(
    'every process of the ground to be gone',
    () => {
      const left = processes.filter(alive).map((p) => `${p.comm} (${p.pid})`);
      if (left.length) throw new Error(`still running: ${left.join(', ')}`);
      return Promise.resolve(true);
    },
    15_000,
    250,
  );
  // nothing on the ground's ports: none held by a process of it (a free port another suite
  // took meanwhile is not the ground's), and the registry's port free
  const still = listening().filter(
    (l) =>
      l.port === dev.registryPort || (ports.includes(l.port) && l.pids.some((p) => pids.has(p))),
  );
  expect(still, `ports ${ports.join(', ')} were the ground's`).toEqual([]);
  return stopped![0];
}

describe('make dev', () => {
  let dev: MakeDev;
  let services: Services | undefined;
  beforeAll(async () => {
    dev = await startMakeDev();
  }, 600_000);
  afterAll(async () => {
    dev?.cleanup();
    await services?.rabbit.cleanup().catch(() => undefined);
    await services?.db.cleanup().catch(() => undefined);
  });

  it("kubectl logs shows a worker pod's output: -c worker, --tail, --timestamps, -f, --previous", async () => {
    services = await workerServices();
    await runPod(dev, workerPod('shipper', services.env), /"msg":"worker started"/);
    const logs = await dev.run('kubectl logs shipper -n default -c worker');
    expect(logs.code, logs.stderr).toBe(0);
    // the worker's stdout: its JSON log lines, as a kubelet would return them
    const started = logs.stdout.split('\n').find((l) => l.includes('"msg":"worker started"'));
    expect(JSON.parse(started!)).toMatchObject({ level: 'info', msg: 'worker started' });

    const tail = await dev.run('kubectl logs shipper --tail=1 --timestamps');
    expect(tail.code, tail.stderr).toBe(0);
    expect(tail.stdout).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z \{.*\}\n$/);

    // -f streams until the process exits: here, the pod deleted and the worker draining
    const follow = dev.start('kubectl logs -f shipper');
    let followed = '';
    follow.stdout!.on('data', (b: Buffer) => (followed += b.toString()));
    const followEnded = new Promise<number | null>((r) => follow.once('exit', r));
    await eventually(
      'kubectl logs -f to print the log so far',
      () => Promise.resolve(followed.includes('"msg":"worker started"') || undefined),
      30_000,
      100,
    );
    const deleted = await dev.run('kubectl delete pod shipper --wait=false');
    expect(deleted.code, deleted.stderr).toBe(0);
    expect(await followEnded).toBe(0);
    expect(followed).toContain('"msg":"signal received: draining"');

    // --previous: a worker that refuses to start (no configuration) is restarted by the node
    await dev.run(`kubectl apply -f - <<'EOF'\n${workerPod('unconfigured', {})}\nEOF`);
    const previous = await eventually(
      'a previous container of the unconfigured worker',
      async () => {
        const r = await dev.run('kubectl logs unconfigured --previous');
        return r.code === 0 ? r : undefined;
      },
      240_000,
      500,
    );
    expect(previous.stdout).toContain('JOBFLEET_BROKER_URL (option brokerUrl) is required');
    const none = await dev.run('kubectl logs unconfigured -c sidecar');
    expect(none.code).not.toBe(0);
    // gone, processes and all: the stop below counts the pods left
    const gone = await dev.run('kubectl delete pod shipper unconfigured --ignore-not-found --wait');
    expect(gone.code, gone.stderr).toBe(0);
  }, 600_000);

  it("kubectl plugin list, after the tour's install of the released plugin: exit 0, one kubectl-jobworker, the installed one", async () => {
    const install = tourCommands().find((c) => c.startsWith('install '));
    expect(install).toMatch(/dist\/release\/kubectl-jobworker ~\/\.local\/bin\/kubectl-jobworker$/);
    // `make release` as the tour runs it before, into a folder of this test's own
    const release = mkdtempSync(path.join(os.tmpdir(), 'jobfleet-release-'));
    try {
      await buildRelease(path.join(release, 'dist/release'));
      const installed = await dev.run(`cd ${release} && ${install}`);
      expect(installed.code, installed.stderr).toBe(0);
    } finally {
      rmSync(release, { recursive: true, force: true });
    }
    const list = await dev.run('kubectl plugin list');
    expect(list.code, `${list.stdout}\n${list.stderr}`).toBe(0);
    expect(list.stderr).not.toMatch(/overshadowed|warning/);
    const plugins = list.stdout.split('\n').filter((l) => /kubectl-jobworker$/.test(l));
    expect(plugins).toEqual([path.join(dev.home, '.local/bin/kubectl-jobworker')]);
    const which = await dev.run('command -v kubectl-jobworker && kubectl jobworker --help');
    expect(which.code, which.stderr).toBe(0);
    expect(which.stdout.split('\n')[0]).toBe(path.join(dev.home, '.local/bin/kubectl-jobworker'));
  }, 300_000);

  it('SIGTERM to make alone stops all of it, says so, and leaves nothing running or listening', async () => {
    // a pod process running when it stops
    await runPod(dev, workerPod('running', services!.env), /"msg":"worker started"/);
    const line = await stopsCleanly(dev, () => dev.make.kill('SIGTERM'), 1);
    expect(line).toContain('the control plane');
  }, 180_000);
});

describe.each([
  ['SIGINT to make alone', (make: ChildProcess) => make.kill('SIGINT')],
  [
    'Ctrl-C: SIGINT to its process group',
    (make: ChildProcess) => process.kill(-make.pid!, 'SIGINT'),
  ],
])('make dev stopped by %s', (_, send) => {
  let dev: MakeDev | undefined;
  let services: Services | undefined;
  afterAll(async () => {
    dev?.cleanup();
    await services?.rabbit.cleanup().catch(() => undefined);
    await services?.db.cleanup().catch(() => undefined);
  });

  it('stops all of it, says so, and leaves nothing running or listening', async () => {
    dev = await startMakeDev();
    services = await workerServices();
    await runPod(dev, workerPod('running', services.env), /"msg":"worker started"/);
    await stopsCleanly(dev, () => send(dev!.make), 1);
  }, 600_000);
});
