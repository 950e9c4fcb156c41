// A three-node RabbitMQ 4 cluster, each node a host of its own (a network
// namespace): the node leading the work queue is killed, or cut off and
// reconnected, while worker processes drain 5,000 jobs from a quorum queue
// replicated on all three. Nothing is lost or done twice, the fleet keeps
// draining through the other nodes, the operator's queue read keeps working
// through a surviving node's management API, and the node rejoins.
// RabbitMQ 4 only (the integration-rabbitmq4 project).
import amqp from 'amqplib';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { fetchQueueStats } from '../../src/signals/rabbitmq.js';
import { publish } from '../../worker/index.js';
import { overLimitQueueName, topology } from '../../worker/topology.js';
import {
  createEffectsTable,
  spawnEffectWorker,
  type WorkerProcess,
} from '../fixtures/spawn-effect-worker.js';
import { eventually } from '../ground/eventually.js';
import { usePostgres, type PgSchema } from '../ground/index.js';
import { startRabbitCluster, type RabbitCluster } from '../ground/rabbitmq-cluster.js';
import { rabbitmq4Root } from '../ground/rabbitmq-node.js';
import { CONTRACT } from './worker-harness.js';

const JOBS = 5000;
let cluster: RabbitCluster;
let db: PgSchema;
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  const root = rabbitmq4Root();
  if (!root) throw new Error('RabbitMQ 4 is not built: run `make rabbitmq4`');
  cluster = await startRabbitCluster(root, 3);
}, 180_000);
afterAll(async () => {
  await cluster?.stop();
});
beforeEach(async () => {
  db = await usePostgres();
  await createEffectsTable(db.pool);
});
afterEach(async () => {
  for (const w of workers.splice(0)) w.proc.kill('SIGKILL');
  await db?.cleanup();
  await cluster?.heal();
}, 600_000);

interface QueueInfo {
  leader?: string;
  members?: string[];
  online?: string[];
  messages?: number;
  messages_ready?: number;
  messages_unacknowledged?: number;
  consumers?: number;
}

const queueInfo = (queue: string, via = cluster.mgmtUrls) =>
  fetch(`${new URL(via.split(',')[0]!).origin}/api/queues/%2F/${encodeURIComponent(queue)}`, {
    headers: { authorization: `Basic ${Buffer.from('guest:guest').toString('base64')}` },
  }).then((r) => r.json() as Promise<QueueInfo>);

/** Three effect workers draining `queue`, each given every node, starting with a different one. */
async function startWorkers(queue: string): Promise<void> {
  for (let i = 0; i < 3; i++)
    workers.push(
      await spawnEffectWorker({
        JOBFLEET_QUEUE: queue,
        JOBFLEET_QUEUE_TYPE: 'quorum',
        JOBFLEET_BROKER_URL: [0, 1, 2].map((k) => cluster.nodes[(i + k) % 3]!.amqpUrl).join(','),
        JOBFLEET_CLAIMS_URL: db.url,
        JOBFLEET_TEST_HANDLER_MS: '5',
        JOBFLEET_PREFETCH: '16',
        JOBFLEET_LEASE_SECONDS: '10',
      }),
    );
}

