// A handler's signal: made only when read, aborted by a lost lease or the
// drain deadline whether it existed then or not, and nothing left on the
// drain signal once the run is over.
import { describe, expect, it } from 'vitest';
import { RunSignal } from '../../worker/run-signal.js';

/** EventTarget keeps its listeners private: count them through the add/remove calls. */
function countedDrain() {
  const drain = new AbortController();
  let listeners = 0;
  const add = drain.signal.addEventListener.bind(drain.signal);
  const remove = drain.signal.removeEventListener.bind(drain.signal);
  drain.signal.addEventListener = (...a: Parameters<typeof add>) => {
    listeners++;
    add(...a);
  };
  drain.signal.removeEventListener = (...a: Parameters<typeof remove>) => {
    listeners--;
    remove(...a);
  };
  return { drain, listeners: () => listeners };
}

describe('RunSignal', () => {
  it('a run whose handler never reads the signal listens to nothing', () => {
    const { drain, listeners } = countedDrain();
    const run = new RunSignal(drain.signal);
    run.abort(new Error('claim lease lost'));
    run.done();
    expect(listeners()).toBe(0);
  });

  it('a lease lost before the handler reads the signal: the signal starts aborted, with the reason', () => {
    const run = new RunSignal(new AbortController().signal);
    const lost = new Error('claim lease lost');
    run.abort(lost);
    expect(run.signal.aborted).toBe(true);
    expect(run.signal.reason).toBe(lost);
  });

  it('the drain deadline aborts a signal already read, and one read after it passed', () => {
    const { drain, listeners } = countedDrain();
    const early = new RunSignal(drain.signal);
    const seen = early.signal;
    expect(listeners()).toBe(1);
    const deadline = new Error('drain deadline passed');
    drain.abort(deadline);
    expect(seen.aborted).toBe(true);
    expect(seen.reason).toBe(deadline);
    const late = new RunSignal(drain.signal);
    expect(late.signal.aborted).toBe(true);
    early.done();
    late.done();
  });

  it('done removes the drain listener; the first abort wins', () => {
    const { drain, listeners } = countedDrain();
    const run = new RunSignal(drain.signal);
    const signal = run.signal;
    run.abort('first');
    run.abort('second');
    expect(signal.reason).toBe('first');
    run.done();
    expect(listeners()).toBe(0);
  });

  it('a signal read after the run ended adds no drain listener (work the handler left behind)', () => {
    const { drain, listeners } = countedDrain();
    const run = new RunSignal(drain.signal);
    run.done();
    expect(run.signal.aborted).toBe(false);
    expect(listeners()).toBe(0);
  });
});
