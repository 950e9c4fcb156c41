// The parent's handle on one consumer process (bench/peers/child.ts): spawn
// with the same Node and tsx, wait for its protocol messages, kill it when
// it overruns its time.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ChildMessage, ChildReport, ChildSpec, ParentMessage } from './protocol.js';
import { repoRoot } from './system.js';

const childFile = fileURLToPath(new URL('./child.ts', import.meta.url));

export class ConsumerProcess {
  readonly ready: Promise<void>;
  readonly consuming: Promise<void>;
  readonly done: Promise<ChildReport>;
  readonly exited: Promise<number | null>;
  /** the latest `started` count from progress messages */
  started = 0;
  onProgress: () => void = () => undefined;
  private readonly proc: ChildProcess;
  private timer: NodeJS.Timeout | undefined;
  private timedOut = false;

  constructor(spec: ChildSpec, timeoutMs: number) {
    const gc = spec.heapAt ? ['--expose-gc'] : [];
    this.proc = spawn(
      process.execPath,
      [...gc, '--import', 'tsx', childFile, JSON.stringify(spec)],
      {
        cwd: repoRoot,
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      },
    );
    this.exited = new Promise((resolve) => this.proc.once('exit', (code) => resolve(code)));
    this.proc.on('error', (err) => console.error(`${spec.system} consumer process:`, err));
    const waitFor = <T>(pick: (m: ChildMessage) => T | undefined) =>
      new Promise<T>((resolve, reject) => {
        this.proc.on('message', (m: ChildMessage) => {
          if (m.type === 'failed') reject(new Error(`${spec.system} consumer failed: ${m.error}`));
          const v = pick(m);
          if (v !== undefined) resolve(v);
        });
        void this.exited.then((code) =>
          reject(
            new Error(
              this.timedOut
                ? `${spec.system} consumer killed after ${timeoutMs / 1000} s`
                : `${spec.system} consumer exited (code ${code}) before it reported`,
            ),
          ),
        );
      });
    this.ready = waitFor((m) => (m.type === 'ready' ? true : undefined)).then(() => {});
    this.consuming = waitFor((m) => (m.type === 'consuming' ? true : undefined)).then(() => {});
    this.done = waitFor((m) => (m.type === 'done' ? m.report : undefined));
    this.proc.on('message', (m: ChildMessage) => {
      if (m.type === 'progress') {
        this.started = m.started;
        this.onProgress();
      }
    });
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.kill();
    }, timeoutMs);
    // Nobody awaits these until later: keep an early failure from being unhandled meanwhile.
    for (const p of [this.ready, this.consuming, this.done]) p.catch(() => undefined);
    void this.exited.then(() => clearTimeout(this.timer));
  }

  send(msg: ParentMessage): void {
    // A process that has already gone is reported through `done`/`exited`.
    if (this.proc.connected) this.proc.send(msg, () => undefined);
  }

  kill(): void {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill('SIGKILL');
  }
}
