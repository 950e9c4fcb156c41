// The replay's gate on a fake clock: how often it asks, what it says when a
// hold starts, changes and ends, and when it gives up.
import { describe, expect, it } from 'vitest';
import { HOLD_CHECK_MS, HOLD_POLL_MS, holdGate, HoldTimeout } from '../../src/dlq/replay-gate.js';
import type { Hold } from '../../src/dlq/replay-hold.js';

const age: Hold = { reason: 'AgeOverObjective', message: 'oldest past the objective' };
const throttling: Hold = { reason: 'DependencyThrottling', message: 'dependency throttling' };

/** A gate whose checks answer from `answers` in turn (the last one repeats), on a fake clock. */
function fakeGate(answers: Array<Hold | undefined>, timeoutMs?: number) {
  let now = 0;
  const said: string[] = [];
  let checks = 0;
  const gate = holdGate({
    check: () => Promise.resolve(answers[Math.min(checks++, answers.length - 1)]),
    onHeld: (h) => void said.push(`held ${h.reason} at ${now}`),
    onResumed: (was) => void said.push(`resumed from ${was.reason} at ${now}`),
    now: () => now,
    sleep: (ms) => {
      now += ms;
      return Promise.resolve();
    },
    ...(timeoutMs !== undefined && { timeoutMs }),
  });
  return {
    gate,
    said,
    checks: () => checks,
    advance: (ms: number) => {
      now += ms;
    },
  };
}

describe('the replay gate', () => {
  it('while nothing holds, asks at most every HOLD_CHECK_MS, however many messages pass', async () => {
    const g = fakeGate([undefined]);
    for (let i = 0; i < 10; i++) await g.gate(); // ten messages in the same instant
    expect(g.checks()).toBe(1);
    g.advance(HOLD_CHECK_MS);
    await g.gate();
    expect(g.checks()).toBe(2);
    expect(g.said).toEqual([]);
  });

  it('holds until the hold ends, saying so once per reason, polling every HOLD_POLL_MS', async () => {
    const g = fakeGate([age, age, throttling, undefined]);
    await g.gate();
    expect(g.checks()).toBe(4);
    expect(g.said).toEqual([
      'held AgeOverObjective at 0',
      `held DependencyThrottling at ${2 * HOLD_POLL_MS}`,
      `resumed from DependencyThrottling at ${3 * HOLD_POLL_MS}`,
    ]);
  });

  it('gives up after the hold timeout with the reason, replaying nothing more', async () => {
    const g = fakeGate([age], 12_000);
    const err = await g.gate().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HoldTimeout);
    expect((err as HoldTimeout).hold).toEqual(age);
    expect(g.checks()).toBe(4); // at 0, 5, 10 and 15 s: held past 12 s
  });
});
