import { describe, expect, it } from 'vitest';
import { statusLines, verdict, whyLines } from '../../src/cli/jobworker-view.js';
import { leaseToRead, operatorWords, type LeaseSpec } from '../../src/cli/operator-lease.js';

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

describe('kubectl jobworker status: a status not written yet', () => {
  it('a new JobWorker without one says why, and one behind the spec says the operator has not seen it', () => {
    const fresh = { metadata: { name: 'invoice-sender', namespace: 'billing', generation: 1 } };
    expect(verdict(fresh)).toBe(3);
    expect(statusLines(fresh)[1]).toBe(
      "Phase:       Unknown (no status yet: a new JobWorker's first is written once it is Available, or 10 s after its Deployment is created)",
    );
    expect(statusLines(jw({ phase: 'Healthy' }, 2))[1]).toBe(
      'Phase:       Healthy (not yet observed: the operator has not seen the latest spec)',
    );
    expect(statusLines(jw({ phase: 'Healthy' }))[1]).toBe('Phase:       Healthy');
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

describe('kubectl jobworker status and why: in-doubt jobs', () => {
  it('status counts them; why names the held ones with their reasons and says how to decide', () => {
    const held = {
      ...jw({
        phase: 'Healthy',
        inDoubt: {
          deciding: 1,
          held: 7,
          heldJobs: [
            {
              id: 12,
              key: 'order:42:ship',
              reason: 'held for a person (…): attempt 1 is in doubt',
            },
          ],
        },
      }),
      spec: { broker: { queue: 'orders.ship' } },
    };
    expect(statusLines(held)).toContain(
      'In doubt:    1 being decided, 7 held for a person (kubectl jobworker why invoice-sender names them)',
    );
    expect(whyLines(held)).toEqual([
      'Nothing blocks invoice-sender: phase Healthy.',
      'Held for a person: 7 in-doubt jobs (docs/in-doubt.md#a-held-job): replay one whose effect did not happen, `jobfleet dlq discard --id ID --mark-done` one whose effect did (jobfleet dlq list --queue orders.ship --class in_doubt).',
      '  #12 order:42:ship: held for a person (…): attempt 1 is in doubt',
      '  … and 6 more',
    ]);
    expect(whyLines(jw({ phase: 'Healthy', inDoubt: { deciding: 2, held: 0 } }))).toEqual([
      'Nothing blocks invoice-sender: phase Healthy.',
    ]);
  });
});

describe('kubectl jobworker status and why: is an operator updating it?', () => {
  const now = new Date('2026-12-05T10:00:00Z');
  const where = { namespace: 'jobfleet-system', name: 'jobfleet-operator' };
  const renewed = (secondsAgo: number, more: Partial<LeaseSpec> = {}) =>
    operatorWords(
      {
        where,
        read: {
          found: {
            holderIdentity: 'jobfleet-7d9f-abc',
            leaseDurationSeconds: 15,
            renewTime: new Date(now.getTime() - secondsAgo * 1000)
              .toISOString()
              .replace('Z', '000Z'),
            ...more,
          },
        },
      },
      now,
    );

  it('a lease renewed within its duration: the leader, and nothing to say in why', () => {
    const ok = renewed(3);
    expect(ok).toEqual({
      silent: false,
      line: 'jobfleet-7d9f-abc leads, Lease jobfleet-system/jobfleet-operator renewed 3s ago',
    });
    const healthy = jw({ phase: 'Healthy' });
    expect(verdict(healthy, ok)).toBe(0);
    expect(statusLines(healthy, now, ok).slice(0, 3)).toEqual([
      'Name:        billing/invoice-sender',
      'Phase:       Healthy',
      'Operator:    jobfleet-7d9f-abc leads, Lease jobfleet-system/jobfleet-operator renewed 3s ago',
    ]);
    expect(whyLines(healthy, ok)).toEqual(['Nothing blocks invoice-sender: phase Healthy.']);
    // released by a leader that stopped, within the hand-over time: not silence yet
    expect(renewed(5, { holderIdentity: '', leaseDurationSeconds: 1 }).silent).toBe(false);
  });

  it('a lease not renewed past its duration (after helm uninstall), or none: the status is stale, and the fix', () => {
    const healthy = jw({ phase: 'Healthy' });
    for (const [words, since] of [
      [renewed(250), 'since 2026-12-05T09:55:50Z (4m10s ago)'],
      [renewed(20, { holderIdentity: '', leaseDurationSeconds: 1 }), 'since 2026-12-05T09:59:40Z'],
    ] as const) {
      expect(words.silent).toBe(true);
      expect(verdict(healthy, words)).toBe(1);
      const lines = statusLines(healthy, now, words);
      expect(lines[1]).toBe(
        'Phase:       Healthy (as last written: no operator updates this status now, see Operator)',
      );
      expect(lines[2]).toContain(
        `Operator:    silent: no operator has renewed its Lease jobfleet-system/jobfleet-operator ${since}`,
      );
      expect(lines[2]).toContain('kubectl get pods -n jobfleet-system');
      const why = whyLines(healthy, words);
      expect(why).toHaveLength(1); // not "Nothing blocks …: phase Healthy"
      expect(why[0]).toMatch(
        /^No operator has renewed its Lease jobfleet-system\/jobfleet-operator since/,
      );
      expect(why[0]).toContain(
        'Is it installed and running? helm list -A; kubectl get pods -n jobfleet-system.',
      );
    }
    const none = operatorWords({ where, read: { missing: true } }, now);
    expect(none.silent).toBe(true);
    expect(whyLines(healthy, none)[0]).toBe(
      'No operator runs: there is no Lease jobfleet-system/jobfleet-operator (an operator takes it when it starts), so nothing updates this status. Is the operator installed, and in jobfleet-system? helm list -A; kubectl get pods -n jobfleet-system. Installed elsewhere: pass --operator-namespace NAMESPACE.',
    );
  });

  it('a user who may not read the lease is told so; the rest prints, the exit code follows the status', () => {
    const forbidden = operatorWords(
      { where, read: { forbidden: 'leases.coordination.k8s.io "jobfleet-operator" is forbidden' } },
      now,
    );
    const healthy = jw({ phase: 'Healthy' });
    expect(verdict(healthy, forbidden)).toBe(0);
    expect(statusLines(healthy, now, forbidden)[2]).toMatch(
      /^Operator: {4}unknown: you may not read the Lease jobfleet-system\/jobfleet-operator \(leases.coordination.k8s.io "jobfleet-operator" is forbidden\)/,
    );
    expect(whyLines(healthy, forbidden)).toEqual([
      expect.stringMatching(/^Operator unknown: you may not read/),
      'Nothing blocks invoice-sender: phase Healthy.',
    ]);
  });

  it('looks where the status says, else jobfleet-system; --operator-namespace wins', () => {
    const recorded = { namespace: 'ops', name: 'fleet-lease' };
    expect(leaseToRead(recorded, undefined)).toEqual(recorded);
    expect(leaseToRead(undefined, undefined)).toEqual(where);
    expect(leaseToRead(recorded, 'platform')).toEqual({
      namespace: 'platform',
      name: 'fleet-lease',
    });
  });
});

describe('kubectl jobworker status: paused', () => {
  it('says Desired 0 and the count that comes back on resume', () => {
    expect(
      statusLines(jw({ phase: 'Paused', desiredReplicas: 0, resumeReplicas: 3, readyReplicas: 0 })),
    ).toContain('Replicas:    desired 0 (paused; 3 on resume), ready 0');
  });
});

describe('kubectl jobworker status|why: the broker settings', () => {
  const broker = (status: string, reason: string, message: string) =>
    jw({
      phase: 'Healthy',
      conditions: [{ type: 'BrokerSettingsSafe', status, reason, message }],
    });

  it('a policy that loses jobs is a blocker in why and UNSAFE in status', () => {
    const bad = broker('False', 'PolicyDropsJobs', 'Policy "ttl" sets message-ttl=60000 …');
    expect(whyLines(bad)).toEqual([
      'Broker settings lose or stall jobs (PolicyDropsJobs): Policy "ttl" sets message-ttl=60000 …',
    ]);
    expect(statusLines(bad)).toContain(
      'Broker:      UNSAFE (PolicyDropsJobs) — Policy "ttl" sets message-ttl=60000 …',
    );
  });

  it('a warning reason is a warning after "Nothing blocks"; safe says so in status only', () => {
    const warn = broker('True', 'FeatureFlagsDisabled', 'Feature flags not enabled: x.');
    expect(whyLines(warn)).toEqual([
      'Nothing blocks invoice-sender: phase Healthy.',
      'Warning: broker settings (FeatureFlagsDisabled): Feature flags not enabled: x.',
    ]);
    const safe = broker('True', 'SettingsSafe', 'No policy …');
    expect(whyLines(safe)).toEqual(['Nothing blocks invoice-sender: phase Healthy.']);
    expect(statusLines(safe)).toContain('Broker:      settings safe');
    expect(statusLines(jw({ phase: 'Healthy' })).some((l) => l.startsWith('Broker:'))).toBe(false);
  });
});
