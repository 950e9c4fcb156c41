// The measured queue age on a quorum queue (no head timestamp from the
// broker), against the truth: this test records when it publishes each
// message and when a handler takes it, so it knows the oldest waiting
// message's age at every second, and reads the age as the operator does —
// the management API's statistics and each worker's /metrics, combined by
// queueAge — through steady load, a burst, a stall and a drain to empty.
// On the machine's RabbitMQ the producer stamps each message (publish());
// on RabbitMQ 4 the producer stamps nothing and the broker's timestamp
// interceptor does (the test ground turns it on, as docs/scaling.md says).
import { randomUUID } from 'node:crypto';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWorker, publish, type Worker } from '../../worker/index.js';
import { topology } from '../../worker/topology.js';
import { sendConfirmed } from '../../worker/producer.js';
import { fetchQueueStats } from '../../src/signals/rabbitmq.js';
import { parseHead } from '../../src/signals/worker-metrics.js';
import { queueAge, type AgeMemory } from '../../src/reconcile/scaling/queue-age.js';
import type { HeadReading } from '../../src/reconcile/model/observation.js';
import { eventually } from '../ground/eventually.js';
import {
  rabbitUrls,
  usePostgres,
  useRabbit,
  type PgSchema,
  type RabbitVhost,
} from '../ground/index.js';

const QUEUE = 'age.measured';
const CONTRACT = { keyRule: 'job:{n}', schemaVersions: [1] };
/** how often the test reads the age, as the operator's poll would: the tolerance's "one read interval" */
const READ_MS = 1000;
const TOLERANCE_S = Math.max(1, READ_MS / 1000);
const HANDLER_MS = 100;
const PREFETCH = 4;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Sample {
  phase: string;
  truth: number;
  waiting: number;
  reported: number;
  /** what the estimate alone (no worker reports, as before) would have read: logged for comparison */
  estimated: number;
  source: string;
  /** a worker had received a delivery before this reading */
  delivered: boolean;
}

