// worker/in-doubt/: the decision table, the answers a reconcile may give,
// the history a claim row carries, and what ctx.intend and ctx.step write
// (against an in-memory store port; test/integration/in-doubt.test.ts runs
// them on PostgreSQL, RabbitMQ and worker processes).
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  ClaimLost,
  decide,
  HoldForPerson,
  InDoubt,
  readAnswer,
  readHistory,
  RunRecord,
  type Doubt,
  type ReconcileAnswer,
  type Resolution,
  type RunRecordStore,
} from '../../worker/in-doubt/index.js';
import { LeaseKeeper } from '../../worker/lease-keeper.js';

describe('decide', () => {
  const cases: Array<
    [string, ReconcileAnswer | undefined, 'rerun' | 'hold', number, string, Resolution]
  > = [
    ['no reconcile, rerun', undefined, 'rerun', 1, 'run', 're_run'],
    ['no reconcile, hold', undefined, 'hold', 1, 'hold', 'held'],
    ['done', { outcome: 'done', result: { id: 7 } }, 'hold', 1, 'complete', 'done'],
    ['not done', { outcome: 'not_done' }, 'hold', 1, 'run', 'not_done'],
    ['unknown below the ceiling', { outcome: 'unknown' }, 'rerun', 4, 'retry', 'unknown'],
    [
      'unknown at the ceiling',
      { outcome: 'unknown', reason: 'down' },
      'rerun',
      5,
      'hold',
      'unknown',
    ],
    ['conflict', { outcome: 'conflict', reason: 'two bookings' }, 'rerun', 1, 'hold', 'conflict'],
  ];
  it.each(cases)('%s', (_, answer, policy, attempt, does, resolution) => {
    expect(decide(answer, policy, attempt, 5)).toMatchObject({ do: does, resolution });
  });

  it('says why it holds, and keeps a done answer’s result', () => {
    expect(decide({ outcome: 'unknown', reason: 'lookup 503' }, 'rerun', 5, 5)).toEqual({
      do: 'hold',
      reason: 'reconcile answered unknown: lookup 503 (attempt 5 of 5)',
      resolution: 'unknown',
    });
    expect(decide({ outcome: 'done' }, 'rerun', 1, 5)).toMatchObject({ result: null });
  });
});

describe('readAnswer', () => {
  it('takes the four answers', () => {
    expect(readAnswer({ outcome: 'done', result: 1 }, 'r')).toEqual({ outcome: 'done', result: 1 });
    expect(readAnswer({ outcome: 'not_done' }, 'r')).toEqual({ outcome: 'not_done' });
    expect(readAnswer({ outcome: 'unknown' }, 'r')).toEqual({
      outcome: 'unknown',
      reason: undefined,
    });
    expect(readAnswer({ outcome: 'conflict' }, 'r')).toMatchObject({ outcome: 'conflict' });
  });

  it('reads anything else as unknown, saying what to return', () => {
    for (const v of [undefined, null, true, 'done', { outcome: 'yes' }]) {
      expect(readAnswer(v, 'step "a"\'s reconcile')).toEqual({
        outcome: 'unknown',
        reason: expect.stringMatching(
          /^step "a"'s reconcile returned .*: return \{outcome: 'done' \| 'not_done' \| 'unknown' \| 'conflict'\}$/,
        ),
      });
    }
  });
});