for (const fault of ['killed (SIGKILL)', 'cut off, then reconnected'] as const) {
  describe(`the node leading the work queue ${fault}`, () => {
    it('mid-drain of 5,000 jobs: 0 lost, 0 duplicate effects, the fleet drains on through the other nodes, age is read through a survivor, the node rejoins', async () => {
      const queue = `cluster.${fault.startsWith('killed') ? 'kill' : 'cut'}.${Date.now()}`;
      const t = topology({
        queue,
        deadLetterQueue: `${queue}.dlq`,
        queueType: 'quorum',
        initialDelaySeconds: 1,
        maxDelaySeconds: 4,
      });
      const conn = await amqp.connect(cluster.nodes[0]!.amqpUrl);
      const ch = await conn.createConfirmChannel();
      await ch.assertQueue(t.work.name, t.work.options);
      const keys: string[] = [];
      for (let i = 0; i < JOBS; i++)
        keys.push(
          (
            await publish(ch, queue, {
              type: 'ship',
              schemaVersion: 1,
              payload: { orderId: `c-${i}` },
              keyRule: CONTRACT.keyRule,
            })
          ).key,
        );
      await conn.close();
      const info = await eventually('the queue on all three nodes', async () => {
        const q = await queueInfo(queue);
        return q.leader && q.members?.length === 3 && q.online?.length === 3 ? q : undefined;
      });
      const leader = cluster.nodes.findIndex((n) => n.nodename === info.leader);
      expect(leader).toBeGreaterThanOrEqual(0);
      const survivor = (leader + 1) % 3;

      await startWorkers(queue);
      const done = async () =>
        (await db.pool.query<{ n: number }>('select count(distinct key)::int as n from effects'))
          .rows[0]!.n;
      await eventually('a fifth drained', async () =>
        (await done()) >= JOBS / 5 ? true : undefined,
      );

      if (fault.startsWith('killed')) await cluster.kill(leader);
      else await cluster.cut(leader);
      const atFault = await done();
      expect(atFault).toBeLessThan(JOBS);

      // The operator's read, given every node's management URL, answers through a
      // survivor: at once for a killed node; for a cut-off one, once the others
      // have noticed (Erlang's net_ticktime, 60 s by default) and elected a new leader.
      const stats = await eventually(
        'the queue read through a surviving node',
        () => fetchQueueStats(cluster.mgmtUrls, '/', queue, 5000),
        120_000,
        1000,
      );
      expect(stats.type).toBe('quorum');

      await eventually(
        'every job done',
        async () => ((await done()) === JOBS ? true : undefined),
        240_000,
        500,
      );
      const { rows: twice } = await db.pool.query(
        'select key, count(*)::int as n from effects group by key having count(*) > 1',
      );
      expect(twice).toEqual([]);
      const { rows: completed } = await db.pool.query<{ n: number }>(
        "select count(*)::int as n from jobfleet_claims where state = 'completed'",
      );
      expect(completed[0]!.n).toBe(JOBS);
      // Nothing waits in the queue. The lost node's consumers may still hold
      // deliveries whose jobs were done and recorded before the fault but
      // whose acks never arrived. On RabbitMQ 4.3 a quorum queue keeps them
      // checked out to a consumer whose node is gone (suspected down: a
      // killed node and a cut-off one look the same to the others) until
      // that node is back; 4.0 returned them once the node was counted out.
      // They come back then and are acked as duplicates, with no second
      // effect; asserted below, after the node rejoins.
      const emptyOrHeld = (held: boolean) =>
        eventually(
          'the work queue empty',
          async () => {
            const q = await queueInfo(queue, cluster.nodes[survivor]!.mgmtUrl);
            if (q.messages === 0 || (held && q.messages_ready === 0)) return q;
            // thrown, so that a timeout says what the survivor last reported
            throw new Error(
              `messages ${q.messages} (ready ${q.messages_ready}, unacked ${q.messages_unacknowledged}), ` +
                `${q.consumers} consumers, leader ${q.leader}, online on ${q.online?.join(' ')}`,
            );
          },
          120_000,
        );
      const beforeRejoin = await emptyOrHeld(true);
      if (beforeRejoin.messages)
        console.info(
          `${fault}: ${beforeRejoin.messages} deliveries held by the lost node's consumers until it returns`,
        );

      if (fault.startsWith('killed')) await cluster.restart(leader);
      else {
        // The link comes back only once the others have counted the node out
        // (net_ticktime): a link restored just as they notice leaves the
        // partition's end to a race in RabbitMQ, which a CI run lost once. The
        // case users meet is a partition both sides saw; that is what is tested.
        await eventually(
          'the survivors counting the cut-off node out',
          async () => {
            const nodes = await cluster.running(survivor);
            if (!nodes.includes(cluster.nodes[leader]!.nodename)) return true;
            throw new Error(`running ${nodes.join(' ')}`);
          },
          120_000,
          1000,
        );
        await cluster.reconnect(leader);
      }
      const rejoined = (within: number) =>
        eventually(
          'the node back in the cluster and the queue',
          async () => {
            const nodes = await cluster.running(survivor);
            const q = await queueInfo(queue, cluster.nodes[survivor]!.mgmtUrl);
            if (nodes.length === 3 && q.online?.length === 3) return true;
            // thrown, so that a timeout says what the cluster last reported
            throw new Error(`running ${nodes.join(' ')}; queue online on ${q.online?.join(' ')}`);
          },
          within,
          1000,
        );
      if (fault.startsWith('killed')) await rejoined(120_000);
      else {
        // A node paused by pause_minority resumes once it sees the majority
        // again. On RabbitMQ 4.0 under CI load it once stayed paused past
        // 120 s (the others running, its queue replica online); the way out
        // for a person is to restart it, on its data. Either way it must
        // rejoin: the jobs' guarantees were checked above, this is the broker.
        const resumed = await rejoined(180_000).then(
          () => true,
          (err: unknown) => {
            console.warn(`the cut-off node did not resume by itself: ${(err as Error).message}`);
            return false;
          },
        );
        if (!resumed) {
          await cluster.kill(leader);
          await cluster.restart(leader);
          await rejoined(120_000);
        }
      }
      // whatever was held comes back and goes out as a duplicate: the queue
      // empties, and still no job has two effects
      await emptyOrHeld(false);
      const { rows: after } = await db.pool.query(
        'select key, count(*)::int as n from effects group by key having count(*) > 1',
      );
      expect(after).toEqual([]);
      expect(await done()).toBe(JOBS);
    }, 600_000);
  });
}

