// A new JobWorker's first status waits a few seconds for it to turn
// Available (src/reconcile/status/first-status.ts): one status write instead
// of two for a fleet that comes up fast. What must never wait: a problem, a
// settled state other than "on its way", a JobWorker with a status written.
import { describe, expect, it } from 'vitest';
import type { JobWorkerStatus } from '../../src/api/jobworker.js';
import type { KubeObject } from '../../src/kube/client.js';
import { settle, type PlannedWrites } from '../../src/reconcile/children/writes.js';
import type { Observation } from '../../src/reconcile/model/index.js';
import { FIRST_STATUS_HOLD_MS, firstStatusHoldMs } from '../../src/reconcile/status/index.js';
import { jobWorkerObject } from './jobworker-fixture.js';

const now = new Date('2026-12-07T12:00:10Z');
const at = (iso: string) => Date.parse(iso);

function obs(
  o: { status?: JobWorkerStatus; deploymentCreated?: string; problem?: boolean } = {},
): Observation {
  return {
    raw: { ...jobWorkerObject(), ...(o.status && { status: o.status }) },
    spec: undefined,
    problems: o.problem
      ? [{ reason: 'SecretMissing', message: 'Secret rabbitmq does not exist.' }]
      : [],
    secrets: new Map(),
    deployment: o.deploymentCreated
      ? {
          apiVersion: 'apps/v1',
          kind: 'Deployment',
          metadata: { name: 'w', namespace: 'ns', creationTimestamp: o.deploymentCreated },
        }
      : undefined,
    others: [],
    pods: [],
    records: [],
    polling: false,
  };
}

const progressing: JobWorkerStatus = { observedGeneration: 1, phase: 'Progressing' };

describe('a new JobWorker’s first status (src/reconcile/status/first-status.ts)', () => {
  it('waits while its Deployment is being created, and as long as is left from its creation', () => {
    expect(firstStatusHoldMs(obs(), progressing, now)).toBe(FIRST_STATUS_HOLD_MS);
    expect(
      firstStatusHoldMs(obs({ deploymentCreated: '2026-12-07T12:00:06Z' }), progressing, now),
    ).toBe(FIRST_STATUS_HOLD_MS - 4000);
    expect(
      firstStatusHoldMs(obs({ deploymentCreated: '2026-12-07T12:00:00Z' }), progressing, now),
    ).toBeUndefined();
    // "Scaling" (replicas wanted, none ready) is on its way too
    expect(firstStatusHoldMs(obs(), { phase: 'Scaling' }, now)).toBe(FIRST_STATUS_HOLD_MS);
  });

  it('counts from when it was first held, if earlier: a Deployment that never shows does not hold it longer', () => {
    expect(firstStatusHoldMs(obs(), progressing, now, at('2026-12-07T12:00:03Z'))).toBe(3000);
    expect(firstStatusHoldMs(obs(), progressing, now, at('2026-12-07T12:00:00Z'))).toBeUndefined();
    expect(
      firstStatusHoldMs(
        obs({ deploymentCreated: '2026-12-07T12:00:02Z' }),
        progressing,
        now,
        at('2026-12-07T12:00:05Z'),
      ),
    ).toBe(2000);
  });

  it('is written at once when it says something is wrong, paused, blocked, or Healthy', () => {
    expect(firstStatusHoldMs(obs({ problem: true }), { phase: 'Degraded' }, now)).toBeUndefined();
    // a problem writes at once whatever the phase planned
    expect(firstStatusHoldMs(obs({ problem: true }), progressing, now)).toBeUndefined();
    for (const phase of ['Degraded', 'Blocked', 'Paused', 'Draining', 'Healthy'] as const)
      expect(firstStatusHoldMs(obs(), { phase }, now), phase).toBeUndefined();
  });

  it('never holds once a status is written: a rollout of a later revision is reported at once', () => {
    expect(
      firstStatusHoldMs(
        obs({ status: { observedGeneration: 1, phase: 'Healthy' } }),
        progressing,
        now,
      ),
    ).toBeUndefined();
  });

  it('a held status is not written, and the events it carries wait with it; the children are still written', () => {
    const deployment: KubeObject = {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'w', namespace: 'ns' },
      spec: { replicas: 1 },
    };
    const planned: PlannedWrites = {
      writes: [{ op: 'apply', role: 'stable', object: deployment }],
      status: progressing,
      events: [{ type: 'Normal', reason: 'ScaledUp', message: 'up', of: 'Deployment' }],
    };
    const written = settle(planned, obs(), undefined);
    expect(written.status?.object.status).toEqual(progressing);
    expect(written.events.map((e) => e.event.reason)).toEqual(['ScaledUp']);
    const held = settle({ ...planned, statusHeldMs: 10_000 }, obs(), undefined);
    expect(held.status).toBeUndefined();
    expect(held.events).toEqual([]);
    expect(held.writes).toEqual(written.writes);
  });
});