describe('readHistory', () => {
  it('reads the previous attempt, the doubt and the steps', () => {
    const h = readHistory({
      previous: {
        attempt: 2,
        owner: 'o-2',
        startedAt: '2026-12-07T10:00:00+00:00',
        intent: { step: 'hotel', value: { ref: 'r' } },
        ended: 'in_doubt',
      },
      doubt: { attempt: 2, owner: 'o-2', intent: { value: 'x' }, how: 'timed_out' },
      steps: { flight: [{ id: 1 }], hotel: [{ id: 2 }, { id: 3 }], car: { id: 4 } },
    });
    expect(h.previous).toEqual({
      attempt: 2,
      owner: 'o-2',
      startedAt: new Date('2026-12-07T10:00:00Z'),
      intent: { ref: 'r' },
      step: 'hotel',
      ended: 'in_doubt',
      error: null,
    });
    expect(h.doubt).toMatchObject({ attempt: 2, intent: 'x', step: null, cause: 'timed_out' });
    // the first result recorded is the step's; a value not in the list form is not read
    expect(h.steps).toEqual({ flight: { id: 1 }, hotel: { id: 2 } });
  });

  it('leaves out what it cannot read', () => {
    expect(readHistory(null)).toEqual({ steps: {} });
    expect(readHistory({ previous: { attempt: 'two' }, doubt: 'x', steps: [1] })).toEqual({
      steps: {},
    });
    expect(readHistory({ doubt: { attempt: 1, how: 'gremlins' } }).doubt?.cause).toBe('taken_over');
  });
});

/** An in-memory store port: each write answers `answer` (true: written, false: fenced out). */
function memoryStore(answer: () => Promise<boolean> = () => Promise.resolve(true)) {
  const writes: Array<[string, unknown]> = [];
  const store: RunRecordStore = {
    intend: async (_k, _o, intent) => {
      writes.push(['intend', JSON.parse(intent)]);
      return answer();
    },
    recordStep: async (_k, _o, name, result) => {
      writes.push([`step ${name}`, JSON.parse(result)]);
      return answer();
    },
  };
  return { store, writes };
}

const doubt = (step: string | null, intent: unknown = null): Doubt => ({
  attempt: 1,
  owner: 'old',
  startedAt: null,
  intent,
  step,
  cause: 'taken_over',
});

function record(
  over: Partial<ConstructorParameters<typeof RunRecord>[0]> & { store: RunRecordStore },
) {
  const resolved: Resolution[] = [];
  const r = new RunRecord({
    key: 'k',
    owner: 'me',
    attempt: 2,
    maxAttempts: 5,
    leaseSeconds: 60,
    confirmedUntil: () => 10_000,
    now: () => 0,
    steps: {},
    policy: 'rerun',
    reconcileContext: (d) => ({
      key: 'k',
      attempt: 2,
      inDoubt: d,
      signal: new AbortController().signal,
      log: {} as never,
    }),
    resolved: (x) => resolved.push(x),
    transactional: false,
    ...over,
  });
  return { r, resolved };
}

