// The creation window: a mass create goes to the control plane a window at a
// time, in arrival order, and nothing can hold a slot forever. The clock is
// passed in; no timers.
import { describe, expect, it } from 'vitest';
import { CreationWindow, hasItsPods } from '../../src/controller/creation-window.js';

const keys = (n: number) => Array.from({ length: n }, (_, i) => `ns/w-${i}`);

describe('CreationWindow', () => {
  it('admits `size` creations, then hands each freed slot to the oldest waiting key', () => {
    const w = new CreationWindow({ size: 2, timeoutMs: 30_000 });
    const [a, b, c, d, e] = keys(5) as [string, string, string, string, string];
    expect([a, b, c, d, e].map((k) => w.admit(k, 0))).toEqual([true, true, false, false, false]);
    // a reconcile of a waiting key again (another event) keeps its place
    expect(w.admit(d, 1)).toBe(false);
    expect(w.release(b, 2)).toEqual([c]);
    // c's slot is reserved for it: its reconcile is admitted, and a newcomer still waits behind d, e
    expect(w.admit(c, 3)).toBe(true);
    expect(w.admit('ns/late', 3)).toBe(false);
    expect(w.release(a, 4)).toEqual([d]);
    expect(w.release(c, 5)).toEqual([e]);
    expect(w.release(d, 6)).toEqual(['ns/late']);
    expect(w.stats).toEqual({ inFlight: 2, waiting: 0 });
  });

  it('a key admitted once stays admitted until released (its retries and wake-ups)', () => {
    const w = new CreationWindow({ size: 1, timeoutMs: 30_000 });
    expect(w.admit('ns/a', 0)).toBe(true);
    expect(w.admit('ns/a', 1)).toBe(true);
    expect(w.admit('ns/b', 1)).toBe(false);
  });

  it('a turn handed to a waiting key counts from when its reconcile starts, not from when it was queued', () => {
    const w = new CreationWindow({ size: 1, timeoutMs: 30_000 });
    w.admit('ns/a', 0);
    w.admit('ns/b', 0);
    expect(w.release('ns/a', 1_000)).toEqual(['ns/b']);
    // b's reconcile starts late (the queue was busy with wake-ups)
    expect(w.admit('ns/b', 25_000)).toBe(true);
    w.admit('ns/c', 25_000);
    expect(w.expire(40_000)).toEqual([]);
    expect(w.expire(55_000)).toEqual(['ns/c']);
  });

  it('frees a slot held past the timeout (a Deployment that never gets pods)', () => {
    const w = new CreationWindow({ size: 1, timeoutMs: 30_000 });
    w.admit('ns/stuck', 0);
    w.admit('ns/next', 1);
    expect(w.expire(29_999)).toEqual([]);
    expect(w.expire(30_000)).toEqual(['ns/next']);
  });

  it('a waiting JobWorker deleted leaves the line; a reserved slot nobody takes expires', () => {
    const w = new CreationWindow({ size: 1, timeoutMs: 10_000 });
    w.admit('ns/a', 0);
    w.admit('ns/gone', 0);
    w.admit('ns/b', 0);
    expect(w.release('ns/gone', 1)).toEqual([]);
    expect(w.release('ns/a', 2)).toEqual(['ns/b']);
    // b never comes back (deleted before its reconcile): the slot returns at the timeout
    w.admit('ns/c', 3);
    expect(w.expire(12_000)).toEqual(['ns/c']);
  });

  it('size 0 admits everything', () => {
    const w = new CreationWindow({ size: 0, timeoutMs: 1 });
    expect(keys(100).every((k) => w.admit(k, 0))).toBe(true);
    expect(w.stats).toEqual({ inFlight: 0, waiting: 0 });
  });
});

describe('hasItsPods', () => {
  const d = (generation: number, replicas: number, status?: object) => ({
    metadata: { generation },
    spec: { replicas },
    status,
  });
  it('is true once the controller manager saw this generation and created every pod', () => {
    expect(hasItsPods(d(1, 2, { observedGeneration: 1, replicas: 2 }))).toBe(true);
    expect(hasItsPods(d(1, 0, { observedGeneration: 1 }))).toBe(true);
  });
  it('is false before: no status, an older generation, pods still missing', () => {
    expect(hasItsPods(d(1, 1))).toBe(false);
    expect(hasItsPods(d(2, 1, { observedGeneration: 1, replicas: 1 }))).toBe(false);
    expect(hasItsPods(d(1, 3, { observedGeneration: 1, replicas: 2 }))).toBe(false);
  });
});
