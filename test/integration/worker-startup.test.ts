// A worker process that cannot start, on real RabbitMQ and PostgreSQL: when
// the broker is only unreachable, SIGTERM still stops it within the drain
// deadline (exit 0); when the configuration is wrong (a refused password, a
// database that does not exist), it exits non-zero with the cause and what to
// fix, instead of retrying forever as if something were down.
import { spawn } from 'node:child_process';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { freePort, repoRoot } from '../ground/control-plane.js';
import { harness, QUEUE, type Harness } from './worker-harness.js';
import { queueType } from '../ground/index.js';

let h: Harness;
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  await h?.cleanup();
});

/** The effect worker as its own process; resolves when it exits, with what it printed. */
function runWorker(env: Record<string, string>) {
  const proc = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/effect-worker.ts'], {
    cwd: repoRoot,
    env: {
      ...process.env,
      LOG_LEVEL: 'error',
      JOBFLEET_METRICS_PORT: '0',
      JOBFLEET_QUEUE: QUEUE,
      JOBFLEET_QUEUE_TYPE: queueType(),
      JOBFLEET_BROKER_URL: h.rabbit.amqpUrl,
      JOBFLEET_CLAIMS_URL: h.db.url,
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  proc.stdout.on('data', (b: Buffer) => (output += b.toString()));
  proc.stderr.on('data', (b: Buffer) => (output += b.toString()));
  const exited = new Promise<{ code: number | null; at: number; output: string }>((resolve) =>
    proc.once('exit', (code) => resolve({ code, at: Date.now(), output })),
  );
  return { proc, exited };
}

const withPassword = (url: string, password: string) => {
  const u = new URL(url);
  u.password = password;
  return u.toString();
};

describe('a worker that cannot start', () => {
  it('broker unreachable: SIGTERM stops it within the drain deadline, exit 0', async () => {
    const w = runWorker({
      JOBFLEET_BROKER_URL: `amqp://guest:guest@127.0.0.1:${await freePort()}`,
      JOBFLEET_DRAIN_DEADLINE_SECONDS: '2',
    });
    await new Promise((r) => setTimeout(r, 3000)); // connecting, retrying with backoff
    const sent = Date.now();
    w.proc.kill('SIGTERM');
    const { code, at } = await w.exited;
    expect(code).toBe(0);
    expect(at - sent).toBeLessThan(2000 + 1500);
  });

  it('a password RabbitMQ refuses: exits non-zero at once, naming ACCESS_REFUSED and the fix', async () => {
    const started = Date.now();
    const { code, at, output } = await runWorker({
      JOBFLEET_BROKER_URL: withPassword(h.rabbit.amqpUrl, 'not-the-password'),
    }).exited;
    expect(code).not.toBe(0);
    expect(at - started).toBeLessThan(15_000);
    expect(output).toContain('ACCESS_REFUSED');
    expect(output).toContain('fix them in the Secret');
    expect(output).not.toContain('not-the-password');
  });

  it('a claims database that does not exist: exits non-zero, naming it and the fix', async () => {
    const url = new URL(h.db.url);
    url.pathname = '/no_such_database';
    const { code, output } = await runWorker({ JOBFLEET_CLAIMS_URL: url.toString() }).exited;
    expect(code).not.toBe(0);
    expect(output).toContain('the database JOBFLEET_CLAIMS_URL names does not exist');
  });
});
