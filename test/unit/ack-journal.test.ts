// The ack journal's writer against a store simulated by promises the test
// settles: entries ride at the end of the turn, one write at a time, a failed
// write keeps them, a refused one is dropped, close writes at once.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { AckJournal } from '../../worker/ack-journal.js';
import type { AckEntry } from '../../worker/claim-store.js';

interface Write {
  ids: string[];
  waitMs: number;
  settle: (err?: Error) => void;
}

function harness(maxBatch = 500) {
  const writes: Write[] = [];
  const errors: unknown[] = [];
  let ridersSent = 0;
  const store = {
    journalAcks: (entries: readonly AckEntry[], waitMs = 0) =>
      new Promise<void>((resolve, reject) => {
        writes.push({
          ids: entries.map((e) => e.deliveryId),
          waitMs,
          settle: (err) => (err ? reject(err) : resolve()),
        });
      }),
    sendRiders: () => void ridersSent++,
  };
  const dropped = { n: 0 };
  const journal = new AckJournal(
    store,
    (err) => errors.push(err),
    (n) => (dropped.n += n),
    200,
    maxBatch,
  );
  return { journal, writes, errors, dropped, ridersSent: () => ridersSent };
}

const entry = (id: string): AckEntry => ({
  deliveryId: id,
  jobId: id,
  key: id,
  outcome: 'completed',
  attempt: 1,
  ackedAt: 0,
});
const turn = () => new Promise<void>((r) => setImmediate(r));
/** a PostgreSQL data exception (SQLSTATE class 22): the rows themselves are refused */
const refused = () => Object.assign(new Error('invalid input syntax'), { code: '22P02' });

describe('AckJournal', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("one turn's acks go as one write that may ride (wait up to 200 ms for a statement)", async () => {
    const { journal, writes } = harness();
    journal.note(entry('a'));
    journal.note(entry('b'));
    expect(writes).toEqual([]);
    await turn();
    expect(writes.map((w) => [w.ids, w.waitMs])).toEqual([[['a', 'b'], 200]]);
    writes[0]?.settle();
  });

  it('one write at a time, each at most maxBatch rows: what piles up meanwhile goes next', async () => {
    const { journal, writes } = harness(2);
    journal.note(entry('a'));
    await turn();
    for (const id of ['b', 'c', 'd']) journal.note(entry(id));
    await turn();
    expect(writes.map((w) => w.ids)).toEqual([['a']]);
    writes[0]?.settle();
    await turn();
    await turn();
    expect(writes.map((w) => w.ids)).toEqual([['a'], ['b', 'c']]);
    writes[1]?.settle();
    await turn();
    await turn();
    expect(writes.map((w) => w.ids)).toEqual([['a'], ['b', 'c'], ['d']]);
    writes[2]?.settle();
  });

  it('a failed write keeps its entries, oldest first, and tries again after a pause', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const { journal, writes, errors } = harness();
    journal.note(entry('a'));
    await turn();
    journal.note(entry('b'));
    writes[0]?.settle(new Error('connection lost'));
    await turn();
    await turn();
    expect(errors).toHaveLength(1);
    // while it waits to try again, new entries gather instead of failing turn by turn
    journal.note(entry('c'));
    await turn();
    expect(writes.map((w) => w.ids)).toEqual([['a']]);
    vi.advanceTimersByTime(1000);
    await turn();
    expect(writes.map((w) => w.ids)).toEqual([['a'], ['a', 'b', 'c']]);
    writes[1]?.settle();
  });

  it('while a write hangs, at most 10,000 entries wait: the oldest beyond that are dropped and counted', async () => {
    const { journal, writes, dropped } = harness();
    journal.note(entry('first'));
    await turn();
    for (let i = 0; i < 10_003; i++) journal.note(entry(`e${i}`));
    expect(dropped.n).toBe(3);
    writes[0]?.settle();
    await turn();
    await turn();
    // what is written next starts after the three given up
    expect(writes[1]?.ids[0]).toBe('e3');
    expect(writes[1]?.ids).toHaveLength(500);
    writes[1]?.settle();
  });

  it('a batch PostgreSQL refuses as it is is dropped and counted, not ridden again with every statement', async () => {
    const { journal, writes, dropped } = harness();
    journal.note(entry('bad'));
    await turn();
    journal.note(entry('b'));
    writes[0]?.settle(refused());
    await turn();
    await turn();
    expect(dropped.n).toBe(1);
    expect(writes.map((w) => w.ids)).toEqual([['bad'], ['b']]);
    writes[1]?.settle();
  });

  it('close sends what rides now, writes the rest at once, and stops at a failure', async () => {
    const { journal, writes, ridersSent, dropped } = harness();
    journal.note(entry('a'));
    await turn();
    journal.note(entry('b'));
    let closed = false;
    const done = journal.close().then((unwritten) => {
      closed = true;
      return unwritten;
    });
    expect(ridersSent()).toBe(1);
    writes[0]?.settle();
    await turn();
    expect(writes.map((w) => [w.ids, w.waitMs])).toEqual([
      [['a'], 200],
      [['b'], 0],
    ]);
    expect(closed).toBe(false);
    writes[1]?.settle(new Error('connection lost'));
    // 'b' goes with the process: told to the caller, and counted as dropped
    expect(await done).toBe(1);
    expect(dropped.n).toBe(1);
    // no retry after close: the worker is gone
    journal.note(entry('c'));
    await turn();
    expect(writes).toHaveLength(2);
  });
});