describe('a rolling restart of the three nodes under load', () => {
  it('each node killed and restarted on its data in turn while a producer publishes with confirms: every confirmed job has one effect, nothing is left in the work queue, the delivery-limit queue or the quarantine', async () => {
    const queue = `cluster.rolling.${Date.now()}`;
    const t = topology({
      queue,
      deadLetterQueue: `${queue}.dlq`,
      queueType: 'quorum',
      initialDelaySeconds: 1,
      maxDelaySeconds: 4,
    });
    const setup = await amqp.connect(cluster.nodes[0]!.amqpUrl);
    const sch = await setup.createChannel();
    await sch.assertQueue(t.work.name, t.work.options);
    await setup.close();
    await startWorkers(queue);

    // The producer a user should write: publish with confirms, and publish
    // again (same key) what was not confirmed, through the next node.
    const confirmed = new Set<string>();
    let republished = 0;
    let stopping = false;
    const producer = (async () => {
      let via = 0;
      let ch: amqp.ConfirmChannel | undefined;
      let conn: amqp.ChannelModel | undefined;
      for (let i = 0; !stopping; i++) {
        for (let tries = 0; ; tries++) {
          try {
            if (!ch) {
              conn = await amqp.connect(cluster.nodes[via % 3]!.amqpUrl);
              conn.on('error', () => undefined);
              ch = await conn.createConfirmChannel();
              ch.on('error', () => undefined);
              conn.on('close', () => {
                ch = undefined;
              });
            }
            const { key } = await publish(ch, queue, {
              type: 'ship',
              schemaVersion: 1,
              payload: { orderId: `r-${i}` },
              keyRule: CONTRACT.keyRule,
            });
            confirmed.add(key);
            break;
          } catch {
            if (tries === 0) republished++;
            ch = undefined;
            await conn?.close().catch(() => undefined);
            via++;
            await new Promise((r) => setTimeout(r, 200));
          }
        }
      }
      await conn?.close().catch(() => undefined);
    })();
    const confirmedAtLeast = (n: number) =>
      eventually(
        `${n} jobs confirmed`,
        () => Promise.resolve(confirmed.size >= n ? true : undefined),
        120_000,
        200,
      );
    const allRunning = () =>
      eventually(
        'all three nodes running, the queue online on each',
        async () => {
          const nodes: string[] = await cluster.running(0).catch(() => []);
          const q: QueueInfo = await queueInfo(queue).catch(() => ({}));
          if (nodes.length === 3 && q.online?.length === 3) return true;
          throw new Error(`running ${nodes.join(' ')}; queue online on ${q.online?.join(' ')}`);
        },
        180_000,
        1000,
      );

    for (let i = 0; i < 3; i++) {
      await confirmedAtLeast(confirmed.size + 500);
      await cluster.kill(i);
      await confirmedAtLeast(confirmed.size + 300);
      await cluster.restart(i);
      await allRunning();
    }
    await confirmedAtLeast(confirmed.size + 300);
    stopping = true;
    await producer;

    await eventually(
      'every confirmed job done',
      async () => {
        const { rows } = await db.pool.query<{ key: string }>('select distinct key from effects');
        const done = new Set(rows.map((r) => r.key));
        return [...confirmed].every((k) => done.has(k)) ? true : undefined;
      },
      240_000,
      1000,
    );
    const { rows: twice } = await db.pool.query(
      'select key, count(*)::int as n from effects group by key having count(*) > 1',
    );
    expect(twice).toEqual([]);
    for (const name of [queue, overLimitQueueName(queue), `${queue}.dlq`])
      await eventually(`${name} empty`, async () => {
        const q = await queueInfo(name);
        if (q.messages === 0) return true;
        throw new Error(
          `${q.messages} messages (ready ${q.messages_ready}, unacked ${q.messages_unacknowledged})`,
        );
      });
    const { rows: effects } = await db.pool.query<{ n: number }>(
      'select count(*)::int as n from effects',
    );
    let duplicates = 0;
    for (const w of workers)
      duplicates += await w.metric('jobfleet_jobs_total', { outcome: 'duplicate' });
    console.info(
      `rolling restart: ${confirmed.size} jobs confirmed, ${effects[0]!.n} effects, ` +
        `${republished} publishes retried unconfirmed, ${duplicates} duplicate deliveries suppressed, ` +
        '0 left in the work queue, the delivery-limit queue and the quarantine',
    );
    // every publish was retried until confirmed: one effect per job published
    expect(effects[0]!.n).toBe(confirmed.size);
  }, 900_000);
});
