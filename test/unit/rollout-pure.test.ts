import { describe, expect, it } from 'vitest';
import { analyze, rollbackStep, type StepInput } from '../../src/reconcile/rollout/rollback.js';
import { gate } from '../../src/reconcile/rollout/gate.js';

const v1 = { keyRule: 'invoice:{id}:send', schemaVersions: [2, 3] };

describe('gate', () => {
  it('blocks a key-rule change, naming both rules and the fix', () => {
    const g = gate({
      kind: 'rollout',
      runningRevision: '1',
      running: v1,
      candidateRevision: '2',
      candidate: { ...v1, keyRule: 'invoice:{invoiceId}:send' },
    });
    expect(g).toEqual({
      ok: false,
      reason: 'IdempotencyKeyRuleChanged',
      message: expect.stringContaining(
        'Revision 2 changes the idempotency-key rule from "invoice:{id}:send" (revision 1) to "invoice:{invoiceId}:send"',
      ),
    });
    if (!g.ok)
      expect(g.message).toContain('Restore spec.contract.idempotencyKey to "invoice:{id}:send"');
  });

  it('lets the audited override through only when the queues are empty', () => {
    const base = {
      kind: 'rollout' as const,
      runningRevision: '1',
      running: v1,
      candidateRevision: '2',
      candidate: { ...v1, keyRule: 'invoice:{invoiceId}:send' },
      override: 'INC-5: producers re-keyed, queue drained',
    };
    expect(gate({ ...base, queuedMessages: 3 })).toMatchObject({
      ok: false,
      message: expect.stringContaining('3 messages are still queued'),
    });
    expect(gate({ ...base })).toMatchObject({
      ok: false,
      message: expect.stringContaining('their depth is unknown'),
    });
    expect(gate({ ...base, queuedMessages: 0 })).toEqual({
      ok: true,
      overrideUsed: 'INC-5: producers re-keyed, queue drained',
    });
  });

  it('blocks dropping a schema version that may still be queued, forward and back', () => {
    const forward = gate({
      kind: 'rollout',
      runningRevision: '1',
      running: v1,
      candidateRevision: '2',
      candidate: { ...v1, schemaVersions: [3] },
    });
    expect(forward).toMatchObject({
      ok: false,
      reason: 'SchemaVersionIncompatible',
      message: expect.stringContaining(
        'Revision 2 accepts schema versions [3], but [2] may still be queued',
      ),
    });
    // Rolling back to a revision that cannot read what producers now send.
    const back = gate({
      kind: 'rollback',
      runningRevision: '3',
      running: { ...v1, schemaVersions: [3, 4] },
      candidateRevision: '2',
      candidate: v1,
      producerVersions: [4],
      observedVersions: [3],
    });
    expect(back).toMatchObject({
      ok: false,
      message: expect.stringContaining(
        'Rolling back to revision 2 accepts schema versions [2, 3], but [4] may still be queued (producers declare [4]; the queue has seen [3])',
      ),
    });
  });

  it('passes compatible changes; declared producer versions let an old version go', () => {
    expect(
      gate({
        kind: 'rollout',
        runningRevision: '1',
        running: v1,
        candidateRevision: '2',
        candidate: { ...v1, schemaVersions: [2, 3, 4] },
      }),
    ).toEqual({ ok: true });
    expect(
      gate({
        kind: 'rollout',
        runningRevision: '1',
        running: v1,
        candidateRevision: '2',
        candidate: { ...v1, schemaVersions: [3] },
        producerVersions: [3],
      }),
    ).toEqual({ ok: true });
  });
});

