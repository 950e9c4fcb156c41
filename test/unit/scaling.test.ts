// The scaling decision, by table: age objective, downstream cap and AIMD,
// min/max, stabilization, missing signals, scale to zero and wake.
import { describe, expect, it } from 'vitest';
import {
  decideReplicas,
  replicasNeeded,
  type ScalingSpec,
  type ScalingState,
  type Signals,
} from '../../src/reconcile/scaling/replicas.js';

const spec: ScalingSpec = {
  minReplicas: 1,
  maxReplicas: 30,
  targetOldestAgeSeconds: 30,
  scaleDownStabilizationSeconds: 300,
  prefetch: 8,
  maxConcurrency: 64,
};
const fresh: ScalingState = { recommendations: [] };
const sig = (o: Partial<Extract<Signals, { ok: true }>>): Signals => ({
  ok: true,
  oldestAgeSeconds: 0,
  depth: 0,
  arrivalRate: 0,
  completionRate: 0,
  ...o,
});

describe('replicasNeeded', () => {
  it.each([
    // depth, arrivals/s, age, per-replica rate, current → replicas
    [0, 0, 0, 10, 3, 0], // nothing to do
    [0, 50, 0, 10, 3, 5], // keep up with arrivals: 50 / 10 (no headroom while age ≤ T/2)
    [0, 50, 20, 10, 3, 6], // past T/2: 50 × 1.1 / 10
    [3000, 10, 20, 10, 3, 11], // backlog served within T: 3000/30 × 1.1 / 10
    [3000, 10, 40, 10, 3, 22], // already late: catch up within T/2
    [100, 0, 50, undefined, 2, 4], // unmeasured: proportional to age/objective (×1.67 → 4)
    [100, 0, 10, undefined, 2, 2], // unmeasured and within the objective: hold
    [5, 0, 1, undefined, 0, 1], // wake from zero on the first message
  ])(
    'depth %i, %i/s, age %i s, %s/s per replica, %i now → %i',
    (depth, arrivalRate, age, perReplica, current, want) => {
      expect(
        replicasNeeded(
          { ok: true, depth, arrivalRate, oldestAgeSeconds: age, completionRate: 0 },
          spec,
          perReplica,
          current,
        ),
      ).toBe(want);
    },
  );
});

