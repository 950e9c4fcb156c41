// The delivery limit under stress: 1,000 jobs on a quorum queue drain through
// worker processes while the claims database flaps 30 times (cut and restored
// through a TCP proxy) and workers are SIGKILLed 25 times. Every job must end
// exactly once, completed or in our quarantine; the broker drops none (on
// RabbitMQ 4 it would drop a message returned 20 times without a dead-letter
// target); `jobfleet verify` passes; and the broker's count of returns per
// delivery stays below the limit.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { publish } from '../../worker/index.js';
import { DELIVERY_LIMIT, topology } from '../../worker/topology.js';
import { jobfleet } from '../fixtures/jobfleet-cli.js';
import { spawnEffectWorker, type WorkerProcess } from '../fixtures/spawn-effect-worker.js';
import { eventually } from '../ground/eventually.js';
import { prng } from '../ground/prng.js';
import { startTcpProxy, viaProxy, type TcpProxy } from '../ground/tcp-proxy.js';
import { CONTRACT, harness, type Harness } from './worker-harness.js';

let h: Harness;
let proxy: TcpProxy | undefined;
const workers = new Set<WorkerProcess>();
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  for (const w of workers) w.proc.kill('SIGKILL');
  workers.clear();
  await proxy?.close();
  await h?.cleanup();
});

const JOBS = 1000;
const FLAPS = 30;
const CRASHES = 25;
const MAX_ATTEMPTS = 10;

