// The least-privilege broker grant of docs/compatibility.md, read from the
// page itself (so that the page and this test cannot drift), given to a fresh
// user, and everything that acts with a JobWorker's broker user run under it:
// a worker (declares its queues, consumes, retries through a delay queue,
// dead-letters), a JobReplay the operator reconciles, and the plugin's
// `kubectl jobworker dlq replay` (through the operator) and `dlq discard`
// (which connects itself with the JobWorker's Secrets). Each must succeed and
// do what the user relies on: replayed dead letters processed once, the
// discarded one gone from the quarantine with its audit record, the rest
// left as they were. And the grant without read on the quarantine (the page's
// grant before): a discard refused, saying what to grant, nothing changed.
// Runs on both brokers: classic queues on the machine's, quorum queues (with
// their delivery-limit queue) on RabbitMQ 4.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { KubeClient, type KubeObject } from '../../src/kube/client.js';
import type { Operator } from '../../src/operator.js';
import { Permanent } from '../../worker/index.js';
import { jobfleet } from '../fixtures/jobfleet-cli.js';
import { kubectlWithPlugin } from '../fixtures/kubectl-plugin.js';
import { testOperator, urlSecrets } from '../fixtures/operator.js';
import { repoRoot } from '../ground/control-plane.js';
import { eventually } from '../ground/eventually.js';
import { queueType, useKube } from '../ground/index.js';
import { CONTRACT, QUEUE, harness, type Harness } from './worker-harness.js';

interface Grant {
  configure: string;
  write: string;
  read: string;
}

/** The `rabbitmqctl set_permissions -p VHOST USER CONF WRITE READ` of docs/compatibility.md. */
function documentedGrant(): Grant {
  const page = readFileSync(path.join(repoRoot, 'docs/compatibility.md'), 'utf8');
  const command = page
    .replace(/\\\n/g, ' ') // the shell's line continuations
    .match(/rabbitmqctl set_permissions -p \S+ \S+\s+'([^']*)'\s+'([^']*)'\s+'([^']*)'/);
  if (!command)
    throw new Error(
      "docs/compatibility.md has no `rabbitmqctl set_permissions -p VHOST USER 'CONF' 'WRITE' 'READ'`",
    );
  const [, configure, write, read] = command as unknown as [string, string, string, string];
  return { configure, write, read };
}

let h: Harness;
let ns: Awaited<ReturnType<typeof useKube>>;
let client: KubeClient;
let op: Operator | undefined;
let user: string | undefined;

beforeEach(async () => {
  h = await harness();
  ns = await useKube();
  client = new KubeClient(ns.kc);
});
afterEach(async () => {
  await op?.stop();
  op = undefined;
  if (user) await h.rabbit.mgmt.request('DELETE', `/users/${user}`);
  user = undefined;
  await ns?.cleanup();
  await h?.cleanup();
});

type Status = Record<string, any>;
const get = (kind: 'JobWorker' | 'JobReplay', name: string) =>
  client.get<KubeObject & { status?: Status }>('jobfleet.dev/v1alpha1', kind, ns.namespace, name);

