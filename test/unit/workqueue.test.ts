// The keyed work queue: merging, one-at-a-time per key, concurrency, backoff,
// requeue-after — with injected timers, no sleeps.
import { describe, expect, it } from 'vitest';
import { WorkQueue, type Timers } from '../../src/controller/workqueue.js';

function fakeTimers() {
  let now = 0;
  let seq = 0;
  const pending = new Map<number, { at: number; fn: () => void }>();
  const timers: Timers = {
    now: () => now,
    setTimeout: (fn, ms) => {
      pending.set(++seq, { at: now + ms, fn });
      return seq;
    },
    clearTimeout: (h) => pending.delete(h as number),
  };
  const advance = (ms: number) => {
    now += ms;
    for (const [id, t] of [...pending].sort((a, b) => a[1].at - b[1].at)) {
      if (t.at <= now) {
        pending.delete(id);
        t.fn();
      }
    }
  };
  return { timers, advance, pending };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('WorkQueue', () => {
  it('merges duplicate keys and never runs one key twice at once; an add while it runs runs it again after', async () => {
    const q = new WorkQueue({ concurrency: 4 });
    const runs: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let running = 0;
    let maxRunningA = 0;
    q.add('a');
    q.add('a');
    q.add('b');
    q.start(async (key) => {
      runs.push(key);
      if (key === 'a') {
        running++;
        maxRunningA = Math.max(maxRunningA, running);
        if (runs.filter((k) => k === 'a').length === 1) await gate;
        running--;
      }
    });
    await tick();
    q.add('a'); // while the first 'a' runs
    q.add('a');
    release();
    await q.idle();
    expect(runs).toEqual(['a', 'b', 'a']);
    expect(maxRunningA).toBe(1);
  });

  it('counts adds (not merged ones) and reports how long each key waited before it started', async () => {
    const { timers, advance } = fakeTimers();
    let adds = 0;
    const waited: number[] = [];
    const q = new WorkQueue({
      concurrency: 1,
      timers,
      onAdd: () => adds++,
      onStart: (ms) => waited.push(ms),
    });
    q.add('a');
    advance(300);
    q.add('a'); // merged
    q.add('b');
    advance(200);
    q.start(() => Promise.resolve());
    await q.idle();
    expect(adds).toBe(2);
    expect(waited).toEqual([500, 200]);
  });

  it('runs at most `concurrency` keys at once', async () => {
    const q = new WorkQueue({ concurrency: 2 });
    let running = 0;
    let max = 0;
    for (const k of ['a', 'b', 'c', 'd', 'e']) q.add(k);
    q.start(async () => {
      max = Math.max(max, ++running);
      await tick();
      running--;
    });
    await q.idle();
    expect(max).toBe(2);
  });

  it('backs off per key exponentially, capped, and forgets after a success', async () => {
    const { timers, advance } = fakeTimers();
    const delays: number[] = [];
    const q = new WorkQueue({
      concurrency: 1,
      baseDelayMs: 100,
      maxDelayMs: 1000,
      timers,
      onError: (_k, _e, ms) => delays.push(ms),
    });
    let failuresLeft = 6;
    q.add('k');
    q.start(() => (failuresLeft-- > 0 ? Promise.reject(new Error('nope')) : Promise.resolve()));
    for (let i = 0; i < 7; i++) {
      await q.idle();
      advance(1000);
    }
    await q.idle();
    expect(delays).toEqual([100, 200, 400, 800, 1000, 1000]);
    expect(q.addRateLimited('k')).toBe(100); // forgotten after the success
  });

  it('a deferred key (waiting its turn elsewhere) keeps its backoff', async () => {
    const { timers, advance } = fakeTimers();
    const delays: number[] = [];
    const q = new WorkQueue({
      concurrency: 1,
      baseDelayMs: 100,
      timers,
      onError: (_k, _e, ms) => delays.push(ms),
    });
    const results = ['fail', 'defer', 'fail'];
    q.add('k');
    q.start(() => {
      const r = results.shift();
      if (r === 'fail') return Promise.reject(new Error('nope'));
      if (r !== 'defer') return Promise.resolve({});
      q.add('k'); // the window hands it back
      return Promise.resolve({ deferred: true });
    });
    for (let i = 0; i < 3; i++) {
      await q.idle();
      advance(1000);
    }
    await q.idle();
    expect(delays).toEqual([100, 200]);
  });

  it('honours requeue-after, keeping the earliest of two pending adds', async () => {
    const { timers, advance, pending } = fakeTimers();
    const q = new WorkQueue({ concurrency: 1, timers });
    const runs: number[] = [];
    q.start(() => {
      runs.push(timers.now());
      return Promise.resolve(runs.length === 1 ? { requeueAfterMs: 5000 } : {});
    });
    q.add('k');
    await q.idle();
    q.addAfter('k', 9000); // later than the pending 5 s: ignored
    expect(pending.size).toBe(1);
    advance(5000);
    await q.idle();
    expect(runs).toEqual([0, 5000]);
  });

  it('a run’s result replaces the requeue an earlier run asked for: a later run that asks none cancels it', async () => {
    const { timers, advance, pending } = fakeTimers();
    const q = new WorkQueue({ concurrency: 1, timers });
    const runs: number[] = [];
    const results = [{ requeueAfterMs: 10_000 }, {}, { requeueAfterMs: 3000 }];
    q.start(() => {
      runs.push(timers.now());
      return Promise.resolve(results.shift() ?? {});
    });
    q.add('k');
    await q.idle();
    advance(2000);
    q.add('k'); // woken by news: this plan asks for no requeue
    await q.idle();
    expect(pending.size).toBe(0);
    advance(10_000);
    await q.idle();
    expect(runs).toEqual([0, 2000]);
    q.add('k'); // this one asks for 3 s: that is the one pending
    await q.idle();
    advance(3000);
    await q.idle();
    expect(runs).toEqual([0, 2000, 12_000, 15_000]);
  });

  it('stop() waits for the keys in progress and takes no more', async () => {
    const q = new WorkQueue({ concurrency: 1 });
    let done = false;
    q.add('a');
    q.start(async () => {
      await tick();
      done = true;
    });
    await tick();
    await q.stop();
    expect(done).toBe(true);
    q.add('b');
    expect(q.length).toBe(0);
  });

  it('serves urgent keys (wake-ups) before the others, and promotes a waiting key added urgent', async () => {
    const q = new WorkQueue({ concurrency: 1 });
    const order: string[] = [];
    let release!: () => void;
    const first = new Promise<void>((r) => (release = r));
    q.start(async (key) => {
      order.push(key);
      if (key === 'busy') await first;
    });
    q.add('busy'); // holds the one slot while the rest arrive
    for (const k of ['new-1', 'new-2', 'new-3']) q.add(k);
    q.add('wake-1', true);
    q.add('new-2', true); // a first-time creation whose Deployment now reports: promoted
    release();
    await q.idle();
    expect(order).toEqual(['busy', 'wake-1', 'new-2', 'new-1', 'new-3']);
  });
});
