// Replay and discard: one pass over the dead-letter queue. Each message is
// matched to its PostgreSQL row by (delivery id, attempts). A selected one is
// replayed (rate-limited) or discarded; any other is put back at the tail, so
// nothing waits unacked while the pass runs. The order per replayed message:
// reset the key's claim → publish the new delivery (confirmed) → resolve the
// row with its audit row → ack the DLQ copy. A crash in between leaves the
// row quarantined (a re-run replays it; the claim absorbs a second delivery)
// or a spare DLQ copy (harmless: `verify` checks the DLQ holds at least its
// entries).
import { createHash } from 'node:crypto';
import type { ConfirmChannel, GetMessage } from 'amqplib';
import { copyProps, deliveryIdOf } from '../../worker/delivery.js';
import { HEADERS, sendConfirmed } from '../../worker/producer.js';
import { TIMESTAMP_MS_HEADER } from '../../worker/queue-head.js';
import type { DeadLetterRow, DeadLetterStore, ReplayCounts, Selector } from './store.js';
import { RateLimiter } from './rate-limiter.js';

export const REPLAY_HEADERS = {
  replayOf: 'x-jobfleet-replay-of',
  replayId: 'x-jobfleet-replay-id',
  replayedBy: 'x-jobfleet-replayed-by',
} as const;

export interface ReplayRequest {
  selector: Selector;
  deadLetterQueue: string;
  /** identifies this replay in the audit trail (a JobReplay's uid, or a generated id) */
  replayId: string;
  initiator: string;
  reason: string;
  ratePerSecond: number;
  /** at most this many at once (the token bucket's size) */
  burst: number;
  maxCount: number;
  /** stop once this many replayed jobs have failed again */
  failureThreshold: number;
  /** a new payload for the one selected dead letter; the edit's reason is `reason` */
  editedPayload?: unknown;
}

export interface ReplayProgress extends ReplayCounts {
  selected: number;
  /** selected entries whose message was not found in the dead-letter queue */
  notFound: number;
  scanned: number;
  done: boolean;
  stoppedBy?: 'failure-threshold';
  message: string;
}

export interface ReplayDeps {
  store: DeadLetterStore;
  channel: ConfirmChannel;
  now: () => number;
  sleep: (ms: number) => Promise<void>;
  onProgress?: (p: ReplayProgress) => void;
  /** how often the failure threshold is checked, in replayed messages (1: before each) */
  checkEvery?: number;
  /** stops the pass between messages (the operator lost its lease, or is shutting down) */
  signal?: AbortSignal;
  /**
   * Before each replayed message and between the slices of a wait for the
   * rate: resolves when replaying may go on (the JobReplay controller waits
   * here while the incident lasts: ./replay-hold.ts). Called before a message
   * is taken, so none waits unacked through a hold.
   */
  gate?: () => Promise<void>;
  /**
   * The rate allowed now, asked again every RATE_REFRESH_MS while the replay
   * runs: the downstream budget's cap (./replay-hold.ts replayRate) moves
   * with the fleet's capacity. Unset: `ratePerSecond` throughout.
   */
  rate?: () => Promise<number>;
}

export class ReplayRefused extends Error {
  override readonly name = 'ReplayRefused';
}

/**
 * The broker refused the broker user an operation of the pass (ACCESS_REFUSED):
 * no retry fixes it. Its message says what a replay and a discard need, with
 * RabbitMQ's own words (which name the queue or exchange refused).
 */
class BrokerRefused extends Error {
  override readonly name = 'BrokerRefused';
}

function refusal(err: unknown, mode: 'replay' | 'discard', deadLetterQueue: string): unknown {
  const message = err instanceof Error ? err.message : String(err);
  if (!/ACCESS[-_]REFUSED/.test(message)) return err;
  const words = /ACCESS[-_]REFUSED - (.*?)"?$/.exec(message)?.[1] ?? 'ACCESS_REFUSED';
  return new BrokerRefused(
    `RabbitMQ refused the ${mode} (${words}): a ${mode} needs read permission on the dead-letter queue "${deadLetterQueue}" and write on the default exchange (amq.default); docs/compatibility.md#permissions has the grant`,
    { cause: err },
  );
}

/** The longest a replay sleeps for its rate before it asks its hold gate again. */
const RATE_WAIT_SLICE_MS = 1000;

