// The ack journal's writer against a store simulated by promises the test
// settles: entries ride at the end of the turn, a failed write keeps them, a
// flush writes at once.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { AckJournal } from '../../worker/ack-journal.js';
import type { AckEntry } from '../../worker/claim-store.js';

interface Write {
  ids: string[];
  waitMs: number;
  settle: (err?: Error) => void;
}

function harness() {
  const writes: Write[] = [];
  const errors: unknown[] = [];
  const store = {
    journalAcks: (entries: readonly AckEntry[], waitMs = 0) =>
      new Promise<void>((resolve, reject) => {
        writes.push({
          ids: entries.map((e) => e.deliveryId),
          waitMs,
          settle: (err) => (err ? reject(err) : resolve()),
        });
      }),
  };
  const journal = new AckJournal(store, (err) => errors.push(err), 200, 500);
  return { journal, writes, errors };
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

  it('flush writes what is pending at once (no ride) and waits for every write under way', async () => {
    const { journal, writes } = harness();
    journal.note(entry('a'));
    await turn();
    journal.note(entry('b'));
    let flushed = false;
    const done = journal.flush().then(() => (flushed = true));
    expect(writes.map((w) => [w.ids, w.waitMs])).toEqual([
      [['a'], 200],
      [['b'], 0],
    ]);
    writes[1]?.settle();
    await turn();
    expect(flushed).toBe(false);
    writes[0]?.settle();
    await done;
    expect(flushed).toBe(true);
  });
});
