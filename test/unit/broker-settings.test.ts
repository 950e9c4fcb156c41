// What src/reconcile/broker/ finds in the broker's settings: RabbitMQ's policy
// matching (pattern, apply-to, the highest priority; operator policies beside),
// each reason, what the retry tiers and the quarantine tolerate, and the
// condition and Event they make.
import { describe, expect, it } from 'vitest';
import { parseSpec, type JobWorkerSpec } from '../../src/api/jobworker.js';
import {
  appliesTo,
  brokerEvents,
  brokerFindings,
  brokerQueues,
  brokerVerdict,
  effectivePolicy,
  patternMatches,
} from '../../src/reconcile/broker/index.js';
import type { BrokerPolicy, BrokerSettings } from '../../src/reconcile/model/index.js';
import { jobWorkerObject } from './jobworker-fixture.js';

function specOf(patch: (s: Record<string, any>) => void = () => {}): JobWorkerSpec {
  const raw = jobWorkerObject().spec as Record<string, any>;
  patch(raw);
  const p = parseSpec(raw);
  if (!p.ok) throw new Error(p.problems.join('; '));
  return p.spec;
}

const policy = (
  name: string,
  pattern: string,
  definition: Record<string, unknown>,
  more: Partial<BrokerPolicy> = {},
): BrokerPolicy => ({ name, pattern, 'apply-to': 'queues', priority: 0, definition, ...more });

const settings = (s: Partial<BrokerSettings> = {}): BrokerSettings => ({
  policies: [],
  operatorPolicies: [],
  featureFlags: [],
  deprecatedFeaturesUsed: [],
  ...s,
});

const findings = (s: Partial<BrokerSettings>, spec = specOf()) =>
  brokerFindings({
    queues: brokerQueues(spec),
    settings: settings(s),
    handlerTimeoutSeconds: spec.retry.handlerTimeoutSeconds,
  });

describe('the queues', () => {
  it('are the work queue, its retry tiers, the quarantine and (quorum) the delivery-limit queue', () => {
    const qs = brokerQueues(specOf());
    expect(qs.map((q) => [q.name, q.role])).toEqual([
      ['q', 'work'],
      ...qs.filter((q) => q.role === 'retry').map((q) => [q.name, 'retry']),
      ['q.dlq', 'quarantine'],
      ['q.delivery-limit', 'delivery-limit'],
    ]);
    expect(qs.filter((q) => q.role === 'retry').map((q) => q.name)).toContain('q.retry.1s');
    const classic = brokerQueues(specOf((s) => (s.broker.queueType = 'classic')));
    expect(classic.map((q) => q.role)).not.toContain('delivery-limit');
  });
});

describe('policy matching', () => {
  it('reads the pattern as an unanchored regular expression; an invalid one matches nothing', () => {
    expect(patternMatches('^q$', 'q')).toBe(true);
    expect(patternMatches('q', 'orders.q.dlq')).toBe(true);
    expect(patternMatches('^q$', 'q.dlq')).toBe(false);
    expect(patternMatches('(', 'q')).toBe(false);
  });

  it('applies by apply-to and queue type', () => {
    expect(appliesTo('all', 'quorum')).toBe(true);
    expect(appliesTo('queues', 'classic')).toBe(true);
    expect(appliesTo('quorum_queues', 'quorum')).toBe(true);
    expect(appliesTo('quorum_queues', 'classic')).toBe(false);
    expect(appliesTo('classic_queues', 'classic')).toBe(true);
    expect(appliesTo('streams', 'quorum')).toBe(false);
    expect(appliesTo('exchanges', 'quorum')).toBe(false);
  });

  it('takes only the highest priority policy of a queue', () => {
    const low = policy('low', '.*', { 'message-ttl': 1000 }, { priority: 1 });
    const high = policy('high', '^q$', { 'queue-mode': 'lazy' }, { priority: 5 });
    expect(effectivePolicy([low, high], { name: 'q', type: 'quorum' })?.name).toBe('high');
    // the higher one hides the TTL: nothing to flag on the work queue
    expect(findings({ policies: [low, high] }).filter((f) => f.queue === 'q')).toEqual([]);
    // without it, the TTL applies
    expect(findings({ policies: [low] }).find((f) => f.queue === 'q')).toMatchObject({
      reason: 'PolicyDropsJobs',
      key: 'message-ttl',
      value: 1000,
      policy: { name: 'low', kind: 'policy' },
    });
  });

  it('applies an operator policy beside the user policy', () => {
    const f = findings({
      policies: [policy('ha', '.*', { 'queue-mode': 'lazy' }, { priority: 9 })],
      operatorPolicies: [policy('cap', '\\.dlq$', { 'max-length': 1000 })],
    });
    expect(f).toEqual([
      expect.objectContaining({
        reason: 'PolicyDropsJobs',
        policy: { name: 'cap', kind: 'operator-policy' },
        key: 'max-length',
        value: 1000,
        queue: 'q.dlq',
      }),
    ]);
    expect(f[0]?.fix).toContain('set_operator_policy');
  });

  it('ignores a policy for exchanges, or for the other queue type', () => {
    expect(
      findings({ policies: [policy('x', '.*', { 'max-length': 1 }, { 'apply-to': 'exchanges' })] }),
    ).toEqual([]);
    expect(
      findings({
        policies: [policy('x', '.*', { 'max-length': 1 }, { 'apply-to': 'classic_queues' })],
      }),
    ).toEqual([]);
  });
});