describe("docs/compatibility.md's least-privilege broker grant", () => {
  it('is all that a worker, a JobReplay, `kubectl jobworker dlq replay` and `dlq discard` need: each succeeds under it', async () => {
    const grant = documentedGrant();
    // The page's grant is for the queue `orders.ship`, the harness's queue, and no other.
    for (const re of [grant.configure, grant.read]) {
      expect(new RegExp(re).test(QUEUE), `${re} grants ${QUEUE}`).toBe(true);
      for (const other of ['orders.shipping', 'orders.ship.other', 'x.orders.ship'])
        expect(new RegExp(re).test(other), `${re} grants ${other}`).toBe(false);
    }
    user = `jf-${randomBytes(3).toString('hex')}`;
    await h.rabbit.mgmt.request('PUT', `/users/${user}`, { password: 'pw-least', tags: '' });
    await h.rabbit.mgmt.request(
      'PUT',
      `/permissions/${encodeURIComponent(h.rabbit.vhost)}/${user}`,
      grant,
    );
    const leastUrl = new URL(h.rabbit.amqpUrl);
    leastUrl.username = user;
    leastUrl.password = 'pw-least';

    // The worker, under the grant: declares and consumes its queues, retries once through a
    // delay queue, and dead-letters the orders the carrier still rejects.
    const broken = new Set(['lp-1', 'lp-2', 'lp-3', 'lp-4']);
    let runs = 0;
    const worker = await h.startWorker({
      config: { brokerUrl: leastUrl.toString(), deadLetterOwner: 'team-shipping' },
      handlers: {
        ship: h.effectHandler((job) => {
          const id = (job.payload as { orderId: string }).orderId;
          if (broken.has(id)) throw new Permanent(`carrier refused order ${id}`);
          if (id === 'lp-retry' && ++runs === 1) throw new Error('carrier timed out, once');
        }),
      },
    });
    const { key: retried } = await h.job('lp-retry');
    const keys: Record<string, string> = {};
    for (const id of broken) keys[id] = (await h.job(id)).key;
    const quarantined = () =>
      h.db.pool.query<{ id: string; key: string; status: string }>(
        'select id, key, status from jobfleet_dead_letters order by key',
      );
    const outcomes = await eventually('the retry and 4 dead letters', () => {
      // A copy that must wait again ('delayed': a lease lost under load) publishes through the
      // same default exchange: the grant covers it, and it is not what this test is about.
      const o = worker.outcomes.filter((x) => x !== 'delayed');
      return Promise.resolve(o.length >= 6 ? o : undefined);
    });
    expect([...outcomes].sort()).toEqual([
      'completed',
      'dead_lettered',
      'dead_lettered',
      'dead_lettered',
      'dead_lettered',
      'retried',
    ]);
    expect(await h.effects(retried)).toBe(1);
    expect((await quarantined()).rowCount).toBe(4);
    const idOf = async (id: string) =>
      (await quarantined()).rows.find((r) => r.key === keys[id])!.id;

    // The carrier is fixed, and no failure arrived for minutes: nothing holds a replay.
    broken.clear();
    await h.db.pool.query(
      `update jobfleet_dead_letters set dead_lettered_at = now() - interval '3 minutes'`,
    );
    await urlSecrets(client, ns.namespace, {
      rabbitmq: leastUrl.toString(), // the JobWorker's broker user: the grant's
      'claims-db': h.db.url,
    });
    await client.apply(
      {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobWorker',
        metadata: { name: 'shipper', namespace: ns.namespace },
        spec: {
          image: 'registry.example.com/shipping/worker:1.0.0',
          broker: {
            urlSecretRef: { name: 'rabbitmq', key: 'url' },
            queue: QUEUE,
            queueType: queueType(),
          },
          claims: { urlSecretRef: { name: 'claims-db', key: 'url' } },
          contract: { idempotencyKey: CONTRACT.keyRule, schemaVersions: CONTRACT.schemaVersions },
          deadLetter: { owner: 'team-shipping' },
        },
      },
      'test-user',
    );
    op = await testOperator(client, ns.namespace, { replayProgressMs: 100 });
    // a replay waits while its JobWorker rolls out, the first rollout too
    await eventually('the JobWorker settled', async () =>
      (await get('JobWorker', 'shipper')).status?.phase === 'Healthy' ? true : undefined,
    );

    // A JobReplay, reconciled by the operator with the JobWorker's broker user.
    await client.apply(
      {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobReplay',
        metadata: { name: 'lp-1', namespace: ns.namespace },
        spec: {
          jobWorker: 'shipper',
          selector: { keys: [keys['lp-1']] },
          initiator: 'carol',
          reason: 'carrier fixed (INC-48)',
        },
      },
      'test-user',
    );
    const done = await eventually(
      'the JobReplay to succeed',
      async () => {
        const jr = await get('JobReplay', 'lp-1');
        if (jr.status?.phase === 'Succeeded') return jr;
        // what it says instead (an ACCESS_REFUSED from the broker), for the timeout's message
        throw new Error(`JobReplay ${jr.status?.phase}: ${jr.status?.message}`);
      },
      60_000,
    );
    expect(done.status).toMatchObject({ replayed: 1, completed: 1, failedAgain: 0, pending: 0 });

    // `kubectl jobworker dlq replay`, the plugin itself: a JobReplay through the apiserver.
    const kubectl = kubectlWithPlugin(ns.kubeconfigPath);
    const on = ['-n', ns.namespace, '--as', 'dana', '--as-group', 'system:masters'];
    const replay = await kubectl(
      'jobworker',
      'dlq',
      'replay',
      'shipper',
      '--key',
      keys['lp-2']!,
      '--reason',
      'carrier fixed (INC-48)',
      '--wait-timeout',
      '60',
      '--json',
      ...on,
    );
    expect(replay.code, replay.stderr).toBe(0);
    // it ended, rather than timing out while the operator retries (exit 0 too)
    expect(JSON.parse(replay.stdout), replay.stderr).toMatchObject({
      phase: 'Succeeded',
      replayed: 1,
      completed: 1,
    });

    // `kubectl jobworker dlq discard`: the plugin connects itself, with the JobWorker's Secrets.
    const discardId = await idOf('lp-3');
    const discard = await kubectl(
      'jobworker',
      'dlq',
      'discard',
      'shipper',
      '--id',
      discardId,
      '--reason',
      'order cancelled by the customer',
      ...on,
    );
    expect(discard.code, discard.stderr).toBe(0);
    expect(discard.stdout).toContain('discarded 1 of 1 selected');

    // What the user relies on. The replayed dead letters ran once each, as did the retried job;
    // the discarded one never ran.
    for (const id of ['lp-1', 'lp-2']) expect(await h.effects(keys[id]), id).toBe(1);
    expect(await h.effects(retried)).toBe(1);
    expect(await h.effects(keys['lp-3'])).toBe(0);
    expect(await h.effects(keys['lp-4'])).toBe(0);
    expect((await quarantined()).rows.map((r) => [r.key, r.status])).toEqual(
      [
        [keys['lp-1'], 'replayed'],
        [keys['lp-2'], 'replayed'],
        [keys['lp-3'], 'discarded'],
        [keys['lp-4'], 'quarantined'],
      ].sort(),
    );
    const { rows: audit } = await h.db.pool.query<Record<string, string>>(
      'select dead_letter_id::text, action, initiator, reason, key from jobfleet_dead_letter_audit order by id',
    );
    expect(audit).toEqual([
      {
        dead_letter_id: await idOf('lp-1'),
        action: 'replayed',
        initiator: 'carol',
        reason: 'carrier fixed (INC-48)',
        key: keys['lp-1'],
      },
      {
        dead_letter_id: await idOf('lp-2'),
        action: 'replayed',
        initiator: 'dana',
        reason: 'carrier fixed (INC-48)',
        key: keys['lp-2'],
      },
      {
        dead_letter_id: discardId,
        action: 'discarded',
        initiator: 'dana',
        reason: 'order cancelled by the customer',
        key: keys['lp-3'],
      },
    ]);
    // The quarantine holds the one left alone, put back by each pass, and nothing else: the
    // discarded and the replayed copies are gone.
    const left = await h.drainQueue(`${QUEUE}.dlq`);
    expect(left.map((m) => m.properties.headers?.['x-jobfleet-key'])).toEqual([keys['lp-4']]);
  }, 180_000);

  it('without read on the quarantine (as the page once granted), a discard is refused saying what to grant, and nothing changes', async () => {
    const grant = documentedGrant();
    const withoutDlq = { ...grant, read: grant.read.replace('\\.dlq|', '') };
    expect(withoutDlq.read).not.toBe(grant.read);
    user = `jf-${randomBytes(3).toString('hex')}`;
    await h.rabbit.mgmt.request('PUT', `/users/${user}`, { password: 'pw-least', tags: '' });
    await h.rabbit.mgmt.request(
      'PUT',
      `/permissions/${encodeURIComponent(h.rabbit.vhost)}/${user}`,
      withoutDlq,
    );
    const url = new URL(h.rabbit.amqpUrl);
    url.username = user;
    url.password = 'pw-least';
    await h.startWorker({
      handlers: { ship: () => Promise.reject(new Permanent('carrier refused')) },
    });
    const { key } = await h.job('nd-1');
    await eventually('a dead letter', async () =>
      (await h.db.pool.query('select 1 from jobfleet_dead_letters')).rowCount === 1
        ? true
        : undefined,
    );
    const r = await jobfleet([
      'dlq',
      'discard',
      '--claims-url',
      h.db.url,
      '--amqp-url',
      url.toString(),
      '--queue',
      QUEUE,
      '--key',
      key,
      '--reason',
      'order cancelled',
    ]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(
      /^jobfleet dlq: RabbitMQ refused the discard \((read )?access to queue 'orders\.ship\.dlq' in vhost '[^']+' refused for user 'jf-\w+'\): a discard needs read permission on the dead-letter queue "orders\.ship\.dlq" and write on the default exchange \(amq\.default\); docs\/compatibility\.md#permissions has the grant\n$/,
    );
    expect(r.stderr).not.toContain('pw-least');
    const { rows } = await h.db.pool.query('select status from jobfleet_dead_letters');
    expect(rows).toEqual([{ status: 'quarantined' }]);
    expect((await h.db.pool.query('select 1 from jobfleet_dead_letter_audit')).rowCount).toBe(0);
    expect(await h.messages(`${QUEUE}.dlq`)).toBe(1);
  });
});