describe('the oldest message’s age measured on a quorum queue', () => {
  let rabbit: RabbitVhost;
  let db: PgSchema;
  let conn: ChannelModel;
  let ch: ConfirmChannel;
  const workers: Worker[] = [];
  const brokerStamps = rabbitUrls().name === 'rabbitmq4';

  beforeAll(async () => {
    rabbit = await useRabbit();
    db = await usePostgres();
    conn = await amqp.connect(rabbit.amqpUrl);
    ch = await conn.createConfirmChannel();
    const work = topology({
      queue: QUEUE,
      deadLetterQueue: `${QUEUE}.dlq`,
      queueType: 'quorum',
      initialDelaySeconds: 1,
      maxDelaySeconds: 60,
    }).work;
    await ch.assertQueue(work.name, work.options);
  });

  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop({ deadlineMs: 1000 })));
    await conn?.close().catch(() => undefined);
    await rabbit?.cleanup();
    await db?.cleanup();
  });

  /** The truth: each message's publish time, in order, and which a handler has taken. */
  const published: Array<{ id: string; at: number }> = [];
  const taken = new Set<string>();
  let next = 0;
  const truth = (now: number) => {
    while (next < published.length && taken.has(published[next]!.id)) next++;
    const waiting = published.slice(next).filter((m) => !taken.has(m.id));
    return { age: waiting.length ? (now - waiting[0]!.at) / 1000 : 0, waiting: waiting.length };
  };

  let n = 0;
  /** One message: stamped by our publish() on the machine's broker; unstamped on RabbitMQ 4, whose interceptor stamps it. */
  async function send(): Promise<void> {
    const id = randomUUID();
    const at = Date.now();
    const i = n++;
    published.push({ id, at });
    if (!brokerStamps) {
      await publish(
        ch,
        QUEUE,
        { id, type: 't', schemaVersion: 1, payload: { n: i }, key: `job:${i}` },
        () => at,
      );
      return;
    }
    const body = {
      id,
      key: `job:${i}`,
      type: 't',
      schemaVersion: 1,
      payload: { n: i },
      createdAt: new Date(at).toISOString(),
    };
    await sendConfirmed(ch, QUEUE, Buffer.from(JSON.stringify(body)), {
      messageId: id,
      contentType: 'application/json',
      persistent: true,
    });
  }

  let gate: Promise<void> = Promise.resolve();
  async function startWorker(): Promise<Worker> {
    const w = createWorker({
      contract: CONTRACT,
      handlers: {
        t: async (job) => {
          taken.add(job.id);
          await gate;
          await sleep(HANDLER_MS);
        },
      },
      logger: pino({ level: process.env.JOBFLEET_TEST_LOG ?? 'silent' }),
      handleSignals: false,
      config: {
        queue: QUEUE,
        queueType: 'quorum',
        brokerUrl: rabbit.amqpUrl,
        claimsUrl: db.url,
        metricsPort: 0,
        prefetch: PREFETCH,
        drainDeadlineSeconds: 5,
      },
    });
    workers.push(w);
    await w.start();
    return w;
  }

  async function heads(): Promise<HeadReading[]> {
    const read = await Promise.all(
      workers.map((w) =>
        fetch(`http://127.0.0.1:${w.port}/metrics`).then(async (r) => parseHead(await r.text())),
      ),
    );
    return read.filter((h): h is HeadReading => h !== undefined);
  }

  it('stays within a second of the truth through steady load, a burst, a stall and a drain, and reads 0 within a second of the queue emptying', async () => {
    await startWorker();
    await startWorker();
    const samples: Sample[] = [];
    let phase = 'steady';
    let memory: AgeMemory = {};
    let estimateMemory: AgeMemory = {};
    let reading = true;
    const reader = (async () => {
      while (reading) {
        const tick = Date.now();
        const delivered = taken.size > 0;
        const stats = await fetchQueueStats(rabbit.mgmtUrl, rabbit.vhost, QUEUE);
        const h = await heads();
        const now = Date.now();
        const r = queueAge(stats, now, memory, h);
        memory = r.memory;
        const e = queueAge(stats, now, estimateMemory);
        estimateMemory = e.memory;
        const t = truth(now);
        samples.push({
          phase,
          truth: t.age,
          waiting: t.waiting,
          reported: r.age.signals.oldestAgeSeconds,
          estimated: e.age.signals.oldestAgeSeconds,
          source: r.age.ageSource,
          delivered,
        });
        await sleep(Math.max(0, READ_MS - (Date.now() - tick)));
      }
    })();
    // 40 messages/s against a capacity of 80/s (two workers × 4 slots ÷ 0.1 s)
    let publishing = true;
    const publisher = (async () => {
      const start = Date.now();
      for (let k = 0; publishing; k++) {
        await sleep(Math.max(0, start + k * 25 - Date.now()));
        await send();
      }
    })();
    await sleep(10_000);
    phase = 'burst';
    for (let k = 0; k < 600; k++) await send();
    await eventually(
      'the burst drained',
      () => Promise.resolve(truth(Date.now()).waiting < 5 ? true : undefined),
      60_000,
    );
    await sleep(3000);
    phase = 'stall';
    let release = () => {};
    gate = new Promise((r) => (release = r));
    await sleep(10_000);
    phase = 'recover';
    release();
    await eventually(
      'the stall drained',
      () => Promise.resolve(truth(Date.now()).waiting < 5 ? true : undefined),
      60_000,
    );
    phase = 'drain';
    publishing = false;
    await publisher;
    await eventually(
      'every message taken',
      () => Promise.resolve(truth(Date.now()).waiting === 0 ? true : undefined),
      60_000,
    );
    const emptiedAt = samples.length;
    await sleep(6000);
    reading = false;
    await reader;

    const report = samples.map(
      (s) =>
        `${s.phase.padEnd(7)} truth ${s.truth.toFixed(2)} reported ${s.reported.toFixed(2)} (${s.source}, ${s.waiting} waiting)`,
    );
    // once a worker has had a delivery, every reading is measured, never estimated
    expect(
      samples.filter((s) => s.delivered && s.source !== 'DeliveryTimestamps'),
      report.join('\n'),
    ).toEqual([]);
    const nonEmpty = samples.filter((s) => s.waiting > 0);
    const off = nonEmpty.filter((s) => Math.abs(s.reported - s.truth) > TOLERANCE_S);
    expect(off, report.join('\n')).toEqual([]);
    // the stall is where a guess would lag: the reading never falls below the truth by more
    const stall = samples.filter((s) => s.phase === 'stall' && s.waiting > 0);
    expect(stall.length).toBeGreaterThan(5);
    expect(Math.max(...stall.map((s) => s.truth))).toBeGreaterThan(8);
    expect(stall.filter((s) => s.reported < s.truth - TOLERANCE_S)).toEqual([]);
    // the burst was seen as a backlog, not as zero
    expect(
      Math.max(...samples.filter((s) => s.phase === 'burst').map((s) => s.reported)),
    ).toBeGreaterThan(3);
    // empty within one read interval of the last message being taken, and it stays 0
    const after = samples.slice(emptiedAt + 1);
    expect(after.length).toBeGreaterThan(3);
    expect(
      after.map((s) => s.reported),
      report.join('\n'),
    ).toEqual(after.map(() => 0));
    const worst = (phase: string, of: (s: Sample) => number) =>
      Math.max(
        0,
        ...nonEmpty.filter((s) => s.phase === phase).map((s) => Math.abs(of(s) - s.truth)),
      ).toFixed(2);
    const errors = (of: (s: Sample) => number) =>
      ['steady', 'burst', 'stall', 'recover'].map((p) => `${p} ${worst(p, of)}`).join(', ');
    console.log(
      `queue age on ${rabbitUrls().name}: ${nonEmpty.length} non-empty readings; largest error (s) measured: ${errors((s) => s.reported)}; the estimate alone: ${errors((s) => s.estimated)}; truth peaked at ${Math.max(...samples.map((s) => s.truth)).toFixed(1)} s`,
    );
  }, 240_000);

  it('names messages without any timestamp: counted by the worker, the age estimated with the reason (the machine’s broker); stamped by the broker (RabbitMQ 4)', async () => {
    if (!workers.length) await startWorker();
    let release = () => {};
    gate = new Promise((r) => (release = r));
    const before = taken.size;
    // every slot taken by a blocked handler, the rest waiting: deliveries without timestamps
    for (let i = 0; i < workers.length * PREFETCH + 10; i++) {
      const id = randomUUID();
      const body = {
        id,
        key: `job:${10_000 + i}`,
        type: 't',
        schemaVersion: 1,
        payload: { n: 10_000 + i },
        createdAt: new Date().toISOString(),
      };
      await sendConfirmed(ch, QUEUE, Buffer.from(JSON.stringify(body)), {
        messageId: id,
        persistent: true,
      });
    }
    const untimed = () =>
      Promise.all(
        workers.map((w) =>
          fetch(`http://127.0.0.1:${w.port}/metrics`).then(async (r) =>
            Number(
              /^jobfleet_deliveries_untimestamped_total (\S+)$/m.exec(await r.text())?.[1] ?? NaN,
            ),
          ),
        ),
      ).then((ns) => ns.reduce((a, b) => a + b, 0));
    const stats = await eventually(
      'the backlog in the statistics',
      async () => {
        const st = await fetchQueueStats(rabbit.mgmtUrl, rabbit.vhost, QUEUE);
        return st.messagesReady >= 5 ? st : undefined;
      },
      30_000,
    );
    await eventually(
      'every slot taken by a blocked handler',
      () => Promise.resolve(taken.size - before >= workers.length * PREFETCH || undefined),
      30_000,
    );
    const age = queueAge(stats, Date.now(), {}, await heads()).age;
    if (brokerStamps) {
      expect(await untimed()).toBe(0);
      expect(age.ageSource).toBe('DeliveryTimestamps');
    } else {
      expect(await untimed()).toBe(workers.length * PREFETCH);
      expect(age).toMatchObject({
        ageSource: 'Estimated',
        estimatedBecause: 'NoMessageTimestamps',
      });
    }
    release();
  }, 60_000);
});