describe('PolicyDropsJobs', () => {
  const on = (def: Record<string, unknown>, pattern = '.*', spec = specOf()) =>
    findings({ policies: [policy('p', pattern, def)] }, spec).map((f) => `${f.queue} ${f.key}`);

  it('flags each dropping key on the work queue', () => {
    const classic = specOf((s) => (s.broker.queueType = 'classic'));
    expect(on({ 'max-length': 10 }, '^q$', classic)).toEqual(['q max-length']);
    expect(on({ 'max-length-bytes': 10 }, '^q$', classic)).toEqual(['q max-length-bytes']);
    expect(on({ 'message-ttl': 10 }, '^q$')).toEqual(['q message-ttl']);
    expect(on({ expires: 10 }, '^q$')).toEqual(['q expires']);
    expect(on({ 'delivery-limit': 3 }, '^q$')).toEqual(['q delivery-limit']);
  });

  it('leaves a max-length with reject-publish overflow alone (a quorum work queue declares it)', () => {
    const classic = specOf((s) => (s.broker.queueType = 'classic'));
    expect(on({ 'max-length': 10, overflow: 'reject-publish' }, '^q$', classic)).toEqual([]);
    expect(on({ 'max-length': 10 }, '^q$')).toEqual([]);
  });

  it('flags dead-lettering on a classic work queue; a quorum one declares its own, which wins', () => {
    const classic = specOf((s) => (s.broker.queueType = 'classic'));
    expect(on({ 'dead-letter-exchange': 'gone' }, '^q$', classic)).toEqual([
      'q dead-letter-exchange',
    ]);
    expect(on({ 'dead-letter-exchange': 'gone' }, '^q$')).toEqual([]);
  });

  it('lets the retry tiers keep their TTL and dead-lettering; flags what breaks them', () => {
    expect(on({ 'message-ttl': 10, 'dead-letter-exchange': 'x' }, '\\.retry\\.')).toEqual([]);
    const expires = on({ expires: 10 }, '\\.retry\\.');
    expect(expires.length).toBeGreaterThan(0);
    expect(expires.every((f) => /\.retry\.\d+s expires$/.test(f))).toBe(true);
  });

  it('does not flag a dead-letter exchange alone on the quarantine; flags a TTL there', () => {
    expect(on({ 'dead-letter-exchange': 'archive' }, '\\.dlq$')).toEqual([]);
    expect(on({ 'message-ttl': 60000 }, '\\.dlq$')).toEqual(['q.dlq message-ttl']);
  });

  it('names the policy, key, value and a fix', () => {
    const [f] = findings({ policies: [policy('ttl', '^q$', { 'message-ttl': 60000 })] });
    expect(f?.says).toBe(
      'Policy "ttl" sets message-ttl=60000 on the work queue "q": it drops jobs that wait longer than 60000 ms.',
    );
    expect(f?.fix).toContain('rabbitmqctl set_policy');
  });
});

describe('ConsumerTimeoutTooShort', () => {
  it('assumes the 30-minute default: a handler deadline plus the 10-minute hold past it is flagged', () => {
    expect(findings({})).toEqual([]); // 900 s + 600 s < 1800 s
    const long = specOf((s) => (s.retry = { handlerTimeoutSeconds: 1500 }));
    expect(findings({}, long)).toEqual([
      expect.objectContaining({ reason: 'ConsumerTimeoutTooShort', value: 1_800_000, queue: 'q' }),
    ]);
    expect(findings({}, long)[0]?.policy).toBeUndefined();
  });

  it('reads a consumer-timeout policy on the work queue', () => {
    const [f] = findings({ policies: [policy('ct', '^q$', { 'consumer-timeout': 600_000 })] });
    expect(f).toMatchObject({
      reason: 'ConsumerTimeoutTooShort',
      policy: { name: 'ct', kind: 'policy' },
      key: 'consumer-timeout',
      value: 600_000,
    });
    expect(f?.fix).toBe('Raise consumer-timeout to at least 1500000 ms.');
  });
});

