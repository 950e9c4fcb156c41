// The test ground's long-running processes (etcd, the apiserver, containerd,
// the kubelet…), each logging to a file of its own in the ground's folder:
// started in order, waited on (one that exits meanwhile fails the wait at
// once, with its log), stopped in reverse (SIGTERM, then SIGKILL after 5 s).
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readFileSync } from 'node:fs';
import path from 'node:path';

interface Daemon {
  name: string;
  child: ChildProcess;
  log: string;
}

export class Daemons {
  private readonly list: Daemon[] = [];

  constructor(private readonly dir: string) {}

  start(name: string, cmd: string, args: string[], env?: NodeJS.ProcessEnv): ChildProcess {
    const log = path.join(this.dir, `${name}.log`);
    const out = createWriteStream(log);
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
    child.stdout?.pipe(out);
    child.stderr?.pipe(out);
    this.list.push({ name, child, log });
    return child;
  }

  pids(): number[] {
    return this.list.map((d) => d.child.pid ?? 0);
  }

  async waitFor(
    what: string,
    check: () => boolean | Promise<boolean>,
    timeoutMs = 60_000,
  ): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const dead = this.list.find((d) => !running(d));
      if (dead)
        throw new Error(`${dead.name} exited while waiting for ${what}:\n${tail(dead.log)}`);
      if (await Promise.resolve(check()).catch(() => false)) return;
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}:\n${this.tails()}`);
  }

  /** The end of every log, for an error that needs them. */
  tails(): string {
    return this.list.map((d) => `--- ${d.name}\n${tail(d.log)}`).join('\n');
  }

  async stop(): Promise<void> {
    for (const d of [...this.list].reverse()) {
      if (!running(d)) continue;
      const exited = new Promise((r) => d.child.once('exit', r));
      d.child.kill('SIGTERM');
      const timer = setTimeout(() => d.child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
  }
}

const running = (d: Daemon) => d.child.exitCode === null && d.child.signalCode === null;

function tail(file: string, lines = 30): string {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}
