// `jobfleet dlq list|show|replay|discard`: the quarantine from a terminal.
// Rows come from PostgreSQL (src/dlq/store.ts); payloads from the dead-letter
// queue; every replay and discard is audited (src/dlq/replay.ts).
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { parseArgs } from 'node:util';
import amqp from 'amqplib';
import pg from 'pg';
import type { JobWorkerSpec, JobWorkerStatus } from '../api/jobworker.js';
import {
  discard,
  replay,
  ReplayRefused,
  type ReplayDeps,
  type ReplayProgress,
} from '../dlq/replay.js';
import { askHold, holdGate, HoldTimeout } from '../dlq/replay-gate.js';
import { replayRate } from '../dlq/replay-hold.js';
import { DeadLetterStore, type DeadLetterRow, type Selector } from '../dlq/store.js';
import { ClaimStore } from '../../worker/claim-store.js';
import { redactUrl } from './verify.js';
import { FAILURE_CLASSES } from '../../worker/envelope.js';
import { brokerUrls, connectAny } from '../../worker/broker-urls.js';
import { DLQ_HELP } from './help.js';

const redactBrokerUrls = (value: string) => brokerUrls(value).map(redactUrl).join(',');

const options = {
  'claims-url': { type: 'string' },
  'amqp-url': { type: 'string' },
  queue: { type: 'string' },
  'dead-letter-queue': { type: 'string' },
  schema: { type: 'string' },
  id: { type: 'string', multiple: true },
  key: { type: 'string', multiple: true },
  reason: { type: 'string' },
  'reason-contains': { type: 'string' },
  class: { type: 'string' },
  since: { type: 'string' },
  until: { type: 'string' },
  status: { type: 'string' },
  limit: { type: 'string', default: '50' },
  json: { type: 'boolean', default: false },
  initiator: { type: 'string' },
  rate: { type: 'string', default: '5' },
  burst: { type: 'string', default: '10' },
  'max-count': { type: 'string', default: '100' },
  'failure-threshold': { type: 'string', default: '5' },
  'edit-payload': { type: 'string' },
  wait: { type: 'boolean', default: false },
  'wait-timeout': { type: 'string', default: '300' },
  'hold-timeout': { type: 'string', default: '900' },
  force: { type: 'boolean', default: false },
  'mark-done': { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

type Values = ReturnType<
  typeof parseArgs<{ options: typeof options; allowPositionals: true }>
>['values'];

/** A flag's positive number (at most `max`), or an error naming the flag. */
export function positiveNumber(v: string | undefined, flag: string, max = Infinity): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0 || n > max)
    throw new Error(
      `${flag} must be a positive number${max < Infinity ? ` up to ${max}` : ''}, got "${v}"`,
    );
  return n;
}

/** A flag's ISO date, or an error naming the flag and an example. */
export function date(v: string | undefined, flag: string): Date | undefined {
  if (v === undefined) return undefined;
  const d = new Date(v);
  if (Number.isNaN(d.getTime()))
    throw new Error(`${flag} must be an ISO date, e.g. 2026-11-30T08:00:00Z; got "${v}"`);
  return d;
}

const STATUSES = ['quarantined', 'replayed', 'discarded', 'superseded', 'marked_done'] as const;

/** An enumerated option: a typo is refused with the valid values, never matched against nothing. */
export function oneOf<T extends string>(
  v: string | undefined,
  valid: readonly T[],
  flag: string,
): T | undefined {
  if (v === undefined) return undefined;
  if ((valid as readonly string[]).includes(v)) return v as T;
  throw new Error(`${flag} must be one of ${valid.join(', ')}; got "${v}"`);
}

/** --id values: dead-letter ids. */
export function deadLetterIds(values: string[] | undefined): number[] {
  return (values ?? []).map((v) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1)
      throw new Error(`--id must be a dead-letter id (a positive integer), got "${v}"`);
    return n;
  });
}

function selector(o: Values, queue: string): Selector {
  const ids = deadLetterIds(o.id);
  return {
    queue,
    ids,
    keys: o.key ?? [],
    reason: o['reason-contains'] || undefined,
    failureClass: oneOf(o.class, FAILURE_CLASSES, '--class'),
    since: date(o.since, '--since'),
    until: date(o.until, '--until'),
    status: oneOf(o.status, STATUSES, '--status'),
  };
}

