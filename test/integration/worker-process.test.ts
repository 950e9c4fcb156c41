// The worker as a real OS process: killed between recording a result and
// acking it, and stopped by SIGTERM with a handler that outlives the drain
// deadline.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually } from '../ground/eventually.js';
import { repoRoot } from '../ground/control-plane.js';
import { QUEUE, harness, type Harness } from './worker-harness.js';

let h: Harness;
const children: ChildProcess[] = [];
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  await h?.cleanup();
});

async function spawnWorker(env: Record<string, string>): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/effect-worker.ts'], {
    cwd: repoRoot,
    env: {
      ...process.env,
      LOG_LEVEL: process.env.JOBFLEET_TEST_LOG ?? 'silent',
      JOBFLEET_QUEUE: QUEUE,
      JOBFLEET_BROKER_URL: h.rabbit.amqpUrl,
      JOBFLEET_CLAIMS_URL: h.db.url,
      JOBFLEET_METRICS_PORT: '0',
      JOBFLEET_INITIAL_DELAY_SECONDS: '1',
      JOBFLEET_MAX_DELAY_SECONDS: '4',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(child);
  await new Promise<void>((resolve, reject) => {
    createInterface({ input: child.stdout }).once('line', () => resolve());
    child.once('exit', (code, sig) => reject(new Error(`worker exited early: ${code ?? sig}`)));
  });
  return child;
}

const exited = (c: ChildProcess) =>
  new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    c.exitCode !== null || c.signalCode !== null
      ? r({ code: c.exitCode, signal: c.signalCode })
      : c.once('exit', (code, signal) => r({ code, signal })),
  );

describe('step 4: the record is written before the ack', () => {
  it('killed after recording, before acking: the redelivery is acked as a duplicate; one business effect', async () => {
    const doomed = await spawnWorker({ JOBFLEET_FAULT: 'after-record' });
    const { key } = await h.job('o-70');
    expect((await exited(doomed)).signal).toBe('SIGKILL');
    expect(await h.claim(key)).toMatchObject({ state: 'completed' });
    expect(await h.messages(QUEUE)).toBe(1); // unacked: back in the queue

    const w = await h.startWorker();
    await h.waitOutcomes(w, 1);
    expect(w.outcomes).toEqual(['duplicate']);
    expect(await h.effects(key)).toBe(1);
    expect(await h.messages(QUEUE)).toBe(0);
  });
});

describe('graceful drain of a worker process', () => {
  it('SIGTERM: in-time handlers are acked, the late one comes back unacked and finishes elsewhere once; exit 0 within deadline + margin', async () => {
    const w = await spawnWorker({
      JOBFLEET_TEST_HANDLER_MS: '30000',
      JOBFLEET_DRAIN_DEADLINE_SECONDS: '2',
    });
    const { key } = await h.job('o-71');
    await eventually('claimed', async () =>
      (await h.claim(key))?.state === 'running' ? true : undefined,
    );
    const t0 = Date.now();
    w.kill('SIGTERM');
    const { code } = await exited(w);
    expect(code).toBe(0);
    expect(Date.now() - t0).toBeLessThan(2000 + 5000);
    expect(await h.claim(key)).toMatchObject({ state: 'released', attempts: 0 });
    expect(await h.messages(QUEUE)).toBe(1);

    const quick = await h.startWorker();
    await h.waitOutcomes(quick, 1);
    expect(quick.outcomes).toEqual(['completed']);
    expect(await h.claim(key)).toMatchObject({ state: 'completed', attempts: 1 });
  });
});