describe('rollbackStep: drain → restore → verify', () => {
  const t0 = new Date('2026-11-30T10:00:00Z');
  const at = (s: number) => new Date(t0.getTime() + s * 1000);
  const base: StepInput = {
    now: t0,
    state: undefined,
    deployedRevision: '3',
    targetRevision: '2',
    isRollback: true,
    trigger: 'SpecReverted',
    drainSeconds: 20,
    verifySeconds: 60,
    objectiveSeconds: 30,
    oldPods: undefined,
    restored: false,
    ageSeconds: 90,
  };

  it('drains the rolled-back revision first, and never starts the restored one while it has pods', () => {
    const start = rollbackStep(base);
    expect(start.deploy).toEqual({ revision: '3', scaleToZero: true });
    expect(start.state).toMatchObject({
      phase: 'Draining',
      from: '3',
      to: '2',
      drainDeadline: '2026-11-30T10:00:20Z',
    });
    expect(start.conditions[0]).toMatchObject({ type: 'Draining', status: 'True' });
    const still = rollbackStep({ ...base, now: at(10), state: start.state, oldPods: 2 });
    expect(still.deploy).toEqual({ revision: '3', scaleToZero: true });
    const gone = rollbackStep({ ...base, now: at(12), state: start.state, oldPods: 0 });
    expect(gone.deploy).toEqual({ revision: '2', scaleToZero: false });
    expect(gone.state).toMatchObject({ phase: 'Restoring', drainEndedBy: 'PodsGone' });
  });

  it('moves on at the drain deadline even with pods left, and says so', () => {
    const start = rollbackStep(base);
    const late = rollbackStep({ ...base, now: at(20), state: start.state, oldPods: 1 });
    expect(late.state).toMatchObject({ phase: 'Restoring', drainEndedBy: 'Deadline' });
    expect(late.event).toMatchObject({ type: 'Warning', reason: 'Drained' });
  });

  it('verifies that age falls, or reports it did not', () => {
    const draining = rollbackStep(base).state!;
    const restoring = rollbackStep({ ...base, now: at(5), state: draining, oldPods: 0 }).state!;
    const verifying = rollbackStep({
      ...base,
      now: at(8),
      state: restoring,
      restored: true,
      ageSeconds: 90,
    }).state!;
    expect(verifying).toMatchObject({
      phase: 'Verifying',
      ageAtRestore: 90,
      verifyUntil: '2026-11-30T10:01:08Z',
    });
    const ok = rollbackStep({ ...base, now: at(20), state: verifying, ageSeconds: 70 });
    expect(ok.state).toBeUndefined();
    expect(ok.finished).toMatchObject({
      result: 'Complete',
      message: expect.stringContaining('went from 90 s to 70 s'),
    });
    const waiting = rollbackStep({ ...base, now: at(20), state: verifying, ageSeconds: 95 });
    expect(waiting.state).toBe(verifying);
    const bad = rollbackStep({ ...base, now: at(70), state: verifying, ageSeconds: 120 });
    expect(bad.finished).toMatchObject({ result: 'NotRecovering' });
  });

  it('a roll forward is no rollback: the target is applied as it is', () => {
    const fwd = rollbackStep({ ...base, targetRevision: '4', isRollback: false });
    expect(fwd).toMatchObject({ deploy: { revision: '4', scaleToZero: false }, state: undefined });
  });
});

describe('analyze: automatic rollback', () => {
  const t0 = new Date('2026-11-30T10:00:00Z');
  const at = (s: number) => new Date(t0.getTime() + s * 1000);
  const base = {
    now: t0,
    state: undefined,
    autoRollback: true,
    analysisSeconds: 300,
    objectiveSeconds: 30,
    revision: '3',
    stable: '2',
    ageSeconds: 5,
    crashLooping: false,
  };

  it('rolls back when age rises past the objective and stays there', () => {
    const s0 = analyze(base).state!;
    const s1 = analyze({ ...base, now: at(20), state: s0, ageSeconds: 45 });
    expect(s1.rollback).toBeUndefined(); // one reading is a blip
    const s2 = analyze({ ...base, now: at(31), state: s1.state, ageSeconds: 60 });
    expect(s2.rollback).toEqual({
      to: '2',
      reason:
        'queue age rose from 5 s to 60 s, past the 30 s objective, within 300 s of revision 3',
    });
  });

  it('a fleet already over its objective that holds steady is not rising: within a second of the start', () => {
    const s0 = analyze({ ...base, ageSeconds: 40 }).state!;
    const s1 = analyze({ ...base, now: at(5), state: s0, ageSeconds: 40.9 });
    const s2 = analyze({ ...base, now: at(20), state: s1.state, ageSeconds: 41 });
    expect(s2).toEqual({ state: expect.objectContaining({ overObjectiveSince: undefined }) });
    // a second more is a rise
    const s3 = analyze({ ...base, now: at(25), state: s2.state, ageSeconds: 41.5 });
    const s4 = analyze({ ...base, now: at(36), state: s3.state, ageSeconds: 42 });
    expect(s4.rollback?.reason).toMatch(/^queue age rose from 40 s to 42 s/);
  });

  it('forgets a blip, ends after the window, and rolls back a crash loop at once', () => {
    const s0 = analyze(base).state!;
    const blip = analyze({ ...base, now: at(10), state: s0, ageSeconds: 45 }).state!;
    const calm = analyze({ ...base, now: at(15), state: blip, ageSeconds: 10 }).state!;
    expect(calm.overObjectiveSince).toBeUndefined();
    expect(analyze({ ...base, now: at(301), state: s0, ageSeconds: 500 })).toEqual({
      state: undefined,
    });
    expect(analyze({ ...base, crashLooping: true }).rollback?.reason).toBe(
      'revision 3 crash-loops',
    );
    expect(analyze({ ...base, autoRollback: false, ageSeconds: 500 })).toEqual({
      state: undefined,
    });
  });
});