describe('upgrade warnings', () => {
  it('names stable feature flags left disabled, not experimental ones', () => {
    const f = findings({
      featureFlags: [
        { name: 'stream_queue', state: 'disabled', stability: 'stable' },
        { name: 'khepri_db', state: 'disabled', stability: 'experimental' },
        { name: 'quorum_queue', state: 'enabled', stability: 'stable' },
      ],
    });
    expect(f).toEqual([
      expect.objectContaining({
        reason: 'FeatureFlagsDisabled',
        severity: 'warning',
        value: 'stream_queue',
      }),
    ]);
  });

  it('names deprecated features in use', () => {
    expect(findings({ deprecatedFeaturesUsed: ['transient_nonexcl_queues'] })).toEqual([
      expect.objectContaining({ reason: 'DeprecatedFeaturesUsed', severity: 'warning' }),
    ]);
  });
});

describe('BrokerSettingsSafe', () => {
  const spec = specOf();
  const ok = (s: Partial<BrokerSettings>) => ({ ok: true as const, settings: settings(s) });

  it('is absent without a read, Unknown NotChecked when the API could not be read', () => {
    expect(brokerVerdict(undefined, spec)).toBeUndefined();
    expect(brokerVerdict({ ok: false, error: 'refused' }, spec)?.condition).toMatchObject({
      status: 'Unknown',
      reason: 'NotChecked',
    });
  });

  it('is False naming the failure, True with a warning reason, else SettingsSafe', () => {
    const bad = brokerVerdict(ok({ policies: [policy('ttl', '^q$', { 'message-ttl': 5 })] }), spec);
    expect(bad?.condition).toMatchObject({ status: 'False', reason: 'PolicyDropsJobs' });
    expect(bad?.condition.message).toContain('"ttl" sets message-ttl=5');
    expect(bad?.condition.message).toContain('Fix: Remove message-ttl');
    expect(bad?.counts).toEqual({
      PolicyDropsJobs: 1,
      ConsumerTimeoutTooShort: 0,
      FeatureFlagsDisabled: 0,
      DeprecatedFeaturesUsed: 0,
    });
    const warn = brokerVerdict(
      ok({ featureFlags: [{ name: 'f', state: 'disabled', stability: 'stable' }] }),
      spec,
    );
    expect(warn?.condition).toMatchObject({ status: 'True', reason: 'FeatureFlagsDisabled' });
    expect(brokerVerdict(ok({}), spec)?.condition).toMatchObject({
      status: 'True',
      reason: 'SettingsSafe',
    });
  });

  it('announces a change once: Warning when unsafe, Normal when it clears, nothing when unchanged', () => {
    const bad = brokerVerdict(
      ok({ policies: [policy('ttl', '^q$', { 'message-ttl': 5 })] }),
      spec,
    )!;
    const safe = brokerVerdict(ok({}), spec)!;
    const recorded = (c: typeof bad.condition) => [
      { ...c, lastTransitionTime: '2026-01-01T00:00:00Z' },
    ];
    expect(brokerEvents(undefined, bad.condition)).toEqual([
      { type: 'Warning', reason: 'BrokerSettingsUnsafe', message: bad.condition.message },
    ]);
    expect(brokerEvents(recorded(bad.condition), bad.condition)).toEqual([]);
    expect(brokerEvents(recorded(bad.condition), safe.condition)).toEqual([
      { type: 'Normal', reason: 'BrokerSettingsSafe', message: safe.condition.message },
    ]);
    expect(brokerEvents(undefined, safe.condition)).toEqual([]);
    const warn = brokerVerdict(
      ok({ featureFlags: [{ name: 'f', state: 'disabled', stability: 'stable' }] }),
      spec,
    )!;
    expect(brokerEvents(recorded(bad.condition), warn.condition)).toMatchObject([
      { type: 'Normal', reason: 'BrokerSettingsSafe' },
    ]);
    expect(brokerEvents(undefined, warn.condition)).toMatchObject([
      { type: 'Warning', reason: 'BrokerSettingsUnsafe' },
    ]);
  });
});
