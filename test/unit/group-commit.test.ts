// GroupCommit's batching rules, with a store simulated by promises the test
// resolves: what goes together, what waits, what fails alone.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { GroupCommit } from '../../worker/group-commit.js';

interface Call {
  items: string[];
  finish: (err?: Error) => void;
}

/** A store whose statements return when the test says so; items are `key` or `key:tag`. */
function harness(opts: { maxBatch?: number; maxInFlight?: number; alone?: boolean } = {}) {
  const calls: Call[] = [];
  const gc = new GroupCommit<string, string>(
    (items) =>
      new Promise<string[]>((resolve, reject) => {
        calls.push({
          items,
          finish: (err) => (err ? reject(err) : resolve(items.map((i) => `done ${i}`))),
        });
      }),
    {
      maxBatch: opts.maxBatch ?? 256,
      maxInFlight: opts.maxInFlight ?? 2,
      keyOf: (i) => i.split(':')[0],
      ...(opts.alone && { alone: (err: unknown) => (err as Error).message === 'bad value' }),
    },
  );
  return { gc, calls };
}

const turn = () => new Promise<void>((r) => setImmediate(r));

describe('GroupCommit', () => {
  it('what arrives in one event-loop turn goes as one statement, each caller getting its own answer', async () => {
    const { gc, calls } = harness();
    const out = Promise.all(['a', 'b', 'c'].map((i) => gc.submit(i)));
    await turn();
    expect(calls.map((c) => c.items)).toEqual([['a', 'b', 'c']]);
    calls[0]?.finish();
    expect(await out).toEqual(['done a', 'done b', 'done c']);
    expect(gc.stats).toEqual({ batches: 1, items: 3 });
  });

  it('while a statement is in flight the next gathers, up to maxInFlight at once', async () => {
    const { gc, calls } = harness({ maxInFlight: 2 });
    const first = gc.submit('a');
    await turn();
    const second = gc.submit('b');
    await turn();
    const third = [gc.submit('c'), gc.submit('d')];
    await turn();
    expect(calls.map((c) => c.items)).toEqual([['a'], ['b']]);
    calls[0]?.finish();
    await first;
    await turn();
    expect(calls.map((c) => c.items)).toEqual([['a'], ['b'], ['c', 'd']]);
    calls[1]?.finish();
    calls[2]?.finish();
    await Promise.all([second, ...third]);
  });

  it('maxBatch caps a statement; the rest go in the next', async () => {
    const { gc, calls } = harness({ maxBatch: 2, maxInFlight: 1 });
    const out = Promise.all(['a', 'b', 'c'].map((i) => gc.submit(i)));
    await turn();
    expect(calls.map((c) => c.items)).toEqual([['a', 'b']]);
    calls[0]?.finish();
    await turn();
    await turn();
    expect(calls.map((c) => c.items)).toEqual([['a', 'b'], ['c']]);
    calls[1]?.finish();
    await out;
  });

  it('two items with one key never share a statement nor run at once: the second waits for the first to return', async () => {
    const { gc, calls } = harness({ maxInFlight: 4 });
    const out = Promise.all([gc.submit('k:1'), gc.submit('k:2'), gc.submit('x')]);
    await turn();
    await turn();
    expect(calls.map((c) => c.items)).toEqual([['k:1', 'x']]);
    calls[0]?.finish();
    await turn();
    await turn();
    expect(calls.map((c) => c.items)).toEqual([['k:1', 'x'], ['k:2']]);
    calls[1]?.finish();
    expect(await out).toEqual(['done k:1', 'done k:2', 'done x']);
  });

  it("a failed statement fails every item of it; a value one item's own is retried item by item", async () => {
    const plain = harness();
    const down = Promise.allSettled(['a', 'b'].map((i) => plain.gc.submit(i)));
    await turn();
    plain.calls[0]?.finish(new Error('connection lost'));
    expect((await down).map((r) => r.status)).toEqual(['rejected', 'rejected']);

    const { gc, calls } = harness({ alone: true });
    const out = Promise.allSettled(['a', 'bad', 'c'].map((i) => gc.submit(i)));
    await turn();
    calls[0]?.finish(new Error('bad value'));
    for (let i = 1; i <= 3; i++) {
      await turn();
      const call = calls[i] as Call;
      call.finish(call.items[0] === 'bad' ? new Error('bad value') : undefined);
    }
    expect(calls.map((c) => c.items)).toEqual([['a', 'bad', 'c'], ['a'], ['bad'], ['c']]);
    expect((await out).map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
  });

  describe('riders (items that may wait: the ack journal)', () => {
    // only setTimeout is faked: the event-loop turns stay real
    afterEach(() => {
      vi.useRealTimers();
    });

    it('a rider sends nothing by itself until its wait is over, then goes alone', async () => {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
      const { gc, calls } = harness({ maxInFlight: 1 });
      const out = gc.submit('j', 200);
      await turn();
      await turn();
      expect(calls).toEqual([]);
      vi.advanceTimersByTime(199);
      await turn();
      expect(calls).toEqual([]);
      vi.advanceTimersByTime(1);
      await turn();
      expect(calls.map((c) => c.items)).toEqual([['j']]);
      calls[0]?.finish();
      expect(await out).toBe('done j');
    });

    it('a rider joins the next statement that goes for other items, and does not go again', async () => {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
      const { gc, calls } = harness({ maxInFlight: 1 });
      const rider = gc.submit('j', 200);
      const claim = gc.submit('a');
      await turn();
      expect(calls.map((c) => c.items)).toEqual([['j', 'a']]);
      calls[0]?.finish();
      expect(await Promise.all([rider, claim])).toEqual(['done j', 'done a']);
      vi.advanceTimersByTime(1000);
      await turn();
      expect(calls).toHaveLength(1);
    });

    it('riders that arrive while a statement is in flight go with the next one the others need', async () => {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
      const { gc, calls } = harness({ maxInFlight: 1 });
      const first = gc.submit('a');
      await turn();
      const rider = gc.submit('j', 200);
      const second = gc.submit('b');
      await turn();
      expect(calls.map((c) => c.items)).toEqual([['a']]);
      calls[0]?.finish();
      await first;
      await turn();
      expect(calls.map((c) => c.items)).toEqual([['a'], ['j', 'b']]);
      calls[1]?.finish();
      await Promise.all([rider, second]);
    });

    it('a rider with a shorter wait than those queued is not held to theirs', async () => {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
      const { gc, calls } = harness({ maxInFlight: 1 });
      const out = Promise.all([gc.submit('slow', 60_000), gc.submit('soon', 10)]);
      vi.advanceTimersByTime(10);
      await turn();
      expect(calls.map((c) => c.items)).toEqual([['slow', 'soon']]);
      calls[0]?.finish();
      await out;
    });

    it('sendRiders sends the riders now (a stop does not wait out their wait)', async () => {
      const { gc, calls } = harness({ maxInFlight: 1 });
      const out = gc.submit('j', 60_000);
      await turn();
      expect(calls).toEqual([]);
      gc.sendRiders();
      await turn();
      expect(calls.map((c) => c.items)).toEqual([['j']]);
      calls[0]?.finish();
      await out;
    });

    it('riders left out by maxBatch go with the next statement', async () => {
      const { gc, calls } = harness({ maxBatch: 2, maxInFlight: 1 });
      const out = Promise.all([gc.submit('a'), gc.submit('b'), gc.submit('j', 60_000)]);
      await turn();
      expect(calls.map((c) => c.items)).toEqual([['a', 'b']]);
      const next = gc.submit('c');
      calls[0]?.finish();
      await turn();
      await turn();
      expect(calls.map((c) => c.items)).toEqual([
        ['a', 'b'],
        ['j', 'c'],
      ]);
      calls[1]?.finish();
      await Promise.all([out, next]);
    });

    it('a rider in a failed statement is rejected with it (its writer keeps it for later)', async () => {
      const { gc, calls } = harness({ maxInFlight: 1 });
      const out = Promise.allSettled([gc.submit('j', 200), gc.submit('a')]);
      await turn();
      calls[0]?.finish(new Error('connection lost'));
      expect((await out).map((r) => r.status)).toEqual(['rejected', 'rejected']);
    });
  });
});
