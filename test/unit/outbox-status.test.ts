// What the JobWorker says of the outbox that feeds its queue (docs/outbox.md),
// pure: OutboxDelivering, status.outbox, and the outbox's oldest row counted
// in the oldest-message age (but not in what a rollout's analysis reads).
import { describe, expect, it } from 'vitest';
import { parseSpec } from '../../src/api/jobworker.js';
import type { KubeObject } from '../../src/kube/client.js';
import type { Observation, OutboxInput } from '../../src/reconcile/model/index.js';
import { planToCompletion } from '../../src/reconcile/plan.js';
import { outboxCondition, outboxField } from '../../src/reconcile/status/outbox.js';

type Stats = NonNullable<OutboxInput['stats']>;
const relay = (over: Partial<NonNullable<Stats['relay']>> = {}): Stats['relay'] => ({
  holder: 'producer-7f/41/ab12cd34',
  heartbeatSeconds: 2,
  lastError: null,
  lastErrorSeconds: null,
  lastSentSeconds: 1,
  ...over,
});
const input = (stats?: Partial<Stats>, error?: string): OutboxInput => ({
  stalledAfterSeconds: 60,
  ...(stats && {
    stats: { unsent: 0, oldestSeconds: null, relay: relay(), exists: true, ...stats },
  }),
  ...(error && { error }),
});

describe('OutboxDelivering', () => {
  it('Unknown until read, and when the database has no outbox yet', () => {
    expect(outboxCondition(input(undefined, 'cannot read the outbox: timeout'))).toMatchObject({
      status: 'Unknown',
      reason: 'Unreadable',
      message: 'cannot read the outbox: timeout',
    });
    expect(outboxCondition(input({ exists: false, relay: null }))).toMatchObject({
      status: 'Unknown',
      reason: 'NoOutboxTable',
    });
  });

  it('True with nothing waiting, whatever the relay last said', () => {
    const c = outboxCondition(
      input({ relay: relay({ lastError: 'broker unreachable', lastErrorSeconds: 1 }) }),
    );
    expect(c).toMatchObject({ status: 'True', reason: 'Delivered' });
  });

  it('False, quoting the error, when jobs wait and the error is newer than the last publish', () => {
    const failing = input({
      unsent: 40,
      oldestSeconds: 25,
      relay: relay({
        lastError: 'broker unreachable: ACCESS_REFUSED',
        lastErrorSeconds: 3,
        lastSentSeconds: 30,
      }),
    });
    expect(outboxCondition(failing)).toEqual({
      type: 'OutboxDelivering',
      status: 'False',
      reason: 'RelayFailing',
      message:
        '40 jobs wait in the outbox (the oldest 25s): the relay producer-7f/41/ab12cd34 failed 3s ago and has published nothing since: broker unreachable: ACCESS_REFUSED',
    });
    expect(outboxField(failing)).toEqual({
      unsent: 40,
      oldestUnsentSeconds: 25,
      relay: 'producer-7f/41/ab12cd34',
      lastError: 'broker unreachable: ACCESS_REFUSED',
    });
    // an error it has published since is over
    const recovered = input({
      unsent: 3,
      oldestSeconds: 1,
      relay: relay({ lastError: 'broker unreachable', lastErrorSeconds: 9, lastSentSeconds: 0.5 }),
    });
    expect(outboxCondition(recovered)).toMatchObject({ status: 'True', reason: 'Delivering' });
    expect(outboxField(recovered)).toEqual({
      unsent: 3,
      oldestUnsentSeconds: 1,
      relay: 'producer-7f/41/ab12cd34',
    });
  });

  it('False when no relay holds the lock: none ever, or none heard for 30 s', () => {
    expect(outboxCondition(input({ unsent: 1, oldestSeconds: 4, relay: null }))).toMatchObject({
      status: 'False',
      reason: 'NoRelay',
    });
    const silent = input({ unsent: 1, oldestSeconds: 40, relay: relay({ heartbeatSeconds: 31 }) });
    expect(outboxCondition(silent).message).toContain('was heard 31s ago');
    expect(outboxField(silent)).toEqual({ unsent: 1, oldestUnsentSeconds: 40 });
  });

  it('False past stalledAfterSeconds though the relay reports no error', () => {
    expect(outboxCondition(input({ unsent: 2, oldestSeconds: 61 }))).toMatchObject({
      status: 'False',
      reason: 'OutboxStalled',
    });
    expect(outboxCondition(input({ unsent: 2, oldestSeconds: 59 }))).toMatchObject({
      status: 'True',
      reason: 'Delivering',
    });
  });
});

describe('the plan of a JobWorker with an outbox', () => {
  const NOW = new Date('2026-12-07T12:00:00Z');
  const raw: KubeObject = {
    apiVersion: 'jobfleet.dev/v1alpha1',
    kind: 'JobWorker',
    metadata: { name: 'w', namespace: 'ns', uid: 'u-1', generation: 1 },
    spec: {
      image: 'registry.example.com/w:1',
      broker: { urlSecretRef: { name: 'r', key: 'url' }, queue: 'q' },
      claims: { urlSecretRef: { name: 'c', key: 'url' } },
      contract: { idempotencyKey: 'order:{id}', schemaVersions: [1] },
      deadLetter: { owner: 'team' },
      outbox: { urlSecretRef: { name: 'orders-db', key: 'url' } },
      scaling: { minReplicas: 1, maxReplicas: 4, targetOldestAgeSeconds: 30 },
    },
  };

  /** Plans once; the queue's head is `queueAge` seconds old (a classic queue's head timestamp). */
  function plan(outbox: OutboxInput, queueAge = 0) {
    const parsed = parseSpec(raw.spec);
    if (!parsed.ok) throw new Error(parsed.problems.join('; '));
    const obs: Observation = {
      raw,
      spec: parsed.spec,
      problems: [],
      secrets: new Map(),
      others: [],
      pods: [],
      records: [],
      deployment: undefined,
      queue: {
        ok: true,
        stats: {
          type: 'classic',
          messagesReady: queueAge ? 5 : 0,
          ...(queueAge && { headMessageTimestamp: NOW.getTime() / 1000 - queueAge }),
          messagesUnacked: 0,
          consumers: 1,
          publishRate: 0,
          ackRate: 0,
        },
      },
      polling: false,
      outbox,
    };
    return planToCompletion({ obs, memory: undefined, now: NOW, pollMs: 10_000 }, () => undefined);
  }

  it("counts the oldest unsent row in the oldest message's age, not in the queue's own", () => {
    const p = plan(input({ unsent: 12, oldestSeconds: 90, relay: null }));
    expect(p.scaling).toMatchObject({
      oldestAgeSeconds: 90,
      queueAgeSeconds: 0,
      outboxAgeSeconds: 90,
    });
    expect(p.status.oldestMessageAgeSeconds).toBe(90);
    expect(p.status.outbox).toEqual({ unsent: 12, oldestUnsentSeconds: 90 });
    expect(p.status.conditions?.find((c) => c.type === 'OutboxDelivering')).toMatchObject({
      status: 'False',
      reason: 'NoRelay',
    });
    // read again within OUTBOX_READ_MS, whatever else changes
    expect(p.requeueAfterMs).toBeLessThanOrEqual(10_000);
  });

  it("an outbox younger than the queue's head changes nothing", () => {
    const p = plan(input({ unsent: 1, oldestSeconds: 4 }), 20);
    expect(p.scaling).toMatchObject({ oldestAgeSeconds: 20, queueAgeSeconds: 20 });
  });
});