/** How often a running replay asks for its rate again (ReplayDeps.rate). */
export const RATE_REFRESH_MS = 15_000;

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** (delivery id, attempts): what ties a DLQ message to its row. */
function identity(deliveryId: string, attempts: number): string {
  return `${deliveryId}\u0000${attempts}`;
}

function messageIdentity(m: GetMessage): string {
  let env: { id?: string } = {};
  try {
    env = JSON.parse(m.content.toString('utf8')) as { id?: string };
  } catch {
    // not JSON: identified by message id or hash
  }
  const attempts = Number(m.properties.headers?.[HEADERS.attempt] ?? 0);
  return identity(deliveryIdOf(m, typeof env.id === 'string' ? env : {}), attempts);
}

/** The body with its payload replaced; id, key, type and schema version stay. */
export function editBody(original: Buffer, payload: unknown): Buffer {
  let env: Record<string, unknown>;
  try {
    env = JSON.parse(original.toString('utf8')) as Record<string, unknown>;
  } catch {
    throw new ReplayRefused(
      'the dead letter is not a JSON envelope: an edit replaces the payload of an envelope; discard it instead',
    );
  }
  if (typeof env !== 'object' || env === null || typeof env.key !== 'string')
    throw new ReplayRefused(
      'the dead letter has no idempotency key: an edit must keep the original key; discard it instead',
    );
  return Buffer.from(JSON.stringify({ ...env, payload }));
}

/** Back at the tail, unchanged. */
async function putBack(ch: ConfirmChannel, dlq: string, m: GetMessage): Promise<void> {
  const p = m.properties;
  await sendConfirmed(ch, dlq, m.content, {
    ...copyProps(p),
    timestamp: p.timestamp as number | undefined,
    headers: p.headers,
  });
}

export async function replay(req: ReplayRequest, d: ReplayDeps): Promise<ReplayProgress> {
  if (req.editedPayload !== undefined && !req.reason.trim())
    throw new ReplayRefused('an edited payload needs a reason: pass --reason "why the edit"');
  if (!req.reason.trim()) throw new ReplayRefused('a replay needs a reason: pass --reason "why"');
  if (!req.initiator.trim())
    throw new ReplayRefused('a replay needs an initiator: pass --initiator');
  const before = await d.store.replayCounts(req.replayId); // a resumed replay counts what it already did
  const budget = Math.max(0, req.maxCount - before.replayed - before.skipped);
  const rows = budget ? await d.store.list(req.selector, budget) : [];
  if (req.editedPayload !== undefined && rows.length !== 1)
    throw new ReplayRefused(
      `an edit applies to exactly one dead letter; the selection has ${rows.length}: select it with --id`,
    );
  return pass(rows, d, req, 'replay', before);
}

export interface DiscardRequest {
  selector: Selector;
  deadLetterQueue: string;
  initiator: string;
  reason: string;
  maxCount: number;
  /** in_doubt dead letters only: the person decided the effect happened; the key completes without a run */
  markDone?: boolean;
}

export async function discard(req: DiscardRequest, d: ReplayDeps): Promise<ReplayProgress> {
  if (!req.reason.trim()) throw new ReplayRefused('a discard needs a reason: pass --reason "why"');
  if (!req.initiator.trim())
    throw new ReplayRefused('a discard needs an initiator: pass --initiator');
  const rows = await d.store.list(req.selector, req.maxCount);
  const other = rows.filter((r) => r.failure_class !== 'in_doubt' || !r.key);
  if (req.markDone && other.length)
    throw new ReplayRefused(
      `--mark-done decides held in_doubt dead letters only; ${other.map((r) => r.id).join(', ')} ${other.length === 1 ? 'is' : 'are'} not: narrow the selection (--class in_doubt), or discard without --mark-done`,
    );
  return pass(
    rows,
    d,
    {
      ...req,
      replayId: '',
      ratePerSecond: Number.MAX_SAFE_INTEGER,
      burst: Number.MAX_SAFE_INTEGER,
      failureThreshold: Number.MAX_SAFE_INTEGER,
    },
    'discard',
    { replayed: 0, skipped: 0, completed: 0, failedAgain: 0, pending: 0 },
    req.markDone === true,
  );
}

/** A pass in progress: what is still wanted, the rate, and the counts it reports. */
interface PassState {
  d: ReplayDeps;
  req: ReplayRequest;
  mode: 'replay' | 'discard';
  /** a discard that marks each in_doubt job done */
  markDone: boolean;
  /** the selected rows not met yet, by identity */
  wanted: Map<string, DeadLetterRow>;
  limiter: RateLimiter;
  p: ReplayProgress;
  discarded: number;
  /** replayed messages since the failure threshold was last checked */
  sinceCheck: number;
  rateAskedAt: number;
  report: () => void;
}