describe('1,000 jobs on a quorum queue, 30 claim-store flaps and 25 worker crashes', () => {
  it('every job ends exactly once, completed or quarantined; none dropped by the broker; verify passes', async () => {
    const queue = 'soak.q';
    const t = topology({
      queue,
      deadLetterQueue: `${queue}.dlq`,
      queueType: 'quorum',
      initialDelaySeconds: 1,
      maxDelaySeconds: 4,
    });
    await h.ch.assertQueue(t.work.name, t.work.options);
    await h.db.pool.query(
      'create table deliveries (key text, outcome text not null, returns int not null)',
    );
    const pgUrl = new URL(h.db.url);
    proxy = await startTcpProxy(pgUrl.hostname, Number(pgUrl.port || 5432));
    const env = {
      JOBFLEET_QUEUE: queue,
      JOBFLEET_QUEUE_TYPE: 'quorum',
      JOBFLEET_BROKER_URL: h.rabbit.amqpUrl,
      JOBFLEET_CLAIMS_URL: viaProxy(h.db.url, proxy),
      // the handler's effects and the test's records go around the proxy
      JOBFLEET_TEST_EFFECTS_URL: h.db.url,
      JOBFLEET_TEST_RECORD_DELIVERIES: '1',
      JOBFLEET_TEST_HANDLER_MS: '1000',
      JOBFLEET_PREFETCH: '8',
      JOBFLEET_LEASE_SECONDS: '5',
      JOBFLEET_MAX_ATTEMPTS: String(MAX_ATTEMPTS),
      JOBFLEET_INITIAL_DELAY_SECONDS: '1',
      JOBFLEET_MAX_DELAY_SECONDS: '4',
    };
    const start = async () => {
      const w = await spawnEffectWorker(env);
      workers.add(w);
      void w.exited.then(() => workers.delete(w));
      return w;
    };
    for (let i = 0; i < 3; i++) await start();

    const keys: string[] = [];
    for (let i = 0; i < JOBS; i++)
      keys.push(
        (
          await publish(h.ch, queue, {
            type: 'ship',
            schemaVersion: 1,
            payload: { orderId: `s-${i}` },
            keyRule: CONTRACT.keyRule,
          })
        ).key,
      );

    // 55 events in a seeded order, one every 200 ms: the drain (24 jobs/s at best) takes longer.
    const random = prng(Number(process.env.JOBFLEET_TEST_SEED ?? 34));
    const events = [
      ...Array<'flap'>(FLAPS).fill('flap'),
      ...Array<'crash'>(CRASHES).fill('crash'),
    ].sort(() => random() - 0.5);
    const replacements: Array<Promise<WorkerProcess>> = [];
    let flaps = 0;
    let crashes = 0;
    for (const e of events) {
      if (e === 'flap') {
        proxy.cut();
        await new Promise((r) => setTimeout(r, 200 + random() * 600));
        proxy.restore();
        flaps++;
      } else {
        // never fewer than one: wait for a replacement when every worker was killed
        while (!workers.size) await new Promise((r) => setTimeout(r, 100));
        const live = [...workers];
        const victim = live[Math.floor(random() * live.length)]!;
        victim.proc.kill('SIGKILL');
        await victim.exited;
        // its replacement starts while the chaos goes on, as a restarted pod would
        replacements.push(start());
        crashes++;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    expect({ flaps, crashes }).toEqual({ flaps: FLAPS, crashes: CRASHES });
    await Promise.all(replacements);
    const doneDuringChaos = (
      await h.db.pool.query<{ n: number }>(
        "select count(*)::int as n from jobfleet_claims where state in ('completed', 'dead_lettered')",
      )
    ).rows[0]!.n;
    expect(doneDuringChaos).toBeLessThan(JOBS); // the chaos hit a drain in progress

    const ended = async () => {
      const { rows } = await h.db.pool.query<{ completed: number; quarantined: number }>(
        `select (select count(*) from jobfleet_claims where state = 'completed')::int as completed,
                (select count(distinct key) from jobfleet_dead_letters where status = 'quarantined')::int as quarantined`,
      );
      return rows[0]!;
    };
    await eventually(
      'every job ended',
      async () => {
        const e = await ended();
        return e.completed + e.quarantined >= JOBS ? e : undefined;
      },
      180_000,
      500,
    );
    await eventually('the queues empty', async () => {
      const s = await h.rabbit.mgmt.get<Array<{ name: string; messages?: number }>>(
        `/queues/${encodeURIComponent(h.rabbit.vhost)}?columns=name,messages`,
      );
      const left = s.filter((q) => q.name.startsWith(queue) && q.name !== `${queue}.dlq`);
      return left.every((q) => (q.messages ?? 0) === 0) ? true : undefined;
    });

    // Exactly once: each key completed or quarantined, never both, none missing.
    const { rows: outcomes } = await h.db.pool.query<{ key: string; ends: string[] }>(
      `select k.key, array_remove(array[
           case when c.state = 'completed' then 'completed' end,
           case when exists (select 1 from jobfleet_dead_letters d
                             where d.key = k.key and d.status = 'quarantined') then 'quarantined' end
         ], null) as ends
       from unnest($1::text[]) as k(key)
       left join jobfleet_claims c on c.key = k.key`,
      [keys],
    );
    const wrong = outcomes.filter((o) => o.ends.length !== 1);
    expect(wrong).toEqual([]);
    // Every completed key ran its effect (a crash between the effect and its record may run it twice).
    const { rows: noEffect } = await h.db.pool.query(
      `select key from jobfleet_claims c where state = 'completed'
         and not exists (select 1 from effects e where e.key = c.key)`,
    );
    expect(noEffect).toEqual([]);

    // The broker's returns: below its limit on every delivery a worker saw;
    // a message past it can only be in the quarantine, as delivery_limit.
    const { rows: returns } = await h.db.pool.query<{ max: number | null }>(
      'select max(returns)::int as max from deliveries',
    );
    expect(returns[0]!.max ?? 0).toBeLessThan(DELIVERY_LIMIT);
    const { rows: classes } = await h.db.pool.query<{ failure_class: string }>(
      "select distinct failure_class from jobfleet_dead_letters where status = 'quarantined'",
    );
    for (const c of classes)
      expect(['delivery_limit', 'attempts_exhausted']).toContain(c.failure_class);

    for (const w of workers) w.proc.kill('SIGTERM');
    await Promise.all([...workers].map((w) => w.exited));
    const verify = await jobfleet([
      'verify',
      '--claims-url',
      h.db.url,
      '--max-attempts',
      String(MAX_ATTEMPTS),
    ]);
    expect(verify.stdout + verify.stderr).not.toMatch(/FAIL/);
    expect(verify.code).toBe(0);
  }, 300_000);
});
