// BrokerSettingsSafe on the real RabbitMQ and apiserver, both brokers: a
// policy that drops jobs on the work queue, an operator policy that caps the
// quarantine, and a handler deadline past the consumer timeout each turn the
// condition False, with an Event, a blocker in `kubectl jobworker why`, the
// Broker: line of `status` and the gauge; each clears once undone. The
// feature flags RabbitMQ 3.10 leaves disabled, and on RabbitMQ 4 a deprecated
// feature in use (a transient queue that is not exclusive), are warnings: True.
// Policies are set through the management API (what `rabbitmqctl set_policy`
// does), so the suite needs no shell on the broker's host.
import amqp from 'amqplib';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import type { KubeObject } from '../../src/kube/client.js';
import type { Operator } from '../../src/operator.js';
import { kubectlWithPlugin } from '../fixtures/kubectl-plugin.js';
import { testOperator } from '../fixtures/operator.js';
import { NAME, condition, runnerGround, type RunnerGround } from '../fixtures/runner-ground.js';
import { eventually } from '../ground/eventually.js';
import { QUEUE } from './worker-harness.js';

const onRabbitmq4 = (inject('broker') ?? 'machine') === 'rabbitmq4';
let g: RunnerGround;
let op: Operator | undefined;

beforeEach(async () => {
  g = await runnerGround();
});
afterEach(async () => {
  await op?.stop();
  op = undefined;
  await g?.cleanup();
});

/** A policy (`kind` policies) or operator policy (`operator-policies`) on the test's vhost, as `rabbitmqctl set_policy` sets it. */
const setPolicy = (
  kind: 'policies' | 'operator-policies',
  name: string,
  pattern: string,
  definition: Record<string, unknown>,
) =>
  g.h.rabbit.mgmt.request('PUT', `/${kind}/${encodeURIComponent(g.h.rabbit.vhost)}/${name}`, {
    pattern,
    definition,
    'apply-to': 'queues',
    priority: 0,
  });
const clearPolicy = (kind: 'policies' | 'operator-policies', name: string) =>
  g.h.rabbit.mgmt.request('DELETE', `/${kind}/${encodeURIComponent(g.h.rabbit.vhost)}/${name}`);

const events = async (reason: string) =>
  (
    await g.client.list<KubeObject & { reason?: string; message?: string }>(
      'v1',
      'Event',
      g.ns.namespace,
    )
  ).items.filter((e) => e.reason === reason);

/** BrokerSettingsSafe once it has `reason`. */
const said = (reason: string) =>
  eventually(
    `BrokerSettingsSafe ${reason}`,
    async () => {
      const c = condition(await g.getJw(), 'BrokerSettingsSafe');
      return c?.reason === reason ? c : undefined;
    },
    30_000,
  );
/** BrokerSettingsSafe True again: no reason to fail (warnings from the broker as a whole may stay). */
const safeAgain = () =>
  eventually(
    'BrokerSettingsSafe True',
    async () => {
      const c = condition(await g.getJw(), 'BrokerSettingsSafe');
      return c?.status === 'True' ? c : undefined;
    },
    30_000,
  );

async function gauge(): Promise<Record<string, number>> {
  const m = await op!.metrics.registry.getSingleMetric('jobfleet_broker_settings_unsafe')!.get();
  return Object.fromEntries(
    m.values
      .filter((v) => v.labels.jobworker === NAME)
      .map((v) => [String(v.labels.reason), v.value]),
  );
}