async function pass(
  rows: DeadLetterRow[],
  d: ReplayDeps,
  req: ReplayRequest,
  mode: 'replay' | 'discard',
  before: ReplayCounts,
  markDone = false,
): Promise<ReplayProgress> {
  try {
    return await passOver(rows, d, req, mode, before, markDone);
  } catch (err) {
    throw refusal(err, mode, req.deadLetterQueue);
  }
}

async function passOver(
  rows: DeadLetterRow[],
  d: ReplayDeps,
  req: ReplayRequest,
  mode: 'replay' | 'discard',
  before: ReplayCounts,
  markDone: boolean,
): Promise<ReplayProgress> {
  const ch = d.channel;
  const p: ReplayProgress = {
    ...before,
    selected: rows.length + before.replayed + before.skipped,
    notFound: 0,
    scanned: 0,
    done: false,
    message: '',
  };
  const s: PassState = {
    d,
    req,
    mode,
    markDone,
    wanted: new Map(rows.map((r) => [identity(r.delivery_id, r.attempts), r])),
    limiter: new RateLimiter(req.ratePerSecond, req.burst),
    p,
    discarded: 0,
    sinceCheck: 0,
    rateAskedAt: d.now(),
    report: () => d.onProgress?.({ ...p }),
  };
  // Messages dead-lettered during the pass land behind the ones counted here.
  const depth = s.wanted.size ? (await ch.checkQueue(req.deadLetterQueue)).messageCount : 0;
  while (s.wanted.size && p.scanned < depth && !d.signal?.aborted) {
    if (mode === 'replay') {
      const turn = await awaitTurn(s);
      if (turn === 'stop') break;
      if (turn === 'wait') continue;
    }
    const m = await ch.get(req.deadLetterQueue, { noAck: false });
    if (!m) break;
    p.scanned++;
    const row = await matchOrPutBack(s, m);
    if (!row) continue;
    if (mode === 'discard') {
      await discardOne(s, row, m);
      continue;
    }
    if (await failureThresholdReached(s, m)) break;
    await replayOne(s, row, m);
  }
  return finishPass(s, rows.length);
}

/**
 * Before a replay takes a message: the hold gate, the rate asked again when
 * due, then the rate's turn. 'wait' when the turn has not come yet (go round
 * again), 'stop' when the pass was aborted while held.
 */
async function awaitTurn(s: PassState): Promise<'take' | 'wait' | 'stop'> {
  const { d } = s;
  if (d.gate) {
    await d.gate();
    if (d.signal?.aborted) return 'stop';
  }
  if (d.rate && d.now() - s.rateAskedAt >= RATE_REFRESH_MS) {
    s.rateAskedAt = d.now();
    s.limiter.setRate(await d.rate(), s.rateAskedAt);
  }
  // Wait for the rate here, before taking a message, in slices that go back to the gate:
  // a hold that starts while the replay waits its turn is seen at the gate's next check,
  // not after a slow rate's whole gap (up to 100 s at 0.01/s).
  const due = s.limiter.due(d.now());
  if (due > 0) {
    await d.sleep(Math.min(due, RATE_WAIT_SLICE_MS));
    return 'wait';
  }
  return 'take';
}

/** The message's selected row, taken off the wanted list; any other message is put back at the tail. */
async function matchOrPutBack(s: PassState, m: GetMessage): Promise<DeadLetterRow | undefined> {
  const ch = s.d.channel;
  const row = s.wanted.get(messageIdentity(m));
  if (!row) {
    await putBack(ch, s.req.deadLetterQueue, m);
    ch.ack(m);
    return undefined;
  }
  s.wanted.delete(messageIdentity(m));
  return row;
}

async function discardOne(s: PassState, row: DeadLetterRow, m: GetMessage): Promise<void> {
  const who = { initiator: s.req.initiator, reason: s.req.reason };
  if (s.markDone) await s.d.store.markDone(row, who);
  else await s.d.store.resolve(row, { status: 'discarded', action: 'discarded', ...who });
  s.d.channel.ack(m);
  s.discarded++;
  s.report();
}

/**
 * Every `checkEvery` replayed messages: the replay's counts, and whether
 * enough replayed jobs failed again to stop (the message then goes back).
 */
