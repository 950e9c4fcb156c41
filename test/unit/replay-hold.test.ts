// Whether a replay waits for the incident to end: each reason, in order of
// precedence, and none once the JobWorker is settled, on time and not
// throttled, and no failure of the class arrived lately.
import { describe, expect, it } from 'vitest';
import type { JobWorkerStatus } from '../../src/api/jobworker.js';
import { replayHold, replayRate } from '../../src/dlq/replay-hold.js';

const healthy: JobWorkerStatus = {
  phase: 'Healthy',
  conditions: [
    {
      type: 'AgeObjectiveMet',
      status: 'True',
      reason: 'WithinObjective',
      message: '',
      lastTransitionTime: 'x',
    },
  ],
  scaling: { limitedBy: 'age', message: '' },
};
const hold = (status: JobWorkerStatus | undefined, recentDeadLetters = 0) =>
  replayHold({ jobWorker: 'shipper', status, recentDeadLetters, failureClass: 'transient' })
    ?.reason;

describe('replayHold', () => {
  it('goes ahead once the incident is over', () => {
    expect(hold(healthy)).toBeUndefined();
  });

  it('waits for each sign that the incident goes on', () => {
    expect(hold({ ...healthy, phase: 'Paused' })).toBe('TargetPaused');
    expect(hold({ ...healthy, phase: 'Progressing' })).toBe('RolloutInProgress');
    expect(hold({ ...healthy, phase: 'RollingBack' })).toBe('RolloutInProgress');
    expect(
      hold({
        ...healthy,
        conditions: [
          {
            type: 'AgeObjectiveMet',
            status: 'False',
            reason: 'OverObjective',
            message: '',
            lastTransitionTime: 'x',
          },
        ],
        oldestMessageAge: '2m10s',
      }),
    ).toBe('AgeOverObjective');
    expect(
      hold({ ...healthy, scaling: { limitedBy: 'downstream', message: '', throttling: true } }),
    ).toBe('DependencyThrottling');
    expect(hold(healthy, 3)).toBe('FailuresStillArriving');
  });

  it('names the first that holds, and says why in words', () => {
    const r = replayHold({
      jobWorker: 'shipper',
      status: { ...healthy, phase: 'Paused', scaling: { throttling: true } },
      recentDeadLetters: 4,
      failureClass: 'transient',
    });
    expect(r).toEqual({
      reason: 'TargetPaused',
      message: 'JobWorker shipper is paused; the replay waits for its resume.',
    });
    expect(
      replayHold({
        jobWorker: 'shipper',
        status: healthy,
        recentDeadLetters: 4,
        failureClass: 'transient',
      })?.message,
    ).toBe(
      '4 dead letters of class transient arrived in the last 2 minutes: the incident is still producing failures.',
    );
  });

  it('an unknown age (no queue signal) does not hold', () => {
    expect(hold({ phase: 'Healthy' })).toBeUndefined();
  });
});

describe('a replay’s rate', () => {
  const spec = (maxConcurrency?: number) => ({
    broker: { prefetch: 4 } as never,
    scaling: { ...(maxConcurrency && { downstream: { maxConcurrency } }) } as never,
  });
  it('is capped by what the downstream budget lets the fleet complete', () => {
    // 12 in flight at prefetch 4: 3 replicas, of 5 jobs/s each
    const r = replayRate(20, spec(12), { capacityPerReplica: 5 });
    expect(r.rate).toBe(15);
    expect(r.capped).toBe(
      '20/s capped at 15/s: the downstream budget (maxConcurrency 12) lets 3 replicas of 5 jobs/s each complete no more',
    );
    expect(replayRate(10, spec(12), { capacityPerReplica: 5 })).toEqual({ rate: 10 });
  });
  it('is as asked without a budget, or before any capacity is known', () => {
    expect(replayRate(20, spec(), { capacityPerReplica: 5 })).toEqual({ rate: 20 });
    expect(replayRate(20, spec(12), {})).toEqual({ rate: 20 });
    expect(replayRate(20, undefined, undefined)).toEqual({ rate: 20 });
  });
});
