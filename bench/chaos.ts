// `make chaos`: the soak. 10,000 jobs with a mix of outcomes go through
// three or more worker processes while a killer SIGKILLs a random worker
// every few seconds (and restarts it), the broker drops every worker
// connection once, and PostgreSQL terminates every worker backend once. At
// the end `jobfleet verify` must pass and the counts must balance: nothing
// lost, no duplicate business effect. Not part of `make test` (minutes, not
// seconds); `--write` puts the figures into bench/RESULTS.md.
//
//   node --import tsx bench/chaos.ts [--jobs 10000] [--workers 3] [--runs 2]
//        [--rate 250] [--kill-every 3] [--write] [--keep]
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import amqp from 'amqplib';
import pg from 'pg';
import { publish } from '../worker/index.js';
import { repoRoot } from '../test/ground/control-plane.js';
import { createSchema } from '../test/ground/postgres.js';
import { createVhost, type RabbitVhost } from '../test/ground/rabbit.js';
import { prng } from '../test/ground/prng.js';
import { configuredUrls } from '../test/ground/services.js';
import { header, writeSection } from './results.js';

const { values: o } = parseArgs({
  options: {
    jobs: { type: 'string', default: '10000' },
    workers: { type: 'string', default: '3' },
    runs: { type: 'string', default: '2' },
    mode: { type: 'string', default: 'both' },
    rate: { type: 'string', default: '250' },
    'kill-every': { type: 'string', default: '3' },
    timeout: { type: 'string', default: '600' },
    seed: { type: 'string' },
    write: { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
  },
});
const JOBS = Number(o.jobs);
const WORKERS = Number(o.workers);
const RATE = Number(o.rate);
const KILL_EVERY_MS = Number(o['kill-every']) * 1000;
const TIMEOUT_MS = Number(o.timeout) * 1000;
const QUEUE = 'chaos';
type Mode = 'transactional' | 'external';
const MODES: Mode[] = o.mode === 'both' ? ['transactional', 'external'] : [o.mode as Mode];
if (!MODES.every((m) => m === 'transactional' || m === 'external'))
  throw new Error('--mode: transactional, external or both');
const MAX_ATTEMPTS = 8;

interface Figures {
  mode: Mode;
  published: number;
  completed: number;
  deadLettered: number;
  deadLetteredByClass: Record<string, number>;
  expectedPermanent: number;
  lost: number;
  duplicateEffects: number;
  effectsOnDeadLettered: number;
  completedWithoutEffect: number;
  /** external mode: keys whose downstream was called more than once (a kill between the call and its record) */
  keysCalledAgain?: number;
  maxAttempts: number;
  retried: number;
  kills: number;
  brokerConnectionsClosed: number;
  pgBackendsTerminated: number;
  workQueueLeft: number;
  deadLetterQueueHeld: number;
  verifyExit: number | null;
  verifySummary: string;
  wallSeconds: number;
  seed: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Proc {
  proc: ChildProcess;
  exited: Promise<void>;
}

function startWorker(env: Record<string, string>): Promise<Proc> {
  // env carries CHAOS_MODE
  const proc = spawn(process.execPath, ['--import', 'tsx', 'bench/chaos-worker.ts'], {
    cwd: repoRoot,
    env: { ...process.env, LOG_LEVEL: process.env.JOBFLEET_CHAOS_LOG ?? 'silent', ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  return new Promise((resolve, reject) => {
    createInterface({ input: proc.stdout }).once('line', () => resolve({ proc, exited }));
    void exited.then(() => reject(new Error('chaos worker exited before it was ready')));
  });
}

async function runOnce(runNo: number, mode: Mode): Promise<Figures> {
  const seed = o.seed ? Number(o.seed) + runNo : Date.now() % 2 ** 31;
  const random = prng(seed);
  const urls = configuredUrls();
  const rabbit: RabbitVhost = await createVhost(urls.amqpUrl, urls.rabbitMgmtUrl);
  const db = await createSchema(urls.pgUrl);
  const app = `jobfleet-chaos-${randomBytes(3).toString('hex')}`;
  const claims = new URL(db.url);
  claims.searchParams.set('application_name', app);
  const admin = new pg.Pool({ connectionString: urls.pgUrl, max: 2 });
  await db.pool.query(
    `create table effects (id bigserial primary key, key text not null, attempt int, pid int,
                           at timestamptz not null default clock_timestamp());
     create table effect_calls (like effects including all);
     create table chaos_published (key text primary key, kind text not null)`,
  );
  // External mode: the downstream honours the idempotency key (one effect per key).
  if (mode === 'external') await db.pool.query('create unique index on effects (key)');
  const env = {
    CHAOS_MODE: mode,
    JOBFLEET_QUEUE: QUEUE,
    JOBFLEET_BROKER_URL: rabbit.amqpUrl,
    JOBFLEET_CLAIMS_URL: claims.toString(),
    JOBFLEET_PREFETCH: '8',
    JOBFLEET_MAX_ATTEMPTS: String(MAX_ATTEMPTS),
    JOBFLEET_INITIAL_DELAY_SECONDS: '0.5',
    JOBFLEET_MAX_DELAY_SECONDS: '2',
    JOBFLEET_LEASE_SECONDS: '5',
    JOBFLEET_DRAIN_DEADLINE_SECONDS: '5',
    JOBFLEET_METRICS_PORT: '0',
  };
  const started = Date.now();
  const workers: Proc[] = await Promise.all(
    Array.from({ length: WORKERS }, () => startWorker(env)),
  );

  const conn = await amqp.connect(rabbit.amqpUrl, {
    clientProperties: { connection_name: 'chaos-publisher' },
  });
  const ch = await conn.createConfirmChannel();
  await ch.checkQueue(QUEUE);

  // The killer: a random worker, SIGKILLed every few seconds, restarted.
  let kills = 0;
  let stopping = false;
  const killer = (async () => {
    while (!stopping) {
      await sleep(KILL_EVERY_MS * (0.5 + random()));
      if (stopping) break;
      const i = Math.floor(random() * workers.length);
      const victim = workers[i] as Proc;
      victim.proc.kill('SIGKILL');
      await victim.exited;
      kills++;
      // A restart can race the broker drop or the backend termination: try again.
      for (;;) {
        try {
          workers[i] = await startWorker(env);
          break;
        } catch {
          await sleep(500);
        }
      }
    }
  })();

  // The publisher: each job recorded in chaos_published before its confirmed publish.
  const publishMs = (JOBS / RATE) * 1000;
  let expectedPermanent = 0;
  const batch = Math.max(1, Math.round(RATE / 10));
  const publisher = (async () => {
    for (let n = 0; n < JOBS; n += batch) {
      const tick = Date.now();
      const jobs = [];
      for (let k = n; k < Math.min(JOBS, n + batch); k++) {
        const r = random();
        const kind = r < 0.01 ? 'permanent' : r < 0.06 ? 'transient' : r < 0.08 ? 'throttle' : 'ok';
        if (kind === 'permanent') expectedPermanent++;
        jobs.push({
          n: k,
          kind,
          failTimes: kind === 'transient' ? 1 + Math.floor(random() * 2) : undefined,
          ms: random() < 0.2 ? Math.floor(random() * 20) : undefined,
        });
      }
      await db.pool.query(
        'insert into chaos_published (key, kind) select * from unnest($1::text[], $2::text[])',
        [jobs.map((j) => `chaos:${j.n}`), jobs.map((j) => j.kind)],
      );
      await Promise.all(
        jobs.map((payload) =>
          publish(ch, QUEUE, { type: 'chaos', schemaVersion: 1, payload, keyRule: 'chaos:{n}' }),
        ),
      );
      await sleep(Math.max(0, 100 - (Date.now() - tick)));
    }
  })();

  // One broker drop (every worker connection) at 30% of the publishing time,
  // one PostgreSQL backend termination (every worker backend) at 60%.
  await sleep(publishMs * 0.3);
  let brokerConnectionsClosed = 0;
  // The management API lists a new connection a few seconds late: wait for the fleet's.
  type Conn = { name: string; client_properties?: { connection_name?: string } };
  let connections: Conn[] = [];
  for (let i = 0; i < 30; i++) {
    connections = (
      await rabbit.mgmt.get<Conn[]>(`/vhosts/${encodeURIComponent(rabbit.vhost)}/connections`)
    ).filter((c) => c.client_properties?.connection_name !== 'chaos-publisher');
    if (connections.length >= WORKERS) break;
    await sleep(500);
  }
  for (const c of connections) {
    await rabbit.mgmt
      .request('DELETE', `/connections/${encodeURIComponent(c.name)}`)
      .then(() => brokerConnectionsClosed++)
      .catch(() => undefined);
  }
  await sleep(publishMs * 0.3);
  const { rows: term } = await admin.query<{ n: number }>(
    'select count(pg_terminate_backend(pid))::int as n from pg_stat_activity where application_name = $1',
    [app],
  );
  const pgBackendsTerminated = term[0]?.n ?? 0;
  await publisher;

  // Done when every published key has a terminal claim.
  const terminal = async () =>
    (
      await db.pool.query<{ n: number }>(
        `select count(*)::int as n from chaos_published p join jobfleet_claims c using (key)
         where c.state in ('completed', 'dead_lettered')`,
      )
    ).rows[0]?.n ?? 0;
  const deadline = Date.now() + TIMEOUT_MS;
  while ((await terminal()) < JOBS && Date.now() < deadline) await sleep(1000);
  stopping = true;
  await killer;
  // SIGTERM: each worker drains and flushes its ack journal.
  for (const w of workers) w.proc.kill('SIGTERM');
  await Promise.all(workers.map((w) => w.exited));
  const wallSeconds = (Date.now() - started) / 1000;

  const one = async (sql: string) => (await db.pool.query<{ n: number }>(sql)).rows[0]?.n ?? 0;
  const byClass = await db.pool.query<{ failure_class: string; n: number }>(
    `select failure_class, count(distinct key)::int as n from jobfleet_dead_letters group by 1`,
  );
  const depth = async (q: string) => {
    const c = await conn.createChannel();
    try {
      return (await c.checkQueue(q)).messageCount;
    } finally {
      await c.close();
    }
  };
  const verify = await runVerify(claims.toString(), rabbit);
  const f: Figures = {
    mode,
    published: await one('select count(*)::int as n from chaos_published'),
    completed: await one(
      `select count(*)::int as n from jobfleet_claims where state = 'completed'`,
    ),
    deadLettered: await one(
      `select count(*)::int as n from jobfleet_claims where state = 'dead_lettered'`,
    ),
    deadLetteredByClass: Object.fromEntries(byClass.rows.map((r) => [r.failure_class, r.n])),
    expectedPermanent,
    lost: await one(`select count(*)::int as n from chaos_published p left join jobfleet_claims c using (key)
                     where c.state is distinct from 'completed' and c.state is distinct from 'dead_lettered'`),
    duplicateEffects: await one(
      'select count(*)::int as n from (select key from effects group by key having count(*) > 1) d',
    ),
    effectsOnDeadLettered: await one(`select count(*)::int as n from effects e
      join jobfleet_claims c using (key) where c.state = 'dead_lettered'`),
    completedWithoutEffect: await one(`select count(*)::int as n from jobfleet_claims c
      where c.state = 'completed' and not exists (select 1 from effects e where e.key = c.key)`),
    ...(mode === 'external' && {
      keysCalledAgain: await one(
        'select count(*)::int as n from (select key from effect_calls group by key having count(*) > 1) d',
      ),
    }),
    maxAttempts: await one('select coalesce(max(attempts), 0)::int as n from jobfleet_claims'),
    retried: await one(
      `select count(distinct key)::int as n from jobfleet_acks where outcome = 'retried'`,
    ),
    kills,
    brokerConnectionsClosed,
    pgBackendsTerminated,
    workQueueLeft: await depth(QUEUE),
    deadLetterQueueHeld: await depth(`${QUEUE}.dlq`),
    verifyExit: verify.code,
    verifySummary: verify.summary,
    wallSeconds,
    seed,
  };
  await conn.close().catch(() => undefined);
  await admin.end();
  if (o.keep) {
    console.error(`kept: vhost ${rabbit.vhost}, schema ${db.schema}`);
    await db.pool.end();
  } else {
    await rabbit.cleanup();
    await db.cleanup();
  }
  return f;
}

async function runVerify(
  claimsUrl: string,
  rabbit: RabbitVhost,
): Promise<{ code: number | null; summary: string }> {
  const child = spawn(
    process.execPath,
    [
      'bin/jobfleet.mjs',
      'verify',
      '--claims-url',
      claimsUrl,
      '--max-attempts',
      String(MAX_ATTEMPTS),
      '--management-url',
      rabbit.mgmtUrl,
      '--vhost',
      rabbit.vhost,
    ],
    { cwd: repoRoot, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let out = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  const code = await new Promise<number | null>((r) => child.on('close', r));
  if (code !== 0) console.error(out);
  return { code, summary: out.trim().split('\n').at(-1) ?? '' };
}

function healthy(f: Figures): boolean {
  return (
    f.lost === 0 &&
    f.duplicateEffects === 0 &&
    f.effectsOnDeadLettered === 0 &&
    f.completedWithoutEffect === 0 &&
    f.completed + f.deadLettered === f.published &&
    f.verifyExit === 0
  );
}

const runs: Figures[] = [];
for (const mode of MODES)
  for (let i = 0; i < Number(o.runs); i++) {
    const f = await runOnce(runs.length, mode);
    runs.push(f);
    console.log(
      [
        `${mode} run ${i + 1}: ${healthy(f) ? 'PASS' : 'FAIL'} (seed ${f.seed})`,
        `  published ${f.published}, completed ${f.completed}, dead-lettered ${f.deadLettered} ${JSON.stringify(f.deadLetteredByClass)} (permanent jobs published: ${f.expectedPermanent})`,
        `  lost ${f.lost}, duplicate effects ${f.duplicateEffects}, effects on dead-lettered keys ${f.effectsOnDeadLettered}, completed without effect ${f.completedWithoutEffect}` +
          (f.keysCalledAgain === undefined
            ? ''
            : `, keys whose downstream was called again ${f.keysCalledAgain}`),
        `  max attempts seen ${f.maxAttempts}, keys retried ${f.retried}`,
        `  kills ${f.kills}, broker connections closed ${f.brokerConnectionsClosed}, PostgreSQL backends terminated ${f.pgBackendsTerminated}`,
        `  left in work queue ${f.workQueueLeft}, held in DLQ ${f.deadLetterQueueHeld}`,
        `  verify: exit ${f.verifyExit}, ${f.verifySummary}`,
        `  wall time ${f.wallSeconds.toFixed(1)} s`,
      ].join('\n'),
    );
  }

if (o.write) {
  const col = (get: (f: Figures) => string | number) => runs.map((f) => String(get(f))).join(' | ');
  const row = (name: string, get: (f: Figures) => string | number) => `| ${name} | ${col(get)} |`;
  writeSection(
    'chaos',
    `${header('Chaos soak: kills, broker drop, PostgreSQL backend termination', `make chaos (node --import tsx bench/chaos.ts --jobs ${JOBS} --workers ${WORKERS} --runs ${o.runs} --mode ${o.mode} --rate ${RATE} --kill-every ${KILL_EVERY_MS / 1000} --write)`)}
${JOBS} jobs per run published at ${RATE}/s (about 91% succeed at once, 5% fail transiently once or twice, 2% get 429
Retry-After 1 s, 1% are permanently invalid); ${WORKERS} worker processes (bench/chaos-worker.ts), prefetch 8, lease 5 s,
attempt ceiling ${MAX_ATTEMPTS}. A killer SIGKILLs a random worker every ${KILL_EVERY_MS / 1000} s on average and restarts it; at
30% of the publishing time every worker's broker connection is closed through the management API, at 60% every worker's
PostgreSQL backend is terminated. Two modes:
- transactional: the effect row commits with the completion record (one transaction per job; claims batched). A run
  passes when nothing is lost, no key has two effects, dead-lettered keys have none, completed keys have one, and
  \`jobfleet verify\` exits 0.
- external: the effect is a call to a downstream that dedupes by \`ctx.key\` (its own connection), and the completion
  records go through group commit with the claims, acks in multiple frames: the batched path. No key can have two
  effects there (the downstream's unique key); a run passes when nothing is lost, every completed key's effect
  happened, dead-lettered keys have none, and \`jobfleet verify\` exits 0. A kill between the call and its record makes
  the next owner call again: counted, not a failure (docs/worker.md, "not guaranteed").

| | ${runs.map((f, i) => `${f.mode} run ${i + 1 - runs.findIndex((g) => g.mode === f.mode)}`).join(' | ')} |
|---|${runs.map(() => '---:').join('|')}|
${[
  row('result', (f) => (healthy(f) ? 'PASS' : 'FAIL')),
  row('published', (f) => f.published),
  row('completed', (f) => f.completed),
  row('dead-lettered', (f) => f.deadLettered),
  row(
    '… of which permanent (published permanent)',
    (f) => `${f.deadLetteredByClass.permanent ?? 0} (${f.expectedPermanent})`,
  ),
  row('… of which attempts exhausted', (f) => f.deadLetteredByClass.attempts_exhausted ?? 0),
  row('**lost**', (f) => f.lost),
  row('**duplicate effects**', (f) => f.duplicateEffects),
  row('effects on dead-lettered keys', (f) => f.effectsOnDeadLettered),
  row('completed keys without an effect', (f) => f.completedWithoutEffect),
  row('keys whose downstream was called again', (f) => f.keysCalledAgain ?? '—'),
  row('max attempts seen', (f) => f.maxAttempts),
  row('keys retried', (f) => f.retried),
  row('kills (SIGKILL)', (f) => f.kills),
  row('broker connections closed', (f) => f.brokerConnectionsClosed),
  row('PostgreSQL backends terminated', (f) => f.pgBackendsTerminated),
  row(
    'left in the work queue / held in the DLQ',
    (f) => `${f.workQueueLeft} / ${f.deadLetterQueueHeld}`,
  ),
  row('jobfleet verify', (f) => `exit ${f.verifyExit}: ${f.verifySummary}`),
  row('wall time (s)', (f) => f.wallSeconds.toFixed(1)),
  row('seed', (f) => f.seed),
].join('\n')}
`,
  );
}
process.exitCode = runs.every(healthy) ? 0 : 1;
