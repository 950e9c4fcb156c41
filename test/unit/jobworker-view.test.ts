import { describe, expect, it } from 'vitest';
import { statusLines, verdict, whyLines } from '../../src/cli/jobworker-view.js';

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
    expect(verdict(jw({ phase: 'Paused' }))).toBe(1); // waits for a person, as Blocked does
  });

  it('Healthy under analysis is still progressing: status --watch waits for the analysis, showing the time left', () => {
    const analysing = {
      ...jw({
        phase: 'Healthy',
        analysis: { revision: '3', stable: '2', startedAt: '2026-11-30T12:00:00Z' },
      }),
      spec: { rollout: { analysisSeconds: 300 } },
    };
    expect(verdict(analysing)).toBe(3);
    expect(statusLines(analysing, new Date('2026-11-30T12:01:40Z'))).toContain(
      'Analysis:    revision 3 watched against 2 for rising age or crash loops, 200 s of 300 s left',
    );
  });
});

describe('kubectl jobworker status: capacity', () => {
  it('says what one replica can do and where the figure comes from', () => {
    expect(
      statusLines(
        jw({ phase: 'Healthy', capacityPerReplica: 48, capacitySource: 'WorkerMetrics' }),
      ),
    ).toContain("Capacity:    48 jobs/s per replica (from the worker pods' own figures)");
    expect(statusLines(jw({ phase: 'Healthy' })).some((l) => l.startsWith('Capacity'))).toBe(false);
  });
});

describe('kubectl jobworker status: the age and where it comes from', () => {
  it('says when it is measured from deliveries, and when estimated, why', () => {
    const line = (status: Record<string, unknown>) =>
      statusLines(jw({ phase: 'Healthy', queueDepth: 40, ...status })).find((l) =>
        l.startsWith('Oldest age'),
      );
    expect(line({ oldestMessageAgeSeconds: 3.2, ageSource: 'HeadTimestamp' })).toBe(
      'Oldest age:  3.2 s, depth 40',
    );
    expect(line({ oldestMessageAgeSeconds: 3.2, ageSource: 'DeliveryTimestamps' })).toBe(
      "Oldest age:  3.2 s (measured from the workers' deliveries), depth 40",
    );
    expect(
      line({
        oldestMessageAgeSeconds: 9,
        ageSource: 'Estimated',
        conditions: [
          { type: 'AgeMeasured', status: 'False', reason: 'NoMessageTimestamps', message: '…' },
        ],
      }),
    ).toBe(
      'Oldest age:  9 s (estimated from depth and rates: deliveries carry no timestamp), depth 40',
    );
    // the reason "Estimated" is not said twice
    expect(
      line({
        oldestMessageAgeSeconds: 0,
        ageSource: 'Estimated',
        conditions: [{ type: 'AgeMeasured', status: 'False', reason: 'Estimated', message: '…' }],
      }),
    ).toBe(
      'Oldest age:  0 s (estimated from depth and rates: no worker has reported a delivery), depth 40',
    );
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