/** What `kubectl jobworker dlq` knows beyond the queue: the JobWorker whose holds and budget a replay respects. */
export interface DlqTarget {
  jobWorker: string;
  /** its status, and its spec when it parses (the downstream budget caps a replay's rate): one read */
  read(): Promise<{ spec?: JobWorkerSpec; status?: JobWorkerStatus }>;
  /**
   * The user the apiserver authenticated (SelfSubjectReview), asked only by a
   * replay or discard: the audit's initiator. A typed --initiator is then only
   * informational, kept beside the reason.
   */
  authenticatedUser(): Promise<string>;
}

/** Who the audit names, and the reason it keeps: the authenticated user when there is one. */
async function auditedBy(
  o: Values,
  reason: string,
  target: DlqTarget | undefined,
): Promise<{ initiator: string; reason: string }> {
  if (!target)
    return { initiator: o.initiator ?? process.env.USER ?? os.userInfo().username, reason };
  const user = await target.authenticatedUser();
  return {
    initiator: user,
    reason:
      o.initiator && o.initiator !== user
        ? `${reason} (initiator given as ${o.initiator})`
        : reason,
  };
}

export async function runDlq(argv: string[], target?: DlqTarget): Promise<number> {
  const { values: o, positionals } = parseArgs({ args: argv, options, allowPositionals: true });
  const [sub, ...rest] = positionals;
  if (o.help || !sub) {
    console.log(DLQ_HELP);
    return sub || o.help ? 0 : 2;
  }
  if (!['list', 'show', 'replay', 'discard'].includes(sub))
    throw new Error(`unknown dlq command "${sub}": use list, show, replay or discard`);
  const claimsUrl = o['claims-url'] ?? process.env.JOBFLEET_CLAIMS_URL;
  if (!claimsUrl) throw new Error('--claims-url is required (or set JOBFLEET_CLAIMS_URL)');
  const queue = o.queue ?? process.env.JOBFLEET_QUEUE;
  if (!queue && sub !== 'show')
    throw new Error(
      '--queue is required (or set JOBFLEET_QUEUE): the work queue the dead letters came from',
    );
  if (o.schema !== undefined && !/^[A-Za-z_][A-Za-z0-9_$]*$/.test(o.schema))
    throw new Error(`--schema must be a plain identifier, got "${o.schema}"`);

  const pool = new pg.Pool({
    connectionString: claimsUrl,
    max: 2,
    connectionTimeoutMillis: 5000,
    ...(o.schema ? { options: `-c search_path=${o.schema}` } : {}),
  });
  pool.on('error', () => undefined);
  try {
    await pool.query('select 1').catch((err: Error) => {
      throw new Error(`cannot reach ${redactUrl(claimsUrl)}: ${err.message}`, { cause: err });
    });
    const store = new DeadLetterStore(pool);
    if (sub === 'list') return await list(store, o, queue as string);
    if (sub === 'show') return await show(store, o, rest[0]);
    // Replay and discard write audit rows: bring the tables to this version first.
    await new ClaimStore(pool).migrate();
    return await act(sub as 'replay' | 'discard', store, o, queue as string, target);
  } finally {
    await pool.end().catch(() => undefined);
  }
}

async function list(store: DeadLetterStore, o: Values, queue: string): Promise<number> {
  const s = selector(o, queue);
  const limit = positiveNumber(o.limit, '--limit');
  const [rows, total] = await Promise.all([store.list(s, limit), store.count(s)]);
  if (o.json) {
    console.log(JSON.stringify({ total, rows: rows.map(publicRow) }, null, 2));
    return 0;
  }
  printDeadLetters(
    `${total} ${s.status ?? 'quarantined'} dead letter${total === 1 ? '' : 's'} from ${queue}${total > rows.length ? ` (first ${rows.length})` : ''}`,
    rows.map((r) => ({
      id: r.id,
      at: r.dead_lettered_at,
      failureClass: r.failure_class,
      attempts: r.attempts,
      key: r.key,
      type: r.type,
      reason: r.reason,
    })),
  );
  return 0;
}