describe('BrokerSettingsSafe', () => {
  it('names each policy that loses or stalls jobs, and clears once it is gone', async () => {
    op = await testOperator(g.client, g.ns.namespace, { pollMs: 1000, brokerSettingsReadMs: 500 });
    const spec = (handlerTimeoutSeconds = 900) => {
      const s = g.spec({ scaling: { minReplicas: 0, maxReplicas: 1 } });
      return { ...s, retry: { ...s.retry, handlerTimeoutSeconds } };
    };
    await g.apply(spec());
    const kubectl = kubectlWithPlugin(g.ns.kubeconfigPath);
    const why = async () => (await kubectl('jobworker', 'why', NAME, '-n', g.ns.namespace)).stdout;
    const status = async () =>
      (await kubectl('jobworker', 'status', NAME, '-n', g.ns.namespace)).stdout;

    if (!onRabbitmq4) {
      // RabbitMQ 3.10.8 leaves some stable feature flags disabled: a warning, still True.
      const flags = await said('FeatureFlagsDisabled');
      expect(flags.status).toBe('True');
      expect(flags.message).toContain('rabbitmqctl enable_feature_flag all');
      expect(await why()).toContain('Warning: broker settings (FeatureFlagsDisabled)');
      expect(await why()).toContain(`Nothing blocks ${NAME}`);
      expect(await status()).toContain('Broker:      safe, with a warning (FeatureFlagsDisabled)');
      expect(await gauge()).toMatchObject({ FeatureFlagsDisabled: 1, PolicyDropsJobs: 0 });
    } else {
      // A fresh RabbitMQ 4 node has every stable flag on.
      await safeAgain();
      expect(await gauge()).toMatchObject({ FeatureFlagsDisabled: 0, PolicyDropsJobs: 0 });
    }

    // A message TTL on the work queue drops jobs.
    await setPolicy('policies', 'ttl', `^${QUEUE}$`, { 'message-ttl': 60000 });
    const ttl = await said('PolicyDropsJobs');
    expect(ttl.status).toBe('False');
    expect(ttl.message).toContain(
      `Policy "ttl" sets message-ttl=60000 on the work queue "${QUEUE}": it drops jobs that wait longer than 60000 ms.`,
    );
    expect(ttl.message).toContain('Fix: Remove message-ttl from "ttl"');
    expect(await why()).toContain(
      `Broker settings lose or stall jobs (PolicyDropsJobs): Policy "ttl" sets message-ttl=60000`,
    );
    expect(await status()).toContain('Broker:      UNSAFE (PolicyDropsJobs)');
    expect(await gauge()).toMatchObject({ PolicyDropsJobs: 1 });
    await eventually('the Warning event', async () =>
      (await events('BrokerSettingsUnsafe')).some((e) => e.message?.includes('"ttl"'))
        ? true
        : undefined,
    );
    await clearPolicy('policies', 'ttl');
    await safeAgain();
    expect(await gauge()).toMatchObject({ PolicyDropsJobs: 0 });
    await eventually('the Normal event', async () =>
      (await events('BrokerSettingsSafe')).length ? true : undefined,
    );

    // An operator policy capping the quarantine drops dead letters.
    await setPolicy('operator-policies', 'cap', '\\.dlq$', { 'max-length': 1000 });
    const cap = await said('PolicyDropsJobs');
    expect(cap.message).toContain(
      `Operator policy "cap" sets max-length=1000 on the quarantine queue "${QUEUE}.dlq"`,
    );
    expect(cap.message).toContain('rabbitmqctl set_operator_policy');
    expect(await why()).toContain('Operator policy "cap"');
    await clearPolicy('operator-policies', 'cap');
    await safeAgain();

    // A handler deadline that, with the longest hold, outlasts RabbitMQ's default 30 minutes.
    await g.apply(spec(1500));
    const ct = await said('ConsumerTimeoutTooShort');
    expect(ct.status).toBe('False');
    expect(ct.message).toContain('consumer_timeout is 1800000 ms');
    expect(ct.message).toContain('lower spec.retry.handlerTimeoutSeconds to 1200 or less');
    expect(await why()).toContain('(ConsumerTimeoutTooShort)');
    expect(await gauge()).toMatchObject({ ConsumerTimeoutTooShort: 1 });
    await g.apply(spec(900));
    await safeAgain();
    expect(await gauge()).toMatchObject({ ConsumerTimeoutTooShort: 0, PolicyDropsJobs: 0 });
  }, 180_000);

  it('a deprecated feature in use: a warning on RabbitMQ 4, cleared once it is gone; never said on 3.10, which has no such API', async () => {
    op = await testOperator(g.client, g.ns.namespace, {
      pollMs: 1000,
      brokerSettingsReadMs: 500,
    });
    await g.apply(g.spec({ scaling: { minReplicas: 0, maxReplicas: 1 } }));
    await safeAgain();
    // A transient queue that is not exclusive: RabbitMQ 4 marks transient_nonexcl_queues used.
    const conn = await amqp.connect(g.h.rabbit.amqpUrl);
    try {
      const ch = await conn.createChannel();
      await ch.assertQueue('scratch-transient', { durable: false, exclusive: false });
      if (onRabbitmq4) {
        const used = await said('DeprecatedFeaturesUsed');
        expect(used.status).toBe('True');
        expect(used.message).toContain('transient_nonexcl_queues');
        expect(await gauge()).toMatchObject({ DeprecatedFeaturesUsed: 1, PolicyDropsJobs: 0 });
      } else {
        // several reads later (one each 500 ms), the condition still reads safe and names no such use
        await new Promise((r) => setTimeout(r, 3000));
        const c = condition(await g.getJw(), 'BrokerSettingsSafe');
        expect(c?.status).toBe('True');
        expect(c?.reason).not.toBe('DeprecatedFeaturesUsed');
        expect((await gauge()).DeprecatedFeaturesUsed ?? 0).toBe(0);
      }
      await ch.deleteQueue('scratch-transient');
      // a warning reads True too: on RabbitMQ 4, wait for its reason to go
      if (onRabbitmq4) await said('SettingsSafe');
      else await safeAgain();
      expect((await gauge()).DeprecatedFeaturesUsed ?? 0).toBe(0);
    } finally {
      await conn.close();
    }
  }, 120_000);

  it('is not set without a management URL', async () => {
    op = await testOperator(g.client, g.ns.namespace, { pollMs: 1000, brokerSettingsReadMs: 500 });
    const s = g.spec({ scaling: { minReplicas: 0, maxReplicas: 1 } });
    delete s.broker.managementUrlSecretRef;
    await g.apply(s);
    await eventually('a status', async () => ((await g.getJw()).status?.phase ? true : undefined));
    await new Promise((r) => setTimeout(r, 2000));
    expect(condition(await g.getJw(), 'BrokerSettingsSafe')).toBeUndefined();
    expect(await gauge()).toEqual({});
  }, 60_000);
});
