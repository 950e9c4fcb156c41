// The observer's one piece of memory that outlives a JobWorker: a quarantine
// read still running when the JobWorker is deleted must not bring its metric
// series back (an alert would fire for what no longer exists).
import { describe, expect, it } from 'vitest';
import { JobWorkerMemories } from '../../src/controller/memory.js';
import { Observer, type ObjectCache } from '../../src/controller/observe.js';
import type { KubeClient } from '../../src/kube/client.js';
import { operatorMetrics } from '../../src/metrics.js';
import { jobWorkerObject } from './jobworker-fixture.js';
import type { DeadLetterReader, DeadLetterStats } from '../../src/signals/dead-letters.js';

const jobWorker = jobWorkerObject();

/** The watches have seen nothing of the JobWorker's children. */
const cache: ObjectCache = { get: () => undefined, owned: () => [] };

/** Secrets exist; nothing else is read. */
const client = {
  find: (_apiVersion: string, kind: string, _ns: string, name: string) =>
    Promise.resolve(
      kind === 'Secret'
        ? {
            metadata: { name },
            data: { url: Buffer.from('postgres://u:p@db/c').toString('base64') },
          }
        : undefined,
    ),
} as unknown as KubeClient;

function setUp() {
  let finish: (s: DeadLetterStats) => void = () => undefined;
  const reads = {
    read: () => new Promise<DeadLetterStats>((resolve) => (finish = resolve)),
  } as unknown as DeadLetterReader;
  const metrics = operatorMetrics();
  const memory = new JobWorkerMemories();
  const observer = new Observer({
    memory,
    client,
    metrics,
    now: () => new Date('2026-11-30T12:00:00Z'),
    deadLetters: reads,
    deadLetterReadMs: 30_000,
  });
  const series = async () =>
    (await metrics.registry.getSingleMetric('jobfleet_dead_letters_quarantined')?.get())?.values
      .length ?? 0;
  return { observer, memory, series, finish: (s: DeadLetterStats) => finish(s) };
}

const stats = { quarantined: 3, oldestAt: new Date('2026-11-30T11:00:00Z') } as DeadLetterStats;

describe('Observer: quarantine reads', () => {
  it('a read that finishes writes the JobWorker’s series', async () => {
    const { observer, series, finish } = setUp();
    const observed = observer.observe(jobWorker, cache);
    await new Promise((r) => setImmediate(r));
    finish(stats);
    expect((await observed).deadLetters?.stats?.quarantined).toBe(3);
    expect(await series()).toBe(1);
  });

  it('a read that finishes after the JobWorker was forgotten writes nothing', async () => {
    const { observer, memory, series, finish } = setUp();
    const observed = observer.observe(jobWorker, cache);
    await new Promise((r) => setImmediate(r));
    memory.forget('ns/w');
    finish(stats);
    await observed;
    expect(await series()).toBe(0);
  });
});
