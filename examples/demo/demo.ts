// `make demo`: the main job, end to end, on this machine. A real
// kube-apiserver (the test ground's control plane), the CRDs, the operator,
// the example JobWorker, real worker processes (the local runner stands in
// for the kubelet), real RabbitMQ and PostgreSQL. A burst of orders makes the
// fleet scale up on queue age — capped by the carrier's budget — and back
// down; then a drain-first rollback; then a blocked idempotency-key change;
// then two Cohort rollouts: one promoted step by step, one aborted.
// It ends by itself with a summary and cleans up after itself.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import pino from 'pino';
import { parse } from 'yaml';
import type { JobWorkerSpecInput, JobWorkerStatus } from '../../src/api/jobworker.js';
import { KubeClient, type KubeObject } from '../../src/kube/client.js';
import { startOperator } from '../../src/operator.js';
import { repoRoot, startControlPlane } from '../../test/ground/control-plane.js';
import { createNamespace, installCrds } from '../../test/ground/kube.js';
import { LocalRunner } from '../../test/ground/local-runner.js';
import { createSchema } from '../../test/ground/postgres.js';
import { createVhost } from '../../test/ground/rabbit.js';
import { findServices } from '../../test/ground/services.js';
import { produce } from '../worker/producer.js';

const started = Date.now();
const t = () => `${((Date.now() - started) / 1000).toFixed(0).padStart(4)}s`;
const say = (msg: string) => console.log(`${t()}  ${msg}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const NAME = 'order-shipper';
const QUEUE = 'orders.ship';

type Jw = KubeObject & { spec: JobWorkerSpecInput; status?: JobWorkerStatus };
type EnvVar = { name: string; value: string };

/** The worker container's env (the template's container named `worker`, which the manifest has). */
function workerEnv(s: JobWorkerSpecInput): EnvVar[] {
  const c = s.template?.spec?.containers?.find((x) => x.name === 'worker');
  if (!c)
    throw new Error('examples/demo/jobworker.yaml: spec.template needs the container `worker`');
  return (c.env ?? []) as EnvVar[];
}

/** A revision's change: the worker container's env, the rest of the template kept. */
function setWorkerEnv(s: JobWorkerSpecInput, env: EnvVar[]): void {
  workerEnv(s);
  const spec = s.template!.spec!;
  spec.containers = spec.containers!.map((c) => (c.name === 'worker' ? { ...c, env } : c));
}

async function main(): Promise<number> {
  const services = await findServices(process.env, { containers: false });
  const missing = Object.values(services.missing);
  if (missing.length) {
    for (const m of missing) console.error(`make demo: ${m}`);
    return 1;
  }
  say('starting the control plane (etcd, kube-apiserver, controller manager, scheduler, kwok)…');
  const plane = await startControlPlane({ beforeControllers: installCrds });
  const cleanups: Array<() => Promise<unknown>> = [() => plane.stop()];
  try {
    await installCrds(plane.kubeconfigPath);
    const ns = await createNamespace(plane.kubeconfigPath);
    const client = new KubeClient(ns.kc);
    const rabbit = await createVhost(services.urls.amqpUrl, services.urls.rabbitMgmtUrl);
    cleanups.unshift(() => rabbit.cleanup());
    const db = await createSchema(services.urls.pgUrl);
    cleanups.unshift(() => db.cleanup());
    say(
      `namespace ${ns.namespace}, RabbitMQ vhost ${rabbit.vhost}, PostgreSQL schema ${db.schema}`,
    );

    for (const [name, url] of [
      ['rabbitmq', rabbit.amqpUrl],
      ['rabbitmq-management', rabbit.mgmtUrl],
      ['claims-db', db.url],
    ] as const)
      await client.apply(
        {
          apiVersion: 'v1',
          kind: 'Secret',
          metadata: { name, namespace: ns.namespace },
          stringData: { url },
        },
        'demo',
      );

    const op = await startOperator({
      client,
      namespaces: [ns.namespace],
      identity: 'demo-operator',
      lease: { namespace: ns.namespace, name: 'jobfleet-operator', leaseDurationSeconds: 5 },
      port: 0,
      pollMs: 1000,
      log: pino({ level: process.env.LOG_LEVEL ?? 'silent' }),
    });
    cleanups.unshift(() => op.stop());
    const runner = new LocalRunner({
      client,
      namespace: ns.namespace,
      nodeName: 'demo-runner',
      command: () => [process.execPath, '--import', 'tsx', 'examples/worker/worker.ts'],
    });
    await runner.start();
    cleanups.unshift(() => runner.stop(3000));
    say('operator and local runner started; applying examples/demo/jobworker.yaml');

    const manifest = parse(
      readFileSync(path.join(repoRoot, 'examples/demo/jobworker.yaml'), 'utf8'),
    ) as Jw;
    const apply = (spec: JobWorkerSpecInput) =>
      client.apply(
        {
          apiVersion: manifest.apiVersion,
          kind: 'JobWorker',
          metadata: { name: NAME, namespace: ns.namespace },
          spec,
        },
        'demo-user',
      );
    const get = () => client.get<Jw>('jobfleet.dev/v1alpha1', 'JobWorker', ns.namespace, NAME);
    const cond = (jw: Jw, type: string) =>
      (jw.status?.conditions as Array<Record<string, string>> | undefined)?.find(
        (c) => c.type === type,
      );
    const until = async (what: string, ok: (jw: Jw) => boolean, timeoutMs = 90_000) => {
      const end = Date.now() + timeoutMs;
      for (;;) {
        const jw = await get();
        if (ok(jw)) return jw;
        if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
        await sleep(250);
      }
    };
    await apply(manifest.spec);
    await until(
      'the first worker',
      (jw) => (jw.status?.readyReplicas ?? 0) >= 1 && jw.status?.currentRevision === '1',
    );
    say('revision 1 is running (1 worker process)');

    // --- 1. scaling on queue age, capped by downstream capacity ---------------------------------
    say('publishing a burst of 1500 orders; each carrier call takes 200 ms');
    await produce({ brokerUrl: rabbit.amqpUrl, queue: QUEUE, count: 1500 });
    console.log(
      '\n  time  oldest age  age from            depth  desired  ready  limited by      phase',
    );
    const ageSources = new Set<string>();
    let peak = 0;
    const limits = new Set<string>();
    let lastRow = '';
    const end = Date.now() + 150_000;
    let sawEmpty = false;
    while (Date.now() < end) {
      const st: JobWorkerStatus = (await get()).status ?? {};
      peak = Math.max(peak, st.desiredReplicas ?? 0);
      if (st.scaling?.limitedBy) limits.add(st.scaling.limitedBy);
      if (st.ageSource) ageSources.add(st.ageSource);
      const row = `${String(st.oldestMessageAgeSeconds ?? '-').padStart(9)} s  ${(st.ageSource ?? '-').padEnd(18)}  ${String(st.queueDepth ?? '-').padStart(5)}  ${String(st.desiredReplicas ?? '-').padStart(7)}  ${String(st.readyReplicas ?? '-').padStart(5)}  ${(st.scaling?.limitedBy ?? '-').padEnd(14)}  ${st.phase ?? '-'}`;
      if (row !== lastRow) console.log(`${t()}  ${row}`);
      lastRow = row;
      if (st.queueDepth === 0) sawEmpty = true;
      if (sawEmpty && st.desiredReplicas === 1 && st.readyReplicas === 1 && peak > 1) break;
      await sleep(1000);
    }
    console.log('');
    say(
      `scaled from 1 up to ${peak} workers and back to 1 on a quorum queue's age (from ${[...ageSources].join(', ')}); limited by: ${[...limits].join(', ')}`,
    );

    // --- 2. a drain-first rollback ------------------------------------------------------------------
    // Revision 2 ships a regression: each carrier call now takes 8 s.
    const v2 = structuredClone(manifest.spec);
    v2.image = 'registry.example.com/shipping/order-worker:1.1.0';
    setWorkerEnv(v2, [{ name: 'CARRIER_LATENCY_MS', value: '8000' }]);
    await apply(v2);
    await until(
      'revision 2',
      (jw) => jw.status?.currentRevision === '2' && cond(jw, 'Progressing')?.status === 'False',
    );
    say('revision 2 (order-worker:1.1.0, 8 s per carrier call) rolled out; orders keep coming');
    const flowing = produce({
      brokerUrl: rabbit.amqpUrl,
      queue: QUEUE,
      count: 300,
      ratePerSecond: 30,
      prefix: 'rb',
    });
    await sleep(3000); // revision 2's workers are mid-call now
    say('rolling back to revision 1: its calls outlive the 5 s drain deadline');
    const rollbackAt = Date.now();
    await apply(manifest.spec);
    let lastStep = '';
    const done = await until(
      'the rollback',
      (jw) => {
        const r = jw.status?.rollout;
        const step = r?.phase;
        if (r && step && step !== lastStep) {
          say(
            step === 'Draining'
              ? `rollback step 1, Draining: revision ${r.from} stops consuming, deadline ${r.drainDeadline}`
              : step === 'Restoring'
                ? `rollback step 2→3, Restoring revision ${r.to} (drain ended: ${r.drainEndedBy})`
                : `rollback step 4, Verifying that queue age falls (${r.ageAtRestore ?? 0} s at restore)`,
          );
          lastStep = step;
        }
        return cond(jw, 'Progressing')?.reason === 'RollbackComplete';
      },
      120_000,
    );
    const rollbackSeconds = (Date.now() - rollbackAt) / 1000;
    say(`RollbackComplete: ${done.status?.lastRollback?.message}`);
    const ev = runner.events.filter((e) => e.at >= rollbackAt);
    const lastOld = Math.max(
      ...ev.filter((e) => e.revision === '2' && e.kind === 'exited').map((e) => e.at),
    );
    const firstNew = Math.min(
      ...ev.filter((e) => e.revision === '1' && e.kind === 'seen').map((e) => e.at),
    );
    const ordered = lastOld < firstNew;
    say(
      `order check: last revision-2 worker exited ${((firstNew - lastOld) / 1000).toFixed(1)} s before the first restored revision-1 pod appeared: ${ordered ? 'drain first, as promised' : 'ORDER VIOLATED'}`,
    );

    await flowing;

    // --- 3. an incompatible change, blocked -----------------------------------------------------
    const badKey = structuredClone(manifest.spec);
    badKey.contract.idempotencyKey = 'order:{orderId}:ship:v2';
    await apply(badKey);
    const blocked = await until('the block', (jw) => cond(jw, 'RolloutBlocked')?.status === 'True');
    say(`changed the idempotency-key rule → phase ${blocked.status?.phase}:`);
    console.log(
      `        ${cond(blocked, 'RolloutBlocked')?.reason}: ${cond(blocked, 'RolloutBlocked')?.message}`,
    );
    await apply(manifest.spec);
    await until('unblocked', (jw) => cond(jw, 'RolloutBlocked')?.status === 'False');
    say('restored the rule → unblocked; revision 1 kept consuming throughout');

    // --- 4. Cohort rollouts: one promoted, one aborted -------------------------------------------
    const cohortSpec = (image: string, env: Array<{ name: string; value: string }> = []) => {
      const s = structuredClone(manifest.spec);
      s.image = image;
      setWorkerEnv(s, [...workerEnv(s), ...env]);
      s.rollout = {
        ...s.rollout,
        strategy: 'Cohort',
        steps: [
          { cohort: { replicas: 1, prefetch: 2 }, analysisSeconds: 10 },
          { cohort: { percent: 50 }, analysisSeconds: 10 },
          { cohort: { percent: 100 }, analysisSeconds: 10 },
        ],
        cohortChecks: { minJobs: 30 },
      };
      return s;
    };
    const cohortRollout = async (spec: JobWorkerSpecInput, label: string, count: number) => {
      const before = (await get()).status?.lastCohort?.finishedAt;
      const orders = produce({
        brokerUrl: rabbit.amqpUrl,
        queue: QUEUE,
        count,
        ratePerSecond: 30,
        prefix: label,
      });
      const appliedAt = Date.now();
      await apply(spec);
      let last = '';
      const jw = await until(
        `the ${label} cohort rollout`,
        (j) => {
          const c = j.status?.cohort;
          const here = c ? `${c.step}/${c.steps} ${c.phase}` : '';
          if (c && here !== last) {
            say(
              `cohort step ${c.step} of ${c.steps}, ${c.phase}: revision ${c.revision} on ${c.replicas} cohort replicas, revision ${c.stable} on ${c.stableReplicas}`,
            );
            last = here;
          }
          const done = j.status?.lastCohort;
          return !!done && done.finishedAt !== before;
        },
        180_000,
      );
      const seconds = (Date.now() - appliedAt) / 1000;
      await orders;
      say(`${jw.status?.lastCohort?.result}: ${jw.status?.lastCohort?.message}`);
      return { ...jw.status!.lastCohort!, seconds };
    };
    say(
      'Cohort rollout of order-worker:1.2.0: a small cohort first, grown while it does as well as the stable revision',
    );
    const promoted = await cohortRollout(
      cohortSpec('registry.example.com/shipping/order-worker:1.2.0'),
      'c1',
      1800,
    );
    say('Cohort rollout of order-worker:1.3.0, whose carrier refuses one order in ten');
    const aborted = await cohortRollout(
      cohortSpec('registry.example.com/shipping/order-worker:1.3.0', [
        { name: 'CARRIER_REJECT_EVERY', value: '10' },
      ]),
      'c2',
      // enough orders through the cohort in a step for one in ten to be told from chance
      1500,
    );

    const { rows } = await db.pool.query<{ n: number }>(
      `select count(*)::int as n from jobfleet_claims where state = 'completed'`,
    );
    console.log(`
Summary
  jobs completed            ${rows[0]?.n ?? 0} (each once: one completed claim per key)
  scaling                   1 → ${peak} → 1 workers on a quorum queue's age (${[...ageSources].join(', ')}); limited by ${[...limits].join(', ')}
  rollback                  2 → 1, drain first (${ordered ? 'order held' : 'ORDER VIOLATED'}), ${done.status?.lastRollback?.result} in ${rollbackSeconds.toFixed(0)} s
  blocked change            ${cond(blocked, 'RolloutBlocked')?.reason}
  cohort rollout            1.2.0 (revision ${promoted.revision}) ${promoted.result} through 3 steps in ${promoted.seconds.toFixed(0)} s
  cohort rollout            1.3.0 (revision ${aborted.revision}) ${aborted.result} on ${aborted.check ?? '?'}, cohort drained first, in ${aborted.seconds.toFixed(0)} s
  wall time                 ${((Date.now() - started) / 1000).toFixed(0)} s
`);
    return ordered &&
      peak > 1 &&
      ageSources.has('DeliveryTimestamps') &&
      promoted.result === 'Promoted' &&
      aborted.result === 'Aborted'
      ? 0
      : 1;
  } finally {
    say('cleaning up (workers, operator, queues, schema, control plane)…');
    for (const c of cleanups) await c().catch(() => undefined);
    await services.stop();
  }
}

process.exitCode = await main().catch((err: Error) => {
  console.error(`make demo failed: ${err.message}`);
  return 1;
});
