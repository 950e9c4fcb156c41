// The measured queue age, pure: the worker's view of the head
// (worker/queue-head.ts), its round trip through /metrics, and the operator's
// combination with the queue's statistics (src/reconcile/scaling/queue-age.ts).
import { describe, expect, it } from 'vitest';
import { workerMetrics } from '../../worker/metrics.js';
import { enteredQueueAt, HeadWatch } from '../../worker/queue-head.js';
import { parseHead } from '../../src/signals/worker-metrics.js';
import { ageMeasuredCondition } from '../../src/reconcile/status/status.js';
import { queueAge, type AgeMemory } from '../../src/reconcile/scaling/queue-age.js';
import type { HeadReading, QueueStats } from '../../src/reconcile/model/observation.js';

const T0 = Date.parse('2026-12-03T00:00:00Z');

function clock(start = T0) {
  let t = start;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

describe('the worker’s view of the head', () => {
  it('takes timestamp_in_ms before the whole-second property, and neither when absent', () => {
    expect(enteredQueueAt({ headers: { timestamp_in_ms: T0 + 123 }, timestamp: T0 / 1000 })).toBe(
      T0 + 123,
    );
    expect(enteredQueueAt({ headers: {}, timestamp: 1_700_000_000 })).toBe(1_700_000_000_000);
    expect(enteredQueueAt({ headers: {}, timestamp: undefined })).toBeUndefined();
    expect(enteredQueueAt({ headers: { timestamp_in_ms: 'soon' }, timestamp: 0 })).toBeUndefined();
  });

  it('records each delivery’s age when it arrives, and when', () => {
    const c = clock();
    const w = new HeadWatch(2, c.now);
    w.consuming(true);
    c.advance(1000);
    expect(w.delivered({ headers: { timestamp_in_ms: T0 + 250 } })).toBe(true);
    expect(w.snapshot()).toMatchObject({ lastAgeSeconds: 0.75, lastAtMs: T0 + 1000 });
    c.advance(500);
    expect(w.delivered({ headers: {} })).toBe(false);
    // the untimestamped one is recorded apart; the timed one stays
    expect(w.snapshot()).toMatchObject({
      lastAgeSeconds: 0.75,
      lastAtMs: T0 + 1000,
      lastUntimestampedAtMs: T0 + 1500,
    });
  });

  it('is idle only while it has a free slot and nothing comes; full or not consuming is 0', () => {
    const c = clock();
    const w = new HeadWatch(2, c.now);
    expect(w.snapshot().idleSeconds).toBe(0); // not consuming: no evidence
    w.consuming(true);
    c.advance(2000);
    expect(w.snapshot().idleSeconds).toBe(2);
    w.delivered({ timestamp: T0 / 1000 });
    expect(w.snapshot().idleSeconds).toBe(0); // a slot free still, but something just came
    c.advance(300);
    expect(w.snapshot().idleSeconds).toBeCloseTo(0.3);
    w.delivered({ timestamp: T0 / 1000 });
    c.advance(5000);
    expect(w.snapshot().idleSeconds).toBe(0); // both slots taken: the broker cannot send
    w.settled();
    c.advance(1500);
    expect(w.snapshot().idleSeconds).toBe(1.5);
    w.consuming(false);
    expect(w.snapshot().idleSeconds).toBe(0);
    w.settled(); // a delivery of the stopped consumer ends: still no evidence
    expect(w.snapshot().idleSeconds).toBe(0);
  });

  it('reaches the operator through /metrics at millisecond precision', async () => {
    const c = clock();
    const w = new HeadWatch(4, c.now);
    w.consuming(true);
    c.advance(1234);
    w.delivered({ headers: { timestamp_in_ms: T0 + 1 } });
    const m = workerMetrics(undefined, { head: () => w.snapshot() });
    const head = parseHead(await m.registry.metrics());
    expect(head).toEqual({
      lastAgeSeconds: 1.233,
      lastAtMs: T0 + 1234,
      lastUntimestampedAtMs: 0,
      idleSeconds: 0,
    });
    expect(parseHead('jobfleet_jobs_total 3\n')).toBeUndefined(); // a worker without the gauges
  });
});

const quorum = (ready: number, over: Partial<QueueStats> = {}): QueueStats => ({
  type: 'quorum',
  messagesReady: ready,
  messagesUnacked: 8,
  consumers: 2,
  publishRate: 10,
  ackRate: 10,
  ...over,
});

const head = (over: Partial<HeadReading>): HeadReading => ({
  lastAgeSeconds: 0,
  lastAtMs: 0,
  lastUntimestampedAtMs: 0,
  idleSeconds: 0,
  ...over,
});

describe('the operator’s age on a queue without head timestamps', () => {
  const now = T0 + 60_000;

  it('is the newest delivery’s age plus the time since, across pods', () => {
    const r = queueAge(quorum(500), now, {}, [
      head({ lastAgeSeconds: 40, lastAtMs: now - 3000 }),
      head({ lastAgeSeconds: 12, lastAtMs: now - 500 }), // the newest: the head was 12 s old then
    ]);
    expect(r.age.ageSource).toBe('DeliveryTimestamps');
    expect(r.age.signals.oldestAgeSeconds).toBeCloseTo(12.5);
    expect(r.age.signals.depth).toBe(500);
  });

  it('grows through a stall: every consumer full, nothing delivered, messages ready', () => {
    const heads = [head({ lastAgeSeconds: 2, lastAtMs: now - 30_000 })];
    const r = queueAge(quorum(300), now, {}, heads);
    expect(r.age.signals.oldestAgeSeconds).toBeCloseTo(32);
  });

  it('is 0 when a consumer with a free slot has received nothing for half a second', () => {
    const r = queueAge(quorum(40), now, {}, [
      head({ lastAgeSeconds: 9, lastAtMs: now - 100 }),
      head({ lastAgeSeconds: 9, lastAtMs: now - 2000, idleSeconds: 0.6 }),
    ]);
    // the statistics (up to 5 s old) still show 40 ready; the idle consumer is fresher
    expect(r.age.signals.oldestAgeSeconds).toBe(0);
    expect(r.age.ageSource).toBe('DeliveryTimestamps');
  });

  it('believes statistics showing nothing ready only once no delivery is newer than they can lag', () => {
    const busy = queueAge(quorum(0), now, {}, [head({ lastAgeSeconds: 3, lastAtMs: now - 1000 })]);
    expect(busy.age.signals.oldestAgeSeconds).toBeCloseTo(4); // a burst the statistics have not seen yet
    const stalled = queueAge(quorum(0), now, {}, [
      head({ lastAgeSeconds: 3, lastAtMs: now - 60_000 }),
    ]);
    expect(stalled.age.signals.oldestAgeSeconds).toBe(0); // every consumer busy, nothing waiting
  });

  it('bounds messages that came while every consumer was full by when the queue was last seen empty', () => {
    let memory: AgeMemory = {};
    const heads = [head({ lastAgeSeconds: 1, lastAtMs: now - 600_000 })];
    memory = queueAge(quorum(0), now - 20_000, memory, heads).memory;
    const r = queueAge(quorum(50), now, memory, heads);
    // not 601 s: nothing was ready 20 s ago (less the statistics' 10 s lag)
    expect(r.age.signals.oldestAgeSeconds).toBeCloseTo(30);
  });

  it('says why it estimates: no timestamps on the newest delivery, or no worker reporting', () => {
    const untimed = queueAge(quorum(100), now, {}, [
      head({ lastAgeSeconds: 5, lastAtMs: now - 9000, lastUntimestampedAtMs: now - 200 }),
    ]);
    expect(untimed.age).toMatchObject({
      ageSource: 'Estimated',
      estimatedBecause: 'NoMessageTimestamps',
    });
    expect(untimed.age.signals.oldestAgeSeconds).toBeCloseTo(10); // Little: 100 ready at 10/s
    const none = queueAge(quorum(100), now, {}, []);
    expect(none.age).toMatchObject({ ageSource: 'Estimated', estimatedBecause: 'NoWorkerReports' });
    const empty = queueAge(quorum(0), now, {}, []);
    expect(empty.age.signals.oldestAgeSeconds).toBe(0);
    expect(empty.age.ageSource).toBe('Estimated');
  });

  it('keeps the head timestamp where the broker gives one (classic queues)', () => {
    const classic: QueueStats = {
      ...quorum(10),
      type: 'classic',
      headMessageTimestamp: (now - 7000) / 1000,
    };
    const r = queueAge(classic, now, {}, [head({ lastAgeSeconds: 1, lastAtMs: now })]);
    expect(r.age).toMatchObject({ ageSource: 'HeadTimestamp' });
    expect(r.age.signals.oldestAgeSeconds).toBeCloseTo(7);
    const empty = queueAge(
      { ...classic, messagesReady: 0, headMessageTimestamp: undefined },
      now,
      {},
    );
    expect(empty.age).toMatchObject({ ageSource: 'HeadTimestamp' });
    expect(empty.age.signals.oldestAgeSeconds).toBe(0);
  });
});

describe('the AgeMeasured condition', () => {
  const scaling = { limitedBy: 'age' as const, message: '', signalOk: true };
  it('is True on a measured age and False, naming the fix, on an estimate', () => {
    expect(ageMeasuredCondition({ ...scaling, ageSource: 'DeliveryTimestamps' })).toMatchObject({
      status: 'True',
      reason: 'DeliveryTimestamps',
    });
    const untimed = ageMeasuredCondition({
      ...scaling,
      ageSource: 'Estimated',
      estimatedBecause: 'NoMessageTimestamps',
    });
    expect(untimed).toMatchObject({ status: 'False', reason: 'NoMessageTimestamps' });
    expect(untimed.message).toContain('message_interceptors.incoming.set_header_timestamp');
    expect(ageMeasuredCondition({ ...scaling, ageSource: 'Estimated' })).toMatchObject({
      status: 'False',
      reason: 'Estimated',
    });
  });
});
