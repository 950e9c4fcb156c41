// examples/worker-template as a newcomer uses it: the worker library packed
// (`npm pack`, as `make release` does), installed into a copy of the template,
// the template type-checked and built with its own TypeScript, and the worker
// run against real RabbitMQ and PostgreSQL under a pod's filesystem: the root
// filesystem and the app read-only, only a fresh /tmp writable (a private
// mount namespace: unshare -m). Its producer's jobs complete.
import { execFile, spawn } from 'node:child_process';
import amqp from 'amqplib';
import { cpSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { npm, npmInstall, pack } from '../fixtures/npm.js';
import { repoRoot } from '../ground/control-plane.js';
import { eventually } from '../ground/eventually.js';
import {
  queueType,
  usePostgres,
  useRabbit,
  type PgSchema,
  type RabbitVhost,
} from '../ground/index.js';

// Not under /tmp: the worker's /tmp is replaced by an empty one.
const work = mkdtempSync('/var/tmp/jobfleet-template-');
const app = path.join(work, 'order-worker');
let rabbit: RabbitVhost;
let db: PgSchema;
let running: ReturnType<typeof spawn> | undefined;
afterAll(async () => {
  running?.kill('SIGKILL'); // a test that timed out left it
  await rabbit?.cleanup();
  await db?.cleanup();
  rmSync(work, { recursive: true, force: true });
});

beforeAll(async () => {
  const packed = await pack(['--workspace', 'worker'], work);
  cpSync(path.join(repoRoot, 'examples/worker-template'), app, { recursive: true });
  await npmInstall([packed.filename], app);
  rabbit = await useRabbit();
  db = await usePostgres();
}, 480_000);

/**
 * Runs the worker in the app under a read-only root: a private mount
 * namespace where / and the app are remounted read-only and /tmp is a fresh
 * tmpfs. The Node running the tests is bound into the app first (it may live
 * under /tmp, as in a checkout there). The script proves the constraint holds
 * before it starts the worker (exit 90 if / or the app can be written).
 */
function readOnlyRoot(env: NodeJS.ProcessEnv) {
  mkdirSync(path.join(app, '.node'), { recursive: true });
  const script = [
    'set -e',
    'mount --bind "$APP" "$APP" && mount -o remount,bind,ro "$APP"',
    'mount --bind "$NODE_HOME" "$APP/.node" && mount -o remount,bind,ro "$APP/.node"',
    'mount -t tmpfs -o size=64m tmpfs /tmp',
    'mount -o remount,bind,ro /',
    'if touch "$APP/.probe" 2>/dev/null || touch /var/.probe 2>/dev/null; then echo "writable outside /tmp" >&2; exit 90; fi',
    'touch /tmp/.probe',
    'cd "$APP"',
    `exec "$APP/.node/${path.basename(process.execPath)}" dist/worker.js`,
  ].join('\n');
  return spawn('unshare', ['-m', '--propagation', 'private', 'sh', '-c', script], {
    env: { ...env, APP: app, NODE_HOME: path.dirname(process.execPath) },
    stdio: ['ignore', 'inherit', 'pipe'],
  });
}

/** Consumers on the work queue, read live (a passive declare; a missing queue reads 0). */
async function consumers(): Promise<number> {
  const conn = await amqp.connect(rabbit.amqpUrl);
  try {
    const ch = await conn.createChannel();
    ch.on('error', () => undefined);
    return (await ch.checkQueue('orders.ship')).consumerCount;
  } catch {
    return 0;
  } finally {
    await conn.close().catch(() => undefined);
  }
}

/** node in the app with `env` (the producer needs the worker's broker settings). */
function runWith(env: NodeJS.ProcessEnv, args: string[]) {
  return new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
    execFile(process.execPath, args, { cwd: app, env, timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? 1 : 0, stdout, stderr }),
    ),
  );
}

describe('the worker template', () => {
  it('type-checks and builds against the packed library, and runs with only /tmp writable: the jobs its producer sends complete', async () => {
    const built = await npm(['run', 'build'], app);
    expect(built.code, `${built.stdout}\n${built.stderr}`).toBe(0);

    const env = {
      ...process.env,
      JOBFLEET_QUEUE: 'orders.ship',
      JOBFLEET_QUEUE_TYPE: queueType(),
      JOBFLEET_BROKER_URL: rabbit.amqpUrl,
      JOBFLEET_CLAIMS_URL: db.url,
      JOBFLEET_METRICS_PORT: '0',
      LOG_LEVEL: 'warn',
    };
    const worker = readOnlyRoot(env);
    running = worker;
    let stderr = '';
    worker.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    const exited = new Promise<number | null>((r) => worker.once('exit', r));
    try {
      // the worker declares its queue on start; the producer publishes once it exists
      await eventually(
        'the worker consuming',
        async () => {
          if (worker.exitCode !== null)
            throw new Error(`worker exited ${worker.exitCode}: ${stderr}`);
          const q = await consumers();
          return q ? true : undefined;
        },
        60_000,
        250,
      );
      const produced = await runWith(env, ['dist/producer.js', '5']);
      expect(produced.code, produced.stderr).toBe(0);
      expect(produced.stdout).toContain('published 5 to orders.ship');
      await eventually('5 jobs completed', async () => {
        const r = await db.pool.query<{ n: number }>(
          "select count(*)::int as n from jobfleet_claims where state = 'completed'",
        );
        return r.rows[0]!.n === 5 ? true : undefined;
      });
      expect(stderr).not.toContain('writable outside /tmp');
    } finally {
      worker.kill('SIGTERM');
      await exited;
    }
  }, 300_000);
});
