// The operator's side of the quarantine, on the real kube-apiserver with real
// RabbitMQ and PostgreSQL: it reads each JobWorker's dead letters (status,
// DeadLettersOverdue, the age gauge) and drives a JobReplay resource to
// completion, writing progress to its status.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { KubeClient, resourcePath, type KubeObject } from '../../src/kube/client.js';
import type { Operator } from '../../src/operator.js';
import { ANNOTATION_PAUSE_BY, ANNOTATION_PAUSE_REASON } from '../../src/reconcile/rollout/pause.js';
import { Permanent, publish } from '../../worker/index.js';
import { jobfleet } from '../fixtures/jobfleet-cli.js';
import { kubectlWithPlugin } from '../fixtures/kubectl-plugin.js';
import { testOperator, urlSecrets } from '../fixtures/operator.js';
import { eventually } from '../ground/eventually.js';
import { useKube } from '../ground/index.js';
import { CONTRACT, QUEUE, harness, type Harness } from './worker-harness.js';

let h: Harness;
let ns: Awaited<ReturnType<typeof useKube>>;
let client: KubeClient;
let op: Operator | undefined;

beforeEach(async () => {
  h = await harness();
  ns = await useKube();
  client = new KubeClient(ns.kc);
});
afterEach(async () => {
  await op?.stop();
  op = undefined;
  await ns?.cleanup();
  await h?.cleanup();
});

type Status = Record<string, any>;
const get = (kind: 'JobWorker' | 'JobReplay', name: string) =>
  client.get<KubeObject & { status?: Status }>('jobfleet.dev/v1alpha1', kind, ns.namespace, name);
const condition = (o: { status?: Status }, type: string) =>
  (
    o.status?.conditions as
      Array<{ type: string; status: string; reason: string; message: string }> | undefined
  )?.find((c) => c.type === type);

/** The JobWorker `shipper` and the operator; with `scaling`, the JobWorker reads its queue's age too. */
async function setUp(scaling?: Record<string, unknown>): Promise<void> {
  await urlSecrets(client, ns.namespace, {
    rabbitmq: h.rabbit.amqpUrl,
    'rabbitmq-mgmt': h.rabbit.mgmtUrl,
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
          ...(scaling && { managementUrlSecretRef: { name: 'rabbitmq-mgmt', key: 'url' } }),
          queue: QUEUE,
        },
        claims: { urlSecretRef: { name: 'claims-db', key: 'url' } },
        contract: { idempotencyKey: CONTRACT.keyRule, schemaVersions: CONTRACT.schemaVersions },
        deadLetter: { owner: 'team-shipping', maxAgeSeconds: 60 },
        ...(scaling && { scaling }),
      },
    },
    'test-user',
  );
  op = await testOperator(client, ns.namespace, {
    deadLetterReadMs: 500,
    replayProgressMs: 100,
    ...(scaling && { pollMs: 1000 }),
  });
}

/** A worker whose handler rejects (Permanent) the orders in `broken`, as it is when asked. */
const failingWorker = (broken: Set<string>) =>
  h.startWorker({
    handlers: {
      ship: h.effectHandler((job) => {
        const id = (job.payload as { orderId: string }).orderId;
        if (broken.has(id)) throw new Permanent(`order ${id} rejected`);
      }),
    },
    config: { deadLetterOwner: 'team-shipping' },
  });

/** The JobReplay `after-fix` of the permanent failures, at `ratePerSecond`. */
const replayAfterFix = (ratePerSecond: number, reason: string) =>
  client.apply(
    {
      apiVersion: 'jobfleet.dev/v1alpha1',
      kind: 'JobReplay',
      metadata: { name: 'after-fix', namespace: ns.namespace },
      spec: {
        jobWorker: 'shipper',
        selector: { failureClass: 'permanent' },
        ratePerSecond,
        burst: 1,
        initiator: 'carol',
        reason,
      },
    },
    'test-user',
  );

/** Waits until `n` dead letters are recorded. */
const deadLetters = (n: number) =>
  eventually(`${n} dead letter${n === 1 ? '' : 's'}`, async () =>
    (await h.db.pool.query('select 1 from jobfleet_dead_letters')).rowCount === n
      ? true
      : undefined,
  );

/** The dead letters are minutes old: no failure still arriving holds a replay. */
const incidentOver = () =>
  h.db.pool.query(
    `update jobfleet_dead_letters set dead_lettered_at = now() - interval '3 minutes'`,
  );