/** A dead letter as `dlq list` prints it (from the database, or from a dry run's status). */
export interface ListedDeadLetter {
  id: number;
  at: Date;
  failureClass: string;
  attempts: number;
  key?: string | null;
  type?: string | null;
  reason: string;
}

/** The heading, then one aligned row per dead letter. */
export function printDeadLetters(heading: string, rows: ListedDeadLetter[]): void {
  console.log(heading);
  if (!rows.length) return;
  const now = Date.now();
  const table = [
    ['ID', 'AGE', 'CLASS', 'ATTEMPTS', 'KEY', 'TYPE', 'REASON'],
    ...rows.map((r) => [
      String(r.id),
      age((now - r.at.getTime()) / 1000),
      r.failureClass,
      String(r.attempts),
      r.key ?? '-',
      r.type ?? '-',
      r.reason.length > 60 ? `${r.reason.slice(0, 59)}…` : r.reason,
    ]),
  ];
  const widths = table[0]!.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  for (const row of table)
    console.log(
      row
        .map((c, i) => c.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    );
}

async function show(store: DeadLetterStore, o: Values, idArg: string | undefined): Promise<number> {
  const id = Number(idArg);
  if (!Number.isInteger(id) || id < 1)
    throw new Error('usage: jobfleet dlq show ID (an id from `jobfleet dlq list`)');
  const row = await store.get(id);
  if (!row) throw new Error(`no dead letter with id ${id}`);
  const audit = await store.auditOf(id);
  if (o.json) {
    console.log(JSON.stringify({ ...publicRow(row), payload: payloadText(row), audit }, null, 2));
    return 0;
  }
  for (const [k, v] of Object.entries(publicRow(row))) console.log(`${k.padEnd(18)} ${cell(v)}`);
  console.log(
    `${'payload'.padEnd(18)} ${payloadText(row) ?? '(not stored: it is in the dead-letter queue; set JOBFLEET_DEAD_LETTER_PAYLOADS=store to keep payloads here)'}`,
  );
  console.log(audit.length ? '\naudit:' : '\naudit: none');
  for (const a of audit)
    console.log(
      `  ${a.at.toISOString()}  ${a.action}  by ${a.initiator}: ${a.reason}${a.new_payload_hash && a.new_payload_hash !== a.old_payload_hash ? ` (payload ${a.old_payload_hash.slice(0, 12)} → ${a.new_payload_hash.slice(0, 12)})` : ''}`,
    );
  return 0;
}

/** A replay's or discard's checked selection, the audit's names and the broker it acts through. */
interface ActContext {
  store: DeadLetterStore;
  o: Values;
  queue: string;
  target: DlqTarget | undefined;
  selector: Selector;
  deadLetterQueue: string;
  initiator: string;
  reason: string;
  deps: ReplayDeps;
  bar: ReturnType<typeof progressBar>;
}

async function act(
  sub: 'replay' | 'discard',
  store: DeadLetterStore,
  o: Values,
  queue: string,
  target: DlqTarget | undefined,
): Promise<number> {
  const amqpUrl = o['amqp-url'] ?? process.env.JOBFLEET_BROKER_URL;
  if (!amqpUrl) throw new Error('--amqp-url is required (or set JOBFLEET_BROKER_URL)');
  const typedReason = (o.reason ?? '').trim();
  if (!typedReason)
    throw new ReplayRefused(`${sub} needs --reason "why" (recorded in the audit trail)`);
  const { initiator, reason } = await auditedBy(o, typedReason, target);
  const s = { ...selector(o, queue), status: undefined }; // only quarantined entries are acted on
  if (!s.ids?.length && !s.keys?.length && !s.failureClass && !s.reason && !s.since && !s.until)
    throw new Error(
      `${sub} needs a selection: --id, --key, --class, --reason-contains, --since or --until`,
    );
  const deadLetterQueue =
    o['dead-letter-queue'] ?? process.env.JOBFLEET_DEAD_LETTER_QUEUE ?? `${queue}.dlq`;
  // a cluster's nodes may be listed, as for the workers: the first that answers
  const conn = await connectAny(amqpUrl, (url) => amqp.connect(url)).catch((err: Error) => {
    throw new Error(`cannot reach ${redactBrokerUrls(amqpUrl)}: ${err.message}`, { cause: err });
  });
  // A refusal closes the channel (and may close the connection): the operation that caused it
  // rejects with the broker's words, said below; the event itself must not end the process.
  conn.on('error', () => undefined);
  const bar = progressBar(sub);
  try {
    const channel = await conn.createConfirmChannel();
    channel.on('error', () => undefined);
    const deps: ReplayDeps = {
      store,
      channel,
      now: Date.now,
      sleep: (ms: number) => new Promise<void>((r) => setTimeout(r, ms)),
      onProgress: bar.update,
    };
    const c: ActContext = {
      store,
      o,
      queue,
      target,
      selector: s,
      deadLetterQueue,
      initiator,
      reason,
      deps,
      bar,
    };
    const p = sub === 'discard' ? await discardSelected(c) : await replaySelected(c);
    if (!p) return 3;
    // Closing the channel first: the broker settles its acks before it answers the close.
    await channel.close();
    bar.end();
    console.log(p.message);
    return p.stoppedBy || p.notFound || p.failedAgain ? 1 : 0;
  } catch (err) {
    bar.end(); // the error on a line of its own
    throw err;
  } finally {
    await conn.close().catch(() => undefined);
  }
}

/** `dlq discard`: the selected dead letters resolved as discarded, at most --max-count. */
async function discardSelected(c: ActContext): Promise<ReplayProgress> {
  return discard(
    {
      selector: c.selector,
      deadLetterQueue: c.deadLetterQueue,
      initiator: c.initiator,
      reason: c.reason,
      maxCount: positiveNumber(c.o['max-count'], '--max-count'),
      markDone: c.o['mark-done'],
    },
    c.deps,
  );
}

/**
 * `dlq replay`: after any hold, at the rate the downstream budget allows;
 * undefined when a hold outlasted --hold-timeout (said on stderr; exit 3).
 */
async function replaySelected(c: ActContext): Promise<ReplayProgress | undefined> {
  const { o } = c;
  const editedPayload = readEditedPayload(o['edit-payload']);
  const replayId = `cli-${randomUUID()}`;
  // Every argument checked before anything waits: a typo is said at once, not after a hold.
  const requested = positiveNumber(o.rate, '--rate');
  const burst = positiveNumber(o.burst, '--burst');
  const maxCount = positiveNumber(o['max-count'], '--max-count');
  const failureThreshold = positiveNumber(o['failure-threshold'], '--failure-threshold');
  const holdTimeoutMs = positiveNumber(o['hold-timeout'], '--hold-timeout') * 1000;
  const waitTimeoutMs = positiveNumber(o['wait-timeout'], '--wait-timeout') * 1000;
  // While the incident lasts nothing is replayed (../dlq/replay-hold.ts), unless forced.
  const gate = o.force ? undefined : replayHoldGate(c, holdTimeoutMs);
  if (!(await waitOutHold(gate))) return undefined;
  const allowed = () => allowedRate(c.target, requested);
  const rate = await allowed();
  if (rate.capped) console.error(`replaying at ${rate.capped}`);
  const replayed = await replay(
    {
      selector: c.selector,
      deadLetterQueue: c.deadLetterQueue,
      replayId,
      initiator: c.initiator,
      reason: o.force ? `${c.reason} (forced: replayed whatever the incident)` : c.reason,
      ratePerSecond: rate.rate,
      burst,
      maxCount,
      failureThreshold,
      editedPayload,
    },
    {
      ...c.deps,
      ...(gate && { gate }),
      ...(c.target && { rate: async () => (await allowed()).rate }),
    },
  ).catch((err: unknown) => {
    if (!(err instanceof HoldTimeout)) throw err;
    console.error(`${err.message} The replay stopped there: run it again later.`);
    return undefined;
  });
  if (!replayed) return undefined;
  const p =
    o.wait && !replayed.stoppedBy
      ? await awaitOutcomes(c, replayed, replayId, waitTimeoutMs)
      : replayed;
  console.log(`replay id: ${replayId}`);
  return p;
}

/** --edit-payload's JSON, read before anything is replayed. */
function readEditedPayload(edit: string | undefined): unknown {
  if (edit === undefined) return undefined;
  try {
    return JSON.parse(readFileSync(edit, 'utf8'));
  } catch (err) {
    throw new Error(`--edit-payload ${edit}: ${(err as Error).message}`, { cause: err });
  }
}

/** Waits while the JobWorker's incident lasts (askHold), saying so on stderr. */
function replayHoldGate(c: ActContext, timeoutMs: number): () => Promise<void> {
  return holdGate({
    check: async () =>
      askHold(c.store, {
        jobWorker: c.target?.jobWorker ?? c.queue,
        queue: c.queue,
        failureClass: c.selector.failureClass,
        status: (await c.target?.read())?.status,
        now: Date.now(),
      }),
    onHeld: (h) =>
      console.error(
        `held (${h.reason}): ${h.message} Waiting; --force replays anyway (recorded in the audit).`,
      ),
    onResumed: (was) => console.error(`the hold ended (${was.reason}): replaying`),
    now: Date.now,
    timeoutMs,
  });
}

/** False when a hold outlasted its timeout before the replay began (nothing replayed). */
async function waitOutHold(gate: (() => Promise<void>) | undefined): Promise<boolean> {
  try {
    await gate?.();
    return true;
  } catch (err) {
    if (!(err instanceof HoldTimeout)) throw err;
    console.error(`${err.message} Nothing was replayed.`);
    return false;
  }
}

/**
 * Replayed jobs share the downstream budget with first attempts: never
 * faster than it lets the fleet complete them (as a JobReplay), asked again
 * while the replay runs (the fleet's capacity moves).
 */
async function allowedRate(target: DlqTarget | undefined, requested: number) {
  const jw = await target?.read();
  return jw ? replayRate(requested, jw.spec, jw.status) : { rate: requested };
}

/** --wait: polls the replayed jobs' outcomes each second until none is pending or --wait-timeout passes. */
async function awaitOutcomes(
  c: ActContext,
  replayed: ReplayProgress,
  replayId: string,
  waitTimeoutMs: number,
): Promise<ReplayProgress> {
  let p = replayed;
  const until = Date.now() + waitTimeoutMs;
  while (p.pending > 0 && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 1000));
    p = { ...p, ...(await c.store.replayCounts(replayId)) };
    c.bar.update({ ...p, done: false });
  }
  p.message = `replayed ${p.replayed}, skipped ${p.skipped} already completed; completed ${p.completed}, failed again ${p.failedAgain}, pending ${p.pending}`;
  return p;
}