describe('decideReplicas', () => {
  const t0 = 1_000_000;

  it('scales up at once on a backlog, learning per-replica throughput while saturated', () => {
    const d = decideReplicas(
      spec,
      2,
      sig({ depth: 600, oldestAgeSeconds: 40, arrivalRate: 5, completionRate: 10 }),
      fresh,
      t0,
    );
    // 10/s over 2 replicas → 5/s each; 600 in 15 s → 40/s × 1.1 / 5 = 9 → capped by 64/8 = 8
    expect(d.state.perReplicaRate).toBe(5);
    expect(d).toMatchObject({ desired: 8, limitedBy: 'downstream', need: 9 });
    expect(d.message).toBe(
      'Capped by downstream capacity 64 / prefetch 8 = 8 replicas; oldest message 40 s > 30 s objective.',
    );
  });

  it('caps at maxReplicas with a message saying what to change', () => {
    const d = decideReplicas(
      { ...spec, maxConcurrency: undefined, maxReplicas: 5 },
      2,
      sig({ depth: 6000, oldestAgeSeconds: 40, completionRate: 10 }),
      fresh,
      t0,
    );
    expect(d).toMatchObject({ desired: 5, limitedBy: 'maxReplicas' });
    expect(d.message).toMatch(/Raise spec\.scaling\.maxReplicas/);
  });

  it('while a backlog waits, scales down only after the stabilization window, to the highest recent recommendation', () => {
    let state = fresh;
    const current = 8;
    let d = decideReplicas(
      spec,
      current,
      sig({ depth: 600, oldestAgeSeconds: 40, completionRate: 40 }),
      state,
      t0,
    );
    expect(d.desired).toBe(8);
    state = d.state;
    // A few messages keep waiting: the need falls to the minimum, but the window holds.
    for (const dt of [10_000, 100_000, 299_000]) {
      d = decideReplicas(
        spec,
        current,
        sig({ depth: 3, oldestAgeSeconds: 1, arrivalRate: 1, completionRate: 1 }),
        state,
        t0 + dt,
      );
      expect(d).toMatchObject({ desired: 8, limitedBy: 'stabilization' });
      state = d.state;
    }
    d = decideReplicas(
      spec,
      current,
      sig({ depth: 3, oldestAgeSeconds: 1, arrivalRate: 1, completionRate: 1 }),
      state,
      t0 + 301_000,
    );
    // 1/s arriving at 5/s per replica (learnt while busy) → 1 replica
    expect(d).toMatchObject({ desired: 1, limitedBy: 'age' });
  });

  it('once the queue is empty, a burst is over: down at once to what this reading and the one before need', () => {
    let d = decideReplicas(
      spec,
      8,
      sig({ depth: 600, oldestAgeSeconds: 40, arrivalRate: 40, completionRate: 40 }),
      fresh,
      t0,
    );
    expect(d.desired).toBe(8);
    // the first empty reading still remembers the busy one before it…
    d = decideReplicas(spec, 8, sig({ arrivalRate: 5, completionRate: 5 }), d.state, t0 + 10_000);
    expect(d).toMatchObject({ desired: 8, limitedBy: 'stabilization' });
    // …the second goes down to what the arrivals need (5/s at 5/s per replica)
    d = decideReplicas(spec, 8, sig({ arrivalRate: 5, completionRate: 5 }), d.state, t0 + 20_000);
    expect(d).toMatchObject({ desired: 1, limitedBy: 'age' });
  });

  it('a small step down on an empty queue is noise: it waits for the full window', () => {
    const ten = { ...spec, maxConcurrency: undefined };
    let state: ScalingState = { recommendations: [], perReplicaRate: 10 };
    let d = decideReplicas(ten, 10, sig({ arrivalRate: 100 }), state, t0);
    state = d.state;
    for (const dt of [10_000, 20_000, 290_000]) {
      d = decideReplicas(ten, 10, sig({ arrivalRate: 81 }), state, t0 + dt); // 9 would do
      expect(d).toMatchObject({ desired: 10, limitedBy: 'stabilization' });
      state = d.state;
    }
    d = decideReplicas(ten, 10, sig({ arrivalRate: 81 }), state, t0 + 301_000);
    expect(d.desired).toBe(9);
  });

  it('a lowered maxReplicas applies at once, window or not', () => {
    const busy = sig({ depth: 3, oldestAgeSeconds: 2, arrivalRate: 50 });
    const ten = { ...spec, maxConcurrency: undefined };
    let d = decideReplicas(ten, 8, busy, { recommendations: [], perReplicaRate: 5 }, t0);
    expect(d.desired).toBe(10); // 50/s at 5/s a replica
    d = decideReplicas({ ...ten, maxReplicas: 4 }, 10, busy, d.state, t0 + 10_000);
    expect(d).toMatchObject({ desired: 4, limitedBy: 'maxReplicas' });
  });

  it('never flaps: alternating signals within the window do not move it down and up', () => {
    let state = fresh;
    const seen: number[] = [];
    for (let i = 0; i < 20; i++) {
      const busy = i % 2 === 0;
      const d = decideReplicas(
        spec,
        6,
        busy
          ? sig({ depth: 300, oldestAgeSeconds: 25, arrivalRate: 20, completionRate: 30 })
          : sig({ depth: 0, arrivalRate: 20, completionRate: 20 }),
        state,
        t0 + i * 15_000,
      );
      state = d.state;
      seen.push(d.desired);
    }
    const changes = seen.filter((v, i) => i > 0 && v !== seen[i - 1]).length;
    expect(changes).toBeLessThanOrEqual(1);
  });

  it('sizes on the capacity the workers report, cross-checked by what the fleet completes while late', () => {
    // queue empty: the workers' figure alone (learnt rate or not)
    let d = decideReplicas(
      { ...spec, maxConcurrency: undefined },
      2,
      sig({ arrivalRate: 50, capacityPerReplica: 10 }),
      { recommendations: [], perReplicaRate: 4 },
      t0,
    );
    expect(d.desired).toBe(5); // 50 / 10, not 50 / 4
    // late with a backlog, all replicas ready: the fleet completes 6/s per replica, less than reported
    d = decideReplicas(
      { ...spec, maxConcurrency: undefined },
      5,
      sig({
        depth: 900,
        oldestAgeSeconds: 20,
        arrivalRate: 50,
        completionRate: 30,
        readyReplicas: 5,
        capacityPerReplica: 10,
      }),
      fresh,
      t0,
    );
    expect(d.state.perReplicaRate).toBe(6);
    expect(d.desired).toBe(10); // 50 × 1.1 / 6 → 10, where 10/s per replica would say 6
  });

  it('cuts the downstream cap by a quarter while the dependency throttles (once per period) and raises it by one when quiet', () => {
    let state = fresh;
    const busy = (throttleRate: number) =>
      sig({ depth: 5000, oldestAgeSeconds: 90, arrivalRate: 50, completionRate: 40, throttleRate });
    let d = decideReplicas(spec, 8, busy(3), state, t0);
    expect(d).toMatchObject({ desired: 6, limitedBy: 'downstream' }); // floor(8 × 0.75)
    expect(d.throttling).toBe(true); // status.scaling.throttling: JobReplays wait
    expect(d.message).toMatch(
      /dependency is throttling \(3\.0\/s\), so the cap was lowered from 8/,
    );
    state = d.state;
    d = decideReplicas(spec, 6, busy(3), state, t0 + 10_000); // within the period: no second cut
    expect(d.desired).toBe(6);
    state = d.state;
    d = decideReplicas(spec, 6, busy(3), state, t0 + 31_000);
    expect(d.desired).toBe(4);
    state = d.state;
    d = decideReplicas(spec, 4, busy(0), state, t0 + 62_000);
    expect(d.desired).toBe(5);
    state = d.state;
    for (let i = 1; i <= 6; i++)
      state = decideReplicas(spec, 3, busy(0), state, t0 + 62_000 + i * 31_000).state;
    expect(state.throttleCap).toBeUndefined(); // back to the static 64 / 8
    expect(decideReplicas(spec, 8, busy(0), state, t0 + 400_000).desired).toBe(8);
  });

  it("with the workers' figures, cuts the cap to the replicas that carry what the dependency accepted", () => {
    const wide = { ...spec, maxConcurrency: 160 }; // static cap 20
    const busy = (o: Partial<Extract<Signals, { ok: true }>>) =>
      sig({
        depth: 5000,
        oldestAgeSeconds: 90,
        arrivalRate: 200,
        completionRate: 120,
        throttleRate: 40,
        capacityPerReplica: 10,
        workerCompletedRate: 120,
        ...o,
      });
    // pods still starting complete nothing yet: no measurement, no cut
    let d = decideReplicas(wide, 20, busy({ readyReplicas: 14 }), fresh, t0);
    expect(d).toMatchObject({ desired: 20 });
    expect(d.state.throttleCap).toBeUndefined();
    // all ready: 120/s accepted ÷ 10/s per replica = 12
    d = decideReplicas(wide, 20, busy({ readyReplicas: 20 }), d.state, t0 + 10_000);
    expect(d).toMatchObject({ desired: 12, limitedBy: 'downstream' });
    // the minute-long throttle rate still shows throttling, but 12 carry it: no further cut
    d = decideReplicas(wide, 12, busy({ readyReplicas: 12 }), d.state, t0 + 45_000);
    expect(d.desired).toBe(12);
    // quiet: +1 per period, probing
    d = decideReplicas(
      wide,
      12,
      busy({ readyReplicas: 12, throttleRate: 0 }),
      d.state,
      t0 + 80_000,
    );
    expect(d.desired).toBe(13);
  });

  it('holds the current replicas when a signal is missing, saying which', () => {
    const d = decideReplicas(
      spec,
      7,
      { ok: false, missing: 'RabbitMQ management API unreachable (connect ECONNREFUSED)' },
      fresh,
      t0,
    );
    expect(d).toMatchObject({
      desired: 7,
      limitedBy: 'signalMissing',
      message: 'Holding 7 replicas: RabbitMQ management API unreachable (connect ECONNREFUSED).',
    });
  });

  it('scales to zero after the window when minReplicas is 0 and the queue is empty, and wakes on the first message', () => {
    const z = { ...spec, minReplicas: 0 };
    let d = decideReplicas(z, 1, sig({}), fresh, t0);
    expect(d).toMatchObject({ desired: 1, limitedBy: 'stabilization' }); // a fresh start counts what runs
    d = decideReplicas(z, 1, sig({}), d.state, t0 + 301_000);
    expect(d.desired).toBe(0);
    d = decideReplicas(z, 0, sig({ depth: 1, oldestAgeSeconds: 0 }), d.state, t0 + 302_000);
    expect(d).toMatchObject({ desired: 1, limitedBy: 'age' });
  });

  it('minReplicas wins over a lower need', () => {
    const d = decideReplicas({ ...spec, minReplicas: 3 }, 3, sig({}), fresh, t0);
    expect(d).toMatchObject({ desired: 3, limitedBy: 'minReplicas' });
  });
});