async function failureThresholdReached(s: PassState, m: GetMessage): Promise<boolean> {
  if (++s.sinceCheck < (s.d.checkEvery ?? 1)) return false;
  s.sinceCheck = 0;
  const counts = await s.d.store.replayCounts(s.req.replayId);
  Object.assign(s.p, counts);
  if (counts.failedAgain < s.req.failureThreshold) return false;
  s.d.channel.nack(m, false, true);
  s.p.stoppedBy = 'failure-threshold';
  return true;
}

/** One selected message: skipped if its key completed meanwhile, else republished to its queue. */
async function replayOne(s: PassState, row: DeadLetterRow, m: GetMessage): Promise<void> {
  const { d, req } = s;
  const wait = s.limiter.take(d.now()); // 0 unless the clock stepped back: waited for above
  if (wait > 0) await d.sleep(wait);

  if (row.key && (await d.store.claimState(row.key)) === 'completed') {
    // The key completed meanwhile (a later copy ran): never run it twice.
    await d.store.resolve(row, {
      status: 'superseded',
      action: 'skipped_completed',
      initiator: req.initiator,
      reason: req.reason,
      replayId: req.replayId,
    });
    d.channel.ack(m);
    s.p.skipped++;
    s.report();
    return;
  }
  await republish(s, row, m);
}

/** Reset the key's claim → publish the new delivery (confirmed) → resolve the row → ack the DLQ copy. */
async function republish(s: PassState, row: DeadLetterRow, m: GetMessage): Promise<void> {
  const { d, req } = s;
  const body = req.editedPayload !== undefined ? editBody(m.content, req.editedPayload) : m.content;
  const deliveryId = `${row.delivery_id}~replay-${req.replayId}`;
  if (row.key) await d.store.resetClaim(row.key);
  const props = m.properties;
  const headers = { ...(props.headers ?? {}) } as Record<string, unknown>;
  for (const h of [
    HEADERS.deadLetteredAt,
    HEADERS.reason,
    HEADERS.failureClass,
    HEADERS.lastError,
    HEADERS.notBefore,
  ])
    delete headers[h];
  await sendConfirmed(d.channel, row.queue, body, {
    ...copyProps(props),
    messageId: deliveryId,
    timestamp: Math.floor(d.now() / 1000),
    headers: {
      ...headers,
      // back in the work queue now: its age counts from here, not from the first publish
      [TIMESTAMP_MS_HEADER]: d.now(),
      [HEADERS.attempt]: 0,
      [REPLAY_HEADERS.replayOf]: row.id,
      [REPLAY_HEADERS.replayId]: req.replayId,
      [REPLAY_HEADERS.replayedBy]: req.initiator,
    },
  });
  await d.store.resolve(row, {
    status: 'replayed',
    action: 'replayed',
    initiator: req.initiator,
    reason: req.reason,
    replayId: req.replayId,
    newPayloadHash: sha256(body),
    deliveryId,
  });
  d.channel.ack(m);
  s.p.replayed++;
  s.p.pending++;
  s.report();
}

/** The final counts and message, reported once more with done set. */
async function finishPass(s: PassState, selectedRows: number): Promise<ReplayProgress> {
  const { d, req, p } = s;
  p.notFound = p.stoppedBy || d.signal?.aborted ? 0 : s.wanted.size;
  if (s.mode === 'replay') Object.assign(p, await d.store.replayCounts(req.replayId));
  p.done = true;
  p.message =
    s.mode === 'discard'
      ? `${s.markDone ? 'marked done' : 'discarded'} ${s.discarded} of ${selectedRows} selected${p.notFound ? `; ${p.notFound} not found in ${req.deadLetterQueue}` : ''}`
      : summary(p, req);
  s.report();
  return p;
}

function summary(p: ReplayProgress, req: ReplayRequest): string {
  const parts = [
    `replayed ${p.replayed} of ${p.selected} selected`,
    `skipped ${p.skipped} already completed`,
    `completed ${p.completed}, failed again ${p.failedAgain}, pending ${p.pending}`,
  ];
  if (p.notFound) parts.push(`${p.notFound} not found in ${req.deadLetterQueue}`);
  if (p.stoppedBy)
    parts.push(
      `stopped early: ${p.failedAgain} replayed jobs failed again (threshold ${req.failureThreshold}); fix the cause before replaying the rest`,
    );
  return parts.join('; ');
}
