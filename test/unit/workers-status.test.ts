// What the JobWorker says about its worker pods (WorkersReady, Degraded) and
// about a pause, from what the pods report: pure.
import { describe, expect, it } from 'vitest';
import { duration } from '../../src/reconcile/status/duration.js';
import {
  parseWorkerWords,
  workersNeedChecking,
  workersReadyCondition,
  WORKERS_CHECK_AFTER_MS,
} from '../../src/reconcile/status/workers.js';
import { brokerProblem, claimStoreProblem } from '../../worker/readiness.js';

const d = (ready: number, replicas = 3) => ({
  revision: '1',
  generation: 1,
  observedGeneration: 1,
  replicas,
  podReplicas: replicas,
  readyReplicas: ready,
  updatedReplicas: replicas,
  availableReplicas: ready,
});

describe('WorkersReady', () => {
  it('names the commonest fault, a pod that has it, and the fix', () => {
    const c = workersReadyCondition(d(0), 3, [
      { pod: 'w-a', reason: 'Starting', message: 'connecting' },
      { pod: 'w-b', reason: 'BrokerAuthRefused', message: 'ACCESS_REFUSED', fix: 'fix the Secret' },
      { pod: 'w-c', reason: 'BrokerAuthRefused', message: 'ACCESS_REFUSED', fix: 'fix the Secret' },
    ]);
    expect(c).toMatchObject({ status: 'False', reason: 'BrokerAuthRefused' });
    expect(c.message).toContain('2 of those asked');
    expect(c.message).toContain('pod w-b');
    expect(c.message).toContain('Fix: fix the Secret');
  });

  it('pods only starting or draining are not a fault', () => {
    expect(
      workersReadyCondition(d(1), 3, [{ pod: 'w-a', reason: 'Starting', message: '' }]),
    ).toMatchObject({ status: 'Unknown', reason: 'Starting' });
    expect(workersReadyCondition(d(1), 3, undefined)).toMatchObject({ status: 'Unknown' });
  });

  it('wanted while the Deployment is being created: Unknown, never True (an alert on it waits)', () => {
    expect(workersReadyCondition(undefined, 2, undefined)).toMatchObject({
      status: 'Unknown',
      reason: 'Starting',
      message: '0 of 2 workers are ready; their Deployment does not exist yet.',
    });
    expect(workersReadyCondition(undefined, 0, undefined)).toMatchObject({ status: 'True' });
  });

  it('all ready, or none wanted (paused, scaled to zero): True', () => {
    expect(workersReadyCondition(d(3), 3, undefined)).toMatchObject({
      status: 'True',
      reason: 'AllReady',
    });
    expect(workersReadyCondition(d(0, 0), 0, undefined)).toMatchObject({
      status: 'True',
      reason: 'NoneWanted',
    });
  });

  it('pods are asked only once the Deployment has stayed unavailable a while', () => {
    const now = new Date('2026-11-30T12:00:00Z');
    const deployment = (since: number, ready = 0) => ({
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'w' },
      spec: { replicas: 2 },
      status: {
        replicas: 2,
        readyReplicas: ready,
        conditions: [
          {
            type: 'Available',
            status: 'False',
            lastTransitionTime: new Date(now.getTime() - since).toISOString(),
          },
        ],
      },
    });
    expect(workersNeedChecking(deployment(WORKERS_CHECK_AFTER_MS - 1000), now)).toBe(false);
    expect(workersNeedChecking(deployment(WORKERS_CHECK_AFTER_MS + 1000), now)).toBe(true);
    expect(workersNeedChecking(deployment(WORKERS_CHECK_AFTER_MS + 1000, 2), now)).toBe(false);
  });
});

describe("a worker's own words", () => {
  it('reads the /readyz body and the last log line of a worker that refused to start', () => {
    const refused = brokerProblem(
      new Error('Handshake terminated by server: 403 (ACCESS-REFUSED)'),
      (m) => m,
    );
    expect(refused.reason).toBe('BrokerAuthRefused');
    expect(parseWorkerWords(JSON.stringify({ ready: false, ...refused }))).toMatchObject({
      reason: 'BrokerAuthRefused',
      fix: refused.fix,
    });
    const log = [
      '{"level":40,"msg":"broker unavailable; retrying"}',
      JSON.stringify({
        level: 50,
        reason: 'ClaimsDatabaseMissing',
        err: 'database "x" does not exist',
        fix: 'create it',
        msg: 'refusing to start',
      }),
      '',
    ].join('\n');
    expect(parseWorkerWords(log)).toEqual({
      reason: 'ClaimsDatabaseMissing',
      message: 'database "x" does not exist',
      fix: 'create it',
    });
  });

  it('keeps nothing of a line the runtime did not write (a log may hold anything)', () => {
    expect(parseWorkerWords('password=hunter2 crashed\n')).toBeUndefined();
    expect(parseWorkerWords('{"reason":"whatever","message":"token=abc"}')).toBeUndefined();
  });

  it('classifies PostgreSQL errors by SQLSTATE, and anything else as unreachable', () => {
    const pgErr = (code: string) => Object.assign(new Error('x'), { code });
    expect(claimStoreProblem(pgErr('28P01'), (m) => m).reason).toBe('ClaimsStoreAuthRefused');
    expect(claimStoreProblem(pgErr('3F000'), (m) => m).reason).toBe('ClaimsSchemaMissing');
    expect(claimStoreProblem(pgErr('ECONNREFUSED'), (m) => m).reason).toBe(
      'ClaimsStoreUnreachable',
    );
  });
});

describe('ages with their unit', () => {
  it.each([
    [0, '0s'],
    [37, '37s'],
    [250, '4m10s'],
    [3600, '1h'],
    [7500, '2h5m'],
    [273_600, '3d4h'],
  ])('%i s → %s', (s, text) => expect(duration(s)).toBe(text));
});
