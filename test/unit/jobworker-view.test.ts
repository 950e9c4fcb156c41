import { describe, expect, it } from 'vitest';
import { verdict, whyLines } from '../../src/cli/jobworker-view.js';

const jw = (status: Record<string, unknown>, generation = 1) => ({
  metadata: { name: 'invoice-sender', namespace: 'billing', generation },
  status: { observedGeneration: 1, ...status },
});

describe('kubectl jobworker status: exit codes', () => {
  it('0 healthy, 1 blocked or degraded, 3 progressing or not yet observed', () => {
    expect(verdict(jw({ phase: 'Healthy' }))).toBe(0);
    expect(verdict(jw({ phase: 'Blocked' }))).toBe(1);
    expect(verdict(jw({ phase: 'Degraded' }))).toBe(1);
    expect(verdict(jw({ phase: 'RollingBack' }))).toBe(3);
    expect(verdict(jw({ phase: 'Healthy' }, 2))).toBe(3); // the operator has not seen generation 2
  });
});

describe('kubectl jobworker why', () => {
  it('says what blocks, and that nothing does', () => {
    const blocked = jw({
      phase: 'Blocked',
      conditions: [
        {
          type: 'RolloutBlocked',
          status: 'True',
          reason: 'SchemaVersionIncompatible',
          message: 'Revision 4 accepts [3], but [2] may still be queued.',
          lastTransitionTime: 'x',
        },
      ],
    });
    expect(whyLines(blocked)).toEqual([
      'Rollout blocked (SchemaVersionIncompatible): Revision 4 accepts [3], but [2] may still be queued.',
    ]);
    expect(whyLines(jw({ phase: 'Healthy' }))).toEqual([
      'Nothing blocks invoice-sender: phase Healthy.',
    ]);
  });
});