/** `kubectl jobworker dlq replay shipper` of the permanent failures, with `args` (--reason, …). */
const replayByPlugin = (kubectl: ReturnType<typeof kubectlWithPlugin>, ...args: string[]) =>
  kubectl(
    'jobworker',
    'dlq',
    'replay',
    'shipper',
    '-n',
    ns.namespace,
    '--class',
    'permanent',
    ...args,
  );

/** `kubectl jobworker pause shipper --reason <reason>`, with `args` (--as, …). */
const pauseByPlugin = (
  kubectl: ReturnType<typeof kubectlWithPlugin>,
  reason: string,
  ...args: string[]
) => kubectl('jobworker', 'pause', 'shipper', '-n', ns.namespace, '--reason', reason, ...args);

async function gauge(name: string): Promise<number | undefined> {
  const m = (await op!.metrics.registry.getSingleMetric(name)?.get()) as
    { values: Array<{ value: number; labels: Record<string, unknown> }> } | undefined;
  return m?.values.find(
    (v) => v.labels.jobworker === 'shipper' && v.labels.namespace === ns.namespace,
  )?.value;
}

describe('the quarantine, seen by the operator', () => {
  it('reports dead letters in status, turns DeadLettersOverdue past maxAge, and exports their age', async () => {
    const broken = new Set(['q-1', 'q-2', 'q-3']);
    await failingWorker(broken);
    for (const id of broken) await h.job(id);
    await setUp();
    const within = await eventually('3 dead letters in status', async () => {
      const jw = await get('JobWorker', 'shipper');
      return jw.status?.deadLetters?.quarantined === 3 ? jw : undefined;
    });
    expect(within.status?.deadLetters).toMatchObject({ owner: 'team-shipping', quarantined: 3 });
    expect(condition(within, 'DeadLettersOverdue')).toMatchObject({
      status: 'False',
      reason: 'WithinMaxAge',
    });
    expect(await gauge('jobfleet_dead_letters_quarantined')).toBe(3);

    // Two minutes old now, past maxAgeSeconds 60.
    await h.db.pool.query(
      `update jobfleet_dead_letters set dead_lettered_at = now() - interval '2 minutes'`,
    );
    const overdue = await eventually('DeadLettersOverdue', async () => {
      const jw = await get('JobWorker', 'shipper');
      return condition(jw, 'DeadLettersOverdue')?.status === 'True' ? jw : undefined;
    });
    expect(condition(overdue, 'DeadLettersOverdue')).toMatchObject({
      reason: 'OldestDeadLetterOverdue',
      message: expect.stringContaining(
        'Owner team-shipping: `jobfleet dlq list --queue orders.ship`',
      ),
    });
    expect(await gauge('jobfleet_dead_letter_oldest_age_seconds')).toBeGreaterThanOrEqual(120);
    expect(await gauge('jobfleet_dead_letter_max_age_seconds')).toBe(60);

    // The fix ships; a JobReplay brings the three back.
    broken.clear();
    await replayAfterFix(2, 'carrier fixed the rejection (INC-9)');
    const seen: string[] = [];
    const done = await eventually(
      'the JobReplay to succeed',
      async () => {
        const jr = await get('JobReplay', 'after-fix');
        const s = jr.status ?? {};
        const line = `${s.phase}:${s.replayed ?? 0}`;
        if (s.phase && seen.at(-1) !== line) seen.push(line);
        return s.phase === 'Succeeded' ? jr : undefined;
      },
      60_000,
      50,
    );
    expect(done.status).toMatchObject({
      selected: 3,
      replayed: 3,
      completed: 3,
      failedAgain: 0,
      pending: 0,
    });
    expect(done.status?.message).toContain('replayed 3 of 3 selected');
    // Progress was written while it ran, not only at the end.
    expect(seen.filter((l) => l.startsWith('Running:')).length).toBeGreaterThanOrEqual(2);
    expect(await h.effects()).toBe(3);
    const { rows } = await h.db.pool.query(
      'select distinct initiator, reason, replay_id from jobfleet_dead_letter_audit',
    );
    expect(rows).toEqual([
      {
        initiator: 'carol',
        reason: 'carrier fixed the rejection (INC-9)',
        replay_id: done.metadata.uid,
      },
    ]);

    const empty = await eventually('the quarantine empty', async () => {
      const jw = await get('JobWorker', 'shipper');
      return condition(jw, 'DeadLettersOverdue')?.reason === 'Empty' ? jw : undefined;
    });
    expect(empty.status?.deadLetters?.quarantined).toBe(0);
    expect(await gauge('jobfleet_dead_letter_oldest_age_seconds')).toBe(0);
    expect((await jobfleet(['verify', '--claims-url', h.db.url])).code).toBe(0);
  });

  it('a JobReplay waits while failures still arrive, starts when they stop, and pauses while the oldest message is past the objective', async () => {
    const broken = new Set(Array.from({ length: 10 }, (_, i) => `r-${i}`));
    const worker = await failingWorker(broken);
    for (const id of broken) await h.job(id);
    await setUp({ minReplicas: 1, maxReplicas: 1, targetOldestAgeSeconds: 5 });
    const quarantined = async () =>
      (
        await h.db.pool.query<{ n: number }>(
          "select count(*)::int as n from jobfleet_dead_letters where status = 'quarantined'",
        )
      ).rows[0]!.n;
    await eventually('10 dead letters', async () =>
      (await quarantined()) === 10 ? true : undefined,
    );
    const audited = async (from?: Date, to?: Date) =>
      (
        await h.db.pool.query<{ n: number }>(
          'select count(*)::int as n from jobfleet_dead_letter_audit where ($1::timestamptz is null or at >= $1) and ($2::timestamptz is null or at <= $2)',
          [from ?? null, to ?? null],
        )
      ).rows[0]!.n;

    // A settled fleet (a replay waits while a rollout is in progress, the first one too).
    await eventually('the JobWorker settled', async () =>
      (await get('JobWorker', 'shipper')).status?.phase === 'Healthy' ? true : undefined,
    );
    // The failures are minutes old at most: the incident may still be on. Slow enough (100 s for
    // the ten) that the queue backs up below while most are still to replay, on a loaded machine too.
    await replayAfterFix(0.1, 'carrier fixed the rejection (INC-10)');
    const jr = () => get('JobReplay', 'after-fix');
    const held = await eventually('Held while the failures still arrive', async () => {
      const x = await jr();
      return x.status?.phase === 'Held' ? x : undefined;
    });
    expect(held.status).toMatchObject({ heldReason: 'FailuresStillArriving' });
    expect(held.status?.message).toMatch(
      /10 dead letters of class permanent arrived in the last 2 minutes/,
    );
    expect(await audited()).toBe(0); // nothing replayed
    const events = async (reason: string) =>
      (
        await client.list<KubeObject & { reason?: string; message?: string }>(
          'v1',
          'Event',
          ns.namespace,
        )
      ).items.filter((e) => e.reason === reason);
    await eventually('a ReplayHeld event', async () =>
      (await events('ReplayHeld')).length ? true : undefined,
    );

    // The fix is in and no failure has arrived for longer than the window: it starts by itself.
    broken.clear();
    await incidentOver();
    await eventually(
      'replaying',
      async () => {
        const x = await jr();
        return x.status?.phase === 'Running' && (x.status.replayed ?? 0) >= 1 ? true : undefined;
      },
      30_000,
    );

    // Mid-replay the workers stop and the queue backs up: the oldest message passes the objective.
    await worker.stop();
    await publish(
      h.ch,
      QUEUE,
      { type: 'ship', schemaVersion: 1, payload: { orderId: 'late' }, keyRule: CONTRACT.keyRule },
      () => Date.now() - 60_000,
    );
    const paused = await eventually(
      'Held while the oldest message is past the objective',
      async () => {
        const x = await jr();
        if (x.status?.phase === 'Held' && x.status.heldReason === 'AgeOverObjective') return x;
        // what it is instead, for the timeout's message
        const w = await get('JobWorker', 'shipper');
        const age = condition(w, 'AgeObjectiveMet');
        throw new Error(
          `JobReplay ${x.status?.phase}/${x.status?.heldReason} replayed ${x.status?.replayed}; JobWorker ${w.status?.phase}, AgeObjectiveMet ${age?.status} (${age?.message})`,
        );
      },
      70_000,
      50,
    );
    const heldAt = new Date();
    expect(paused.status?.replayed).toBeLessThan(10);
    // Still held a few hold checks later, and nothing was replayed in between.
    const stillHeld = await eventually(
      'held across several checks',
      async () => {
        const x = await jr();
        return Date.now() - heldAt.getTime() > 6000 ? x : undefined;
      },
      20_000,
      500,
    );
    expect(stillHeld.status).toMatchObject({ phase: 'Held', heldReason: 'AgeOverObjective' });
    expect(await audited(heldAt, new Date())).toBe(0);

    // The workers come back and drain the queue: the replay goes on by itself and completes.
    await failingWorker(broken);
    const done = await eventually(
      'the JobReplay to succeed',
      async () => {
        const x = await jr();
        return x.status?.phase === 'Succeeded' ? x : undefined;
      },
      120_000,
    );
    expect(done.status).toMatchObject({ replayed: 10, completed: 10, failedAgain: 0 });
    expect(done.status?.heldReason).toBeUndefined();
    expect((await events('ReplayResumed')).length).toBeGreaterThanOrEqual(2);
    for (let i = 0; i < 10; i++) expect(await h.effects(`order:r-${i}:ship`)).toBe(1);
  }, 240_000);

  it('kubectl jobworker dlq: the real kubectl finds the plugin; list and replay ask the operator (a JobReplay), show reads the Secrets; a replay holds while the JobWorker is paused', async () => {
    await h.startWorker({
      handlers: { ship: () => Promise.reject(new Permanent('rejected for good')) },
    });
    const { key } = await h.job('k-1');
    await setUp();
    await deadLetters(1);
    const kubectl = kubectlWithPlugin(ns.kubeconfigPath);
    const list = await kubectl('jobworker', 'dlq', 'list', 'shipper', '-n', ns.namespace, '--json');
    const rows = (JSON.parse(list.stdout) as { rows: Array<{ id: number; key: string }> }).rows;
    expect(rows.map((r) => r.key)).toEqual([key]);
    const show = await kubectl(
      'jobworker',
      'dlq',
      'show',
      'shipper',
      String(rows[0]!.id),
      '-n',
      ns.namespace,
    );
    expect(show.stdout).toMatch(/reason\s+Permanent: rejected for good/);
    expect(show.stdout).not.toContain('postgres://'); // URLs never printed
    const missing = await kubectl('jobworker', 'dlq', 'list', 'nobody', '-n', ns.namespace);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`JobWorker ${ns.namespace}/nobody does not exist`);

    // A replay through the plugin holds on the JobWorker's status too: here, paused.
    await incidentOver();
    const pause = await pauseByPlugin(kubectl, 'INC-11');
    expect(pause.code, pause.stderr).toBe(0);
    await eventually('the JobWorker Paused', async () =>
      (await get('JobWorker', 'shipper')).status?.phase === 'Paused' ? true : undefined,
    );
    const held = await replayByPlugin(kubectl, '--reason', 'retry', '--hold-timeout', '1');
    expect(held.stderr).toContain('held (TargetPaused): JobWorker shipper is paused');
    expect(held.code).toBe(3);
    expect((await h.db.pool.query('select 1 from jobfleet_dead_letter_audit')).rowCount).toBe(0);
  });

  it('kubectl jobworker dlq replay goes no faster than the downstream budget lets the fleet complete, and says so', async () => {
    const broken = new Set(Array.from({ length: 6 }, (_, i) => `c-${i}`));
    await failingWorker(broken);
    for (const id of broken) await h.job(id);
    await setUp();
    await deadLetters(6);
    broken.clear(); // the carrier is fixed; the incident is over
    await incidentOver();
    // A budget of 8 in flight at prefetch 8 is one replica; the operator measured 2 jobs/s per
    // replica (set here as its status would say: this JobWorker reads no worker figures).
    const path = resourcePath('jobfleet.dev/v1alpha1', 'JobWorker', ns.namespace, 'shipper');
    const merge = 'application/merge-patch+json';
    await client.request(
      'PATCH',
      path,
      { spec: { scaling: { downstream: { maxConcurrency: 8 } } } },
      merge,
    );
    await client.request('PATCH', `${path}/status`, { status: { capacityPerReplica: 2 } }, merge);
    await eventually('the JobWorker settled (no rollout to wait for)', async () => {
      const jw = await get('JobWorker', 'shipper');
      return jw.status?.phase === 'Healthy' && jw.status?.capacityPerReplica === 2
        ? true
        : undefined;
    });
    const kubectl = kubectlWithPlugin(ns.kubeconfigPath);
    const r = await replayByPlugin(
      kubectl,
      '--reason',
      'carrier fixed',
      '--rate',
      '50',
      '--burst',
      '1',
      '--max-count',
      '6',
      '--wait',
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(
      'Replaying at 50/s capped at 2/s: the downstream budget (maxConcurrency 8) lets 1 replicas of 2 jobs/s each complete no more',
    );
    const { rows } = await h.db.pool.query<{ span: number; n: number }>(
      `select extract(epoch from max(at) - min(at))::float8 as span, count(*)::int as n
       from jobfleet_dead_letter_audit where action = 'replayed'`,
    );
    // 6 at 2/s with a burst of 1: 5 gaps of 500 ms (at 50/s they would take 0.1 s).
    expect(rows[0]!.n).toBe(6);
    expect(rows[0]!.span).toBeGreaterThanOrEqual(2.2);
    await eventually('every replayed job completed', async () =>
      (await h.effects()) === 6 ? true : undefined,
    );
  });

  it('the audit names the user the apiserver authenticated (two users, each through --as), never a typed name', async () => {
    const broken = new Set(['u-0', 'u-1']);
    await failingWorker(broken);
    const keys = [(await h.job('u-0')).key, (await h.job('u-1')).key];
    await setUp();
    await deadLetters(2);
    broken.clear();
    await incidentOver();
    const kubectl = kubectlWithPlugin(ns.kubeconfigPath);
    const as = (user: string) => ['--as', user, '--as-group', 'system:masters'];
    const alice = await replayByPlugin(
      kubectl,
      '--key',
      keys[0]!,
      '--reason',
      'carrier fixed',
      '--initiator',
      'mallory', // typed: kept beside the reason, not recorded as who
      '--wait',
      ...as('alice'),
    );
    expect(alice.code, alice.stderr).toBe(0);
    const bob = await replayByPlugin(
      kubectl,
      '--key',
      keys[1]!,
      '--reason',
      'carrier fixed',
      '--wait',
      ...as('bob'),
    );
    expect(bob.code, bob.stderr).toBe(0);
    const { rows } = await h.db.pool.query<{ initiator: string; reason: string; key: string }>(
      `select initiator, reason, key from jobfleet_dead_letter_audit where action = 'replayed' order by id`,
    );
    expect(rows).toEqual([
      { initiator: 'alice', reason: 'carrier fixed (initiator given as mallory)', key: keys[0] },
      { initiator: 'bob', reason: 'carrier fixed', key: keys[1] },
    ]);
    // pause records its user the same way
    const pause = await pauseByPlugin(kubectl, 'INC-12', ...as('carol'));
    expect(pause.code, pause.stderr).toBe(0);
    expect((await get('JobWorker', 'shipper')).metadata.annotations).toMatchObject({
      [ANNOTATION_PAUSE_BY]: 'carol',
      [ANNOTATION_PAUSE_REASON]: 'INC-12',
    });
  });

  it('a JobReplay naming a missing JobWorker waits in Pending and says what to fix', async () => {
    await setUp();
    await client.apply(
      {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobReplay',
        metadata: { name: 'typo', namespace: ns.namespace },
        spec: {
          jobWorker: 'shiper',
          selector: { failureClass: 'permanent' },
          initiator: 'dan',
          reason: 'retry',
        },
      },
      'test-user',
    );
    const jr = await eventually('Pending with a message', async () => {
      const r = await get('JobReplay', 'typo');
      return r.status?.phase === 'Pending' ? r : undefined;
    });
    expect(jr.status?.message).toBe(
      `JobWorker ${ns.namespace}/shiper does not exist: fix spec.jobWorker.`,
    );
  });

  it('the apiserver refuses a JobReplay without a selection (a dry run may have none, listing at most 500), and changes to one', async () => {
    const bad = client.apply(
      {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobReplay',
        metadata: { name: 'everything', namespace: ns.namespace },
        spec: { jobWorker: 'shipper', selector: {}, initiator: 'dan', reason: 'retry all' },
      },
      'test-user',
    );
    await expect(bad).rejects.toThrow(/select something: ids, keys, reasonContains/);
    // a dry run may list everything, a bounded number at a time
    const dryRun = (name: string, maxCount: number) =>
      client.apply(
        {
          apiVersion: 'jobfleet.dev/v1alpha1',
          kind: 'JobReplay',
          metadata: { name, namespace: ns.namespace },
          spec: {
            jobWorker: 'shipper',
            selector: {},
            dryRun: true,
            maxCount,
            initiator: 'dan',
            reason: 'look',
          },
        },
        'test-user',
      );
    await dryRun('look', 500);
    await expect(dryRun('look-more', 501)).rejects.toThrow(
      /spec\.maxCount: Invalid value.*a dry run lists at most 500 entries: lower maxCount/,
    );
    await client.apply(
      {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobReplay',
        metadata: { name: 'one', namespace: ns.namespace },
        spec: {
          jobWorker: 'shipper',
          selector: { ids: [1] },
          initiator: 'dan',
          reason: 'retry one',
        },
      },
      'test-user',
    );
    await expect(
      client.apply(
        {
          apiVersion: 'jobfleet.dev/v1alpha1',
          kind: 'JobReplay',
          metadata: { name: 'one', namespace: ns.namespace },
          spec: {
            jobWorker: 'shipper',
            selector: { ids: [2] },
            initiator: 'dan',
            reason: 'retry one',
          },
        },
        'test-user',
      ),
    ).rejects.toThrow(/a JobReplay cannot be changed/);
  });
});