/** A bar on a TTY, plain lines (at most one a second) otherwise. */
function progressBar(what: string) {
  const tty = process.stdout.isTTY === true;
  let lastLine = 0;
  let drawn = false;
  return {
    update: (p: ReplayProgress) => {
      const done = p.replayed + p.skipped;
      const text = `${what}: ${done}/${p.selected} (replayed ${p.replayed}, skipped ${p.skipped}, completed ${p.completed}, failed again ${p.failedAgain})`;
      if (tty) {
        const width = 30;
        const filled = p.selected ? Math.round((done / p.selected) * width) : width;
        process.stdout.write(`\r[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${text}`);
        drawn = true;
      } else if (Date.now() - lastLine >= 1000 || p.done) {
        lastLine = Date.now();
        console.log(text);
      }
    },
    end: () => {
      if (drawn) process.stdout.write('\n');
    },
  };
}

function age(seconds: number): string {
  if (seconds < 120) return `${Math.round(seconds)}s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)}m`;
  if (seconds < 172_800) return `${Math.round(seconds / 3600)}h`;
  return `${Math.round(seconds / 86_400)}d`;
}

function cell(v: unknown): string {
  if (v instanceof Date) return v.toISOString();
  if (v === null || v === undefined) return '-';
  return typeof v === 'object' ? JSON.stringify(v) : `${v as string | number | boolean}`;
}

/** The row without its payload bytes (shown separately, as text). */
function publicRow(r: DeadLetterRow): Record<string, unknown> {
  return Object.fromEntries(Object.entries(r).filter(([k]) => k !== 'payload'));
}

function payloadText(r: DeadLetterRow): string | undefined {
  return r.payload ? r.payload.toString('utf8') : undefined;
}