describe('ctx.step and ctx.intend', () => {
  it('runs a step once: its start and result are recorded, a recorded step is not called again', async () => {
    const { store, writes } = memoryStore();
    const { r } = record({ store, steps: { flight: { id: 1 } } });
    const fn = vi.fn(() => Promise.resolve({ id: 2 }));
    expect(await r.step('flight', fn)).toEqual({ id: 1 });
    expect(await r.step('hotel', fn)).toEqual({ id: 2 });
    await r.intend({ ref: 'car-1' });
    expect(fn).toHaveBeenCalledTimes(1);
    expect(writes).toEqual([
      ['intend', { step: 'hotel' }],
      ['step hotel', { id: 2 }],
      ['intend', { value: { ref: 'car-1' } }],
    ]);
  });

  it('the interrupted step is decided by its reconcile: done is recorded without a call', async () => {
    const { store, writes } = memoryStore();
    const { r, resolved } = record({ store, resumes: doubt('hotel', { ref: 'h' }) });
    const fn = vi.fn(() => Promise.resolve({ id: 'again' }));
    const result = await r.step('hotel', fn, {
      reconcile: (ctx) => {
        expect(ctx.inDoubt.intent).toEqual({ ref: 'h' });
        return Promise.resolve({ outcome: 'done', result: { id: 'seen' } });
      },
    });
    expect(result).toEqual({ id: 'seen' });
    expect(fn).not.toHaveBeenCalled();
    expect(resolved).toEqual(['done']);
    // the start carries the doubt's intent: a crash while deciding leaves the same doubt
    expect(writes).toEqual([
      ['intend', { step: 'hotel', value: { ref: 'h' } }],
      ['step hotel', { id: 'seen' }],
    ]);
  });

  it('not done runs it; unknown ends the run in doubt; conflict, or no reconcile under hold, holds it', async () => {
    const { store } = memoryStore();
    const run = (
      answer: ReconcileAnswer | 'throws' | undefined,
      policy: 'rerun' | 'hold' = 'rerun',
    ) =>
      record({ store, resumes: doubt('hotel'), policy }).r.step(
        'hotel',
        () => Promise.resolve('ran'),
        answer === undefined
          ? {}
          : {
              reconcile: () =>
                answer === 'throws'
                  ? Promise.reject(new Error('lookup timed out'))
                  : Promise.resolve(answer),
            },
      );
    expect(await run({ outcome: 'not_done' })).toBe('ran');
    expect(await run(undefined)).toBe('ran');
    await expect(run({ outcome: 'unknown', reason: '503' })).rejects.toThrow(InDoubt);
    await expect(run('throws')).rejects.toThrow(
      /step "hotel": reconcile answered unknown: step "hotel"'s reconcile threw lookup timed out/,
    );
    await expect(run({ outcome: 'conflict', reason: 'two' })).rejects.toThrow(HoldForPerson);
    await expect(run(undefined, 'hold')).rejects.toThrow(HoldForPerson);
  });

  it('refuses before writing once the lease is past; a fenced or unanswered write is ClaimLost', async () => {
    const { store, writes } = memoryStore();
    await expect(
      record({ store, confirmedUntil: () => 1000, now: () => 1000 }).r.intend('x'),
    ).rejects.toThrow(/ctx.intend: this run's lease could not be renewed in time; make no call/);
    await expect(record({ store, confirmedUntil: () => undefined }).r.intend('x')).rejects.toThrow(
      ClaimLost,
    );
    expect(writes).toEqual([]);

    const fenced = memoryStore(() => Promise.resolve(false));
    await expect(record({ store: fenced.store }).r.intend('x')).rejects.toThrow(
      /taken over by another worker/,
    );
    const hung = memoryStore(() => new Promise<boolean>(() => undefined));
    await expect(
      record({ store: hung.store, confirmedUntil: () => 30 }).r.step('a', () => Promise.resolve(1)),
    ).rejects.toThrow(/did not answer before the lease ran out/);
    const refused = memoryStore(() => Promise.reject(new Error('connection terminated')));
    await expect(record({ store: refused.store }).r.intend('x')).rejects.toThrow(
      /refused the write \(connection terminated\)/,
    );
  });

  it('transactional mode records nothing: the run commits or rolls back as one', async () => {
    const { store, writes } = memoryStore();
    const { r } = record({ store, transactional: true, steps: { a: 'old' } });
    await r.intend('x');
    expect(await r.step('a', () => Promise.resolve('new'))).toBe('new');
    expect(writes).toEqual([]);
  });
});

describe('LeaseKeeper', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('moves the confirmed lease with each renewal, and aborts a run whose renewals fail past it', async () => {
    vi.useFakeTimers();
    let now = 0;
    let answer: () => Promise<Set<string>> = () => Promise.resolve(new Set(['k']));
    const keeper = new LeaseKeeper({ renewAll: () => answer() }, 6, () => now);
    const aborted: unknown[] = [];
    keeper.hold('k', 'me', { abort: (r) => aborted.push(r) }, 0);
    expect(keeper.confirmedUntil('k', 'me')).toBe(6000);
    expect(keeper.confirmedUntil('k', 'someone else')).toBeUndefined();
    now = 2000;
    await vi.advanceTimersByTimeAsync(2000); // a tick: renewed from when it was sent
    expect(keeper.confirmedUntil('k', 'me')).toBe(8000);
    answer = () => Promise.reject(new Error('connection refused'));
    now = 6000;
    await vi.advanceTimersByTimeAsync(2000);
    expect(aborted).toEqual([]);
    now = 8000;
    await vi.advanceTimersByTimeAsync(2000);
    expect(aborted).toHaveLength(1);
    expect(aborted[0]).toBeInstanceOf(ClaimLost);
    keeper.release('k', 'me');
    expect(keeper.confirmedUntil('k', 'me')).toBeUndefined();
  });
});
