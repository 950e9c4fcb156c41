// The per-delivery state machine (docs/worker.md has it as a table):
// decode → claim → run → record → ack. The rule that everything here serves:
// a message is acked only after its durable terminal record exists (a
// completed claim, a confirmed retry copy, or a confirmed dead letter plus its
// PostgreSQL record). When a record cannot be written the delivery is
// returned to the broker unacked.
import { createHash } from 'node:crypto';
import type { ConsumeMessage, MessageProperties } from 'amqplib';
import type pg from 'pg';
import type { Logger } from 'pino';
import { retryDelayMs, tierFor } from './backoff.js';
import { DELIVERY_LIMIT } from './topology.js';
import type { AckEntry, ClaimOutcome, ClaimStore, DeadLetterRecord } from './claim-store.js';
import type { LeaseKeeper } from './lease-keeper.js';
import type { Contract } from './contract.js';
import { compactReason, decodeDelivery, type Envelope, type FailureClass } from './envelope.js';
import { MAX_RETRY_AFTER_MS, Permanent, Throttled } from './errors.js';
import { isInt32, storable } from './storable.js';
import { isConnectionError, isMessageDataError, isStoreError } from './store-errors.js';
import type { WorkerMetrics } from './metrics.js';
import { HEADERS } from './producer.js';
import { RunSignal } from './run-signal.js';
import { TIMESTAMP_MS_HEADER } from './queue-head.js';
import { outboxEntry, type OutboxEntry, type OutboxJob } from './outbox/index.js';
import {
  ClaimLost,
  describeDoubt,
  HoldForPerson,
  InDoubt,
  resolveDoubt,
  RunRecord,
  type Doubt,
  type InDoubtPolicy,
  type PreviousAttempt,
  type ReconcileAnswer,
  type ReconcileContext,
  type Resolution,
  type StepOptions,
} from './in-doubt/index.js';

export interface Job<P = unknown> extends Envelope<P> {
  /** 1 for the first run; counts every run of this key, crashed ones included, throttled ones not */
  attempt: number;
  /** runs of this key that the dependency throttled (Throttled), before this one */
  throttled: number;
}

/** Follow-up jobs: written to the outbox with the completion record (docs/outbox.md). */
export interface FollowUps {
  /**
   * A job for `queue` that exists if and only if this one completes: it is
   * inserted into the claims database's outbox in the same transaction as
   * the completion record, and the relay publishes it after the commit.
   * Throws Permanent when the job is malformed (e.g. its key rule).
   */
  enqueue<P>(queue: string, job: OutboxJob<P>): void;
}

export interface HandlerContext extends FollowUps {
  /** the idempotency key: pass it to the downstream so that its effect happens once */
  key: string;
  attempt: number;
  /** aborts when the drain deadline passes or the claim's lease is lost */
  signal: AbortSignal;
  log: Logger;
  /** transactional mode: the client whose transaction also records completion */
  tx?: pg.PoolClient;
  /** the attempt before this one (how it ended, its intent); undefined on a key's first run */
  previous?: PreviousAttempt;
  /**
   * Records, durably and fenced by this run's claim, what it is about to do
   * (e.g. the request reference it will send): call it right before the
   * downstream call. Throws ClaimLost when the claim is no longer this
   * run's: then make no call. The next attempt's reconcile reads it.
   */
  intend(intent: unknown): Promise<void>;
  /**
   * A recovery point: runs `fn` and records its result before the next step
   * starts. A re-run returns the recorded result without calling `fn`; the
   * step an in-doubt attempt was in is decided by `opts.reconcile` first.
   */
  step<T>(name: string, fn: () => Promise<T>, opts?: StepOptions): Promise<T>;
}

export type Handler = (job: Job, ctx: HandlerContext) => Promise<unknown>;

/**
 * Asks the downstream whether an in-doubt attempt's effect happened
 * (docs/in-doubt.md). One that answers done enqueues the follow-ups the run
 * would have (ctx.enqueue): they are written with the completion record.
 */
export type Reconcile = (job: Job, ctx: ReconcileContext & FollowUps) => Promise<ReconcileAnswer>;

/** A handler with what decides its in-doubt attempts. */
export interface HandlerDefinition {
  run: Handler;
  /** called for an in-doubt attempt instead of a blind re-run */
  reconcile?: Reconcile;
  /** without `reconcile`: re-run or hold an in-doubt attempt (default: the worker's JOBFLEET_IN_DOUBT) */
  inDoubt?: InDoubtPolicy;
}

/** A handler as the delivery uses it: the policy filled in. */
export interface HandlerSpec {
  run: Handler;
  reconcile?: Reconcile;
  inDoubt: InDoubtPolicy;
}

export interface DeliveryDeps {
  queue: string;
  deadLetterQueue: string;
  contract: Contract;
  handlers: ReadonlyMap<string, HandlerSpec>;
  mode: 'external' | 'transactional';
  store: ClaimStore;
  /** renews the leases of running claims (external mode) */
  leases: LeaseKeeper;
  leaseSeconds: number;
  maxAttempts: number;
  /** throttled retries of one job before it is dead-lettered (they spend no attempt) */
  maxThrottledRetries: number;
  maxMessageBytes: number;
  initialDelayMs: number;
  maxDelayMs: number;
  /** the job types with a handler (the keys of `handlers`) */
  types: ReadonlySet<string>;
  /** delay tier (ms) → its queue, shortest first */
  tiers: ReadonlyMap<number, string>;
  deadLetterOwner: string | null;
  /** keep dead-letter bodies in PostgreSQL too (JOBFLEET_DEAD_LETTER_PAYLOADS=store) */
  storeDeadLetterPayloads: boolean;
  revision: string | null;
  /** publishes with a publisher confirm; rejects when the broker refuses or the channel dies */
  publish(queue: string, content: Buffer, props: Partial<MessageProperties>): Promise<void>;
  /** acks; `journal` (for acks that needed a durable record) goes to the ack journal */
  ack(msg: ConsumeMessage, journal?: AckEntry): void;
  /** returns the delivery to the broker unacked (requeue) */
  requeue(msg: ConsumeMessage): void;
  /** the claim store failed: stop consuming until it answers again */
  storeDown(err: unknown): void;
  /**
   * Waits until a delivery held through a claim-store outage may try again
   * (true), or must go back to the broker (false: stopping, or held too long).
   * `holds` counts this delivery's earlier tries; the wait grows with it.
   */
  storeBack(holds: number, heldSince: number): Promise<boolean>;
  /** a run that has not returned after this long is aborted; its attempt ends in doubt */
  handlerTimeoutMs: number;
  /** a signal that aborts when the worker's drain deadline passes */
  drainSignal: AbortSignal;
  metrics: WorkerMetrics;
  log: Logger;
  now: () => number;
  random: () => number;
}

export type DeliveryResult =
  'completed' | 'duplicate' | 'retried' | 'dead_lettered' | 'delayed' | 'requeued' | 'drained';

const header = (msg: ConsumeMessage, name: string): unknown => msg.properties.headers?.[name];

const numberHeader = (msg: ConsumeMessage, name: string): number | undefined => {
  const v = header(msg, name);
  const n = typeof v === 'number' ? v : typeof v === 'string' ? Number(v) : NaN;
  return Number.isFinite(n) ? n : undefined;
};

/** An attempt count from a header; anything a producer forged out of range reads as absent. */
const attemptHeader = (msg: ConsumeMessage): number | undefined => {
  const n = numberHeader(msg, HEADERS.attempt);
  return isInt32(n) && n >= 0 ? n : undefined;
};

/** A time header (ms since the epoch) within the range a worker writes, else absent. */
const timeHeader = (msg: ConsumeMessage, name: string, now: number): number | undefined => {
  const n = numberHeader(msg, name);
  return n !== undefined && n > 946_684_800_000 && n < now + 2 * MAX_RETRY_AFTER_MS ? n : undefined;
};

/** The broker message id, else the job id, else the body's hash: what ties a dead letter to its ack. */
export function deliveryIdOf(
  msg: Pick<ConsumeMessage, 'properties' | 'content'>,
  env: Partial<Envelope>,
  payloadHash?: string,
): string {
  const id: unknown = msg.properties.messageId;
  return typeof id === 'string' && id !== ''
    ? storable(id, 1000)
    : (env.id ?? `sha256:${payloadHash ?? createHash('sha256').update(msg.content).digest('hex')}`);
}

function journal(
  msg: ConsumeMessage,
  env: Envelope,
  outcome: AckEntry['outcome'],
  attempt: number,
  d: DeliveryDeps,
): AckEntry {
  const deliveryId = deliveryIdOf(msg, env);
  return { deliveryId, jobId: env.id, key: env.key, outcome, attempt, ackedAt: d.now() };
}

/** Thrown when a durable record cannot be written: the delivery goes back unacked. */
class StoreUnavailable extends Error {}

export function handleDelivery(msg: ConsumeMessage, d: DeliveryDeps): Promise<DeliveryResult> {
  return holding(msg, d, (holds) => step(msg, d, holds));
}

/**
 * A message the broker gave up on, from the delivery-limit queue (quorum
 * queues: delivered DELIVERY_LIMIT times without an ack): quarantined as a
 * `delivery_limit` dead letter with its audit record, so the broker never
 * drops one. A message whose key has already ended is acked as a duplicate.
 */
export function handleOverLimit(msg: ConsumeMessage, d: DeliveryDeps): Promise<DeliveryResult> {
  return holding(msg, d, () => overLimit(msg, d));
}

/**
 * Runs `attempt` until the delivery has a terminal record. When the claim
 * store cannot take one, the delivery is held (not returned): on a quorum
 * queue every return spends the broker's delivery limit, and a store that
 * flaps would otherwise walk messages to it. It is tried again once the store
 * takes writes, and returned only when the worker stops or after HOLD_LIMIT_MS.
 */
async function holding(
  msg: ConsumeMessage,
  d: DeliveryDeps,
  attempt: (holds: number) => Promise<DeliveryResult>,
): Promise<DeliveryResult> {
  const heldSince = d.now();
  for (let holds = 0; ; holds++) {
    try {
      return await attempt(holds);
    } catch (err) {
      // A value PostgreSQL refuses (a data error) is the message's fault, not
      // the store's: retrying cannot fix it, so it ends as a dead letter.
      if (isMessageDataError(err)) return lastResortDeadLetter(msg, d, err);
      if (err instanceof StoreUnavailable || isStoreError(err)) {
        d.storeDown(err);
        if (await d.storeBack(holds, heldSince)) continue;
      }
      // Stopping, held too long, or the broker refused a confirm: the
      // delivery has no terminal record, so it goes back unacked.
      d.log.warn(
        { err: compactReason(String((err as Error)?.message ?? err)) },
        'delivery returned to the broker unacked',
      );
      d.requeue(msg);
      return 'requeued';
    }
  }
}

async function overLimit(msg: ConsumeMessage, d: DeliveryDeps): Promise<DeliveryResult> {
  const decoded = decodeDelivery(msg.content, {
    maxBytes: d.maxMessageBytes,
    types: d.types,
    contract: d.contract,
  });
  const env: Partial<Envelope> = decoded.ok ? decoded.envelope : (decoded.partial ?? {});
  const state = env.key ? await d.store.state(env.key) : undefined;
  if (state === 'completed' || state === 'dead_lettered') {
    // Its effect (or its quarantine) is recorded: the broker's copy is a leftover.
    d.metrics.jobs.inc({ type: knownType(env, d), outcome: 'duplicate' });
    d.ack(msg, {
      deliveryId: deliveryIdOf(msg, env),
      jobId: env.id ?? null,
      key: env.key ?? null,
      outcome: 'duplicate',
      attempt: attemptHeader(msg) ?? 0,
      ackedAt: d.now(),
    });
    return 'duplicate';
  }
  return deadLetter(msg, d, {
    envelope: env,
    failureClass: 'delivery_limit',
    reason:
      `RabbitMQ delivered it ${DELIVERY_LIMIT + 1} times without an ack (the work queue's delivery limit; ` +
      'crashes, lost connections or drain aborts returned it each time) and moved it out of the work queue: replay it once the cause is fixed',
    attempts: attemptHeader(msg) ?? 0,
    claimOwner: null,
    firstSeenAt: null,
  });
}

const knownType = (env: Partial<Envelope>, d: DeliveryDeps) =>
  env.type && d.handlers.has(env.type) ? env.type : 'unknown';

/**
 * The guard behind every other check: a data error that escaped the envelope
 * check still ends as a dead letter (with a sanitized record), never a loop.
 */
async function lastResortDeadLetter(
  msg: ConsumeMessage,
  d: DeliveryDeps,
  err: unknown,
): Promise<DeliveryResult> {
  try {
    return await deadLetter(msg, d, {
      envelope: {},
      failureClass: 'invalid_envelope',
      reason: `the claim store cannot hold a value of this message: ${String((err as Error).message)}`,
      attempts: attemptHeader(msg) ?? 0,
      claimOwner: null,
      firstSeenAt: null,
    });
  } catch (again) {
    if (again instanceof StoreUnavailable || isStoreError(again)) d.storeDown(again);
    d.requeue(msg);
    return 'requeued';
  }
}

async function step(msg: ConsumeMessage, d: DeliveryDeps, holds: number): Promise<DeliveryResult> {
  if (msg.fields.redelivered && holds === 0) d.metrics.redeliveries.inc();
  const decoded = decodeDelivery(msg.content, {
    maxBytes: d.maxMessageBytes,
    types: d.types,
    contract: d.contract,
  });
  if (holds === 0 && (decoded.ok || decoded.partial?.schemaVersion !== undefined)) {
    const v = decoded.ok ? decoded.envelope.schemaVersion : decoded.partial?.schemaVersion;
    d.metrics.schemaVersionSeen.inc({
      version: v !== undefined && v <= 1000 ? String(v) : 'other',
    });
  }
  if (!decoded.ok) {
    return deadLetter(msg, d, {
      envelope: decoded.partial ?? {},
      failureClass: decoded.failureClass,
      reason: decoded.reason,
      attempts: attemptHeader(msg) ?? 0,
      claimOwner: null,
      firstSeenAt: null,
    });
  }
  const env = decoded.envelope;
  if (holds === 0) observeAge(msg, env, d);

  // A retry that arrives before its time (a delay longer than every tier, or
  // a copy moved by hand) waits again, without spending an attempt.
  // A not-before further out than any retry the worker schedules was forged: ignored.
  const notBefore = timeHeader(msg, HEADERS.notBefore, d.now());
  if (notBefore !== undefined && notBefore > d.now() + 50) {
    return delay(msg, d, env, notBefore - d.now(), null);
  }

  const claimedAt = d.now();
  const claim = await d.store.claim(env.key, d.leaseSeconds, env.id, env.type);
  switch (claim.outcome) {
    case 'completed':
    case 'dead_lettered':
      // The same operation already reached its end: one business effect.
      d.metrics.jobs.inc({ type: env.type, outcome: 'duplicate' });
      d.ack(msg, journal(msg, env, 'duplicate', claim.attempts, d));
      return 'duplicate';
    case 'held':
      d.metrics.claimConflicts.inc();
      return delay(msg, d, env, waitMs(claim.until, d), 'claim_conflict');
    case 'not_due':
      return delay(msg, d, env, waitMs(claim.until, d), null);
  }

  if (claim.outcome === 'takeover') {
    d.log.info(
      { key: env.key, type: env.type, attempt: claim.attempts },
      'took over an expired claim',
    );
  }
  return run(msg, d, env, { ...claim, claimedAt });
}

function waitMs(until: Date | null, d: DeliveryDeps): number {
  const ms = until ? until.getTime() - d.now() : d.initialDelayMs;
  return Math.min(d.maxDelayMs, Math.max(d.initialDelayMs, ms));
}

function observeAge(msg: ConsumeMessage, env: Envelope, d: DeliveryDeps): void {
  const due = timeHeader(msg, HEADERS.notBefore, d.now());
  const created = Date.parse(env.createdAt);
  const since = due ?? (Number.isFinite(created) ? created : msg.properties.timestamp * 1000);
  if (Number.isFinite(since)) d.metrics.messageAge.observe(Math.max(0, (d.now() - since) / 1000));
}

/** A transactional run's connection; a broken one is destroyed, not pooled. */
interface RunTx {
  client?: pg.PoolClient;
  /** why the connection may not go back into the pool */
  broken?: Error;
  onError?: (err: Error) => void;
}

/**
 * A claim this worker took (new, retry or takeover), with `claimedAt`: local
 * time just before the claim's statement was sent, from which its lease holds.
 */
type Claimed = Extract<ClaimOutcome, { owner: string }> & { claimedAt: number };

async function run(
  msg: ConsumeMessage,
  d: DeliveryDeps,
  env: Envelope,
  claim: Claimed,
): Promise<DeliveryResult> {
  const { owner, attempts: attempt } = claim;
  const spec = d.handlers.get(env.type) as HandlerSpec;
  // Aborted by a lost lease or by the drain deadline; made only if the handler reads it.
  const abort = new RunSignal(d.drainSignal);
  // Transactional mode holds the claim row's lock instead (see runInTransaction).
  if (d.mode === 'external') d.leases.hold(env.key, owner, abort, claim.claimedAt);
  const job: Job = { ...env, attempt, throttled: claim.throttled };
  const started = d.now();
  d.metrics.inflight.inc();
  const tx: RunTx = {};
  try {
    // Transactional mode: a run that did not commit rolled back with its
    // connection, its effect with it. Nothing there is in doubt.
    const doubt = d.mode === 'external' ? claim.history.doubt : undefined;
    let resumes: Doubt | undefined;
    // follow-up jobs, written with the completion record
    const followUps: OutboxEntry[] = [];
    if (doubt) {
      const decided = await decideDoubt(msg, d, env, spec, job, claim, doubt, abort, followUps);
      if ('settled' in decided) return decided.settled;
      resumes = decided.resumes;
    }
    // Runs that crashed the process count too: a poison message cannot loop forever.
    if (attempt > d.maxAttempts) return exhausted(msg, d, env, claim);
    const ctx = handlerContext(d, env, spec, claim, abort, resumes, followUps);
    const runHandler = () => withDeadline(spec.run(job, ctx), abort, d);
    let recorded: boolean;
    if (d.mode === 'transactional') {
      const r = await runInTransaction(d, env, owner, ctx, tx, runHandler, followUps);
      if (r === 'lease_lost') return delay(msg, d, env, d.initialDelayMs, 'lease_lost');
      recorded = r;
    } else {
      const result = await runHandler();
      recorded = await recordCompletion(d, env.key, owner, result, followUps);
    }
    d.metrics.handlerDuration.observe({ type: env.type }, (d.now() - started) / 1000);
    if (!recorded) {
      // Our lease was taken over: the new owner's record stands. Ask again later.
      return delay(msg, d, env, d.initialDelayMs, 'lease_lost');
    }
    d.metrics.jobs.inc({ type: env.type, outcome: 'completed' });
    d.ack(msg, journal(msg, env, 'completed', attempt, d));
    return 'completed';
  } catch (err) {
    d.metrics.handlerDuration.observe({ type: env.type }, (d.now() - started) / 1000);
    if (tx.client) await tx.client.query('rollback').catch(() => undefined);
    // Only a failed connection means the store is down here: any other error,
    // a transactional handler's own SQL included, is the handler's failure.
    if (err instanceof StoreUnavailable || isConnectionError(err)) {
      tx.broken ??= err as Error;
      throw err;
    }
    // a hung handler may still use its connection: never back into the pool
    if (err instanceof HandlerTimedOut) tx.broken ??= err;
    if (d.drainSignal.aborted && !(err instanceof ClaimLost)) {
      // Stopped by the drain deadline, not by its own failure: give the claim
      // back (refunding the attempt, marked in doubt: it may have made its
      // call before it stopped) and leave the delivery unacked.
      await d.store.releaseForDrain(env.key, owner).catch(() => undefined);
      return 'drained';
    }
    // Not awaited (as no return here is): the finally below frees the run's
    // lease and slot once this starts, not once the failure is recorded.
    return failed(msg, d, env, spec, claim, err);
  } finally {
    endRun(d, env.key, owner, abort, tx);
  }
}

/** A claim past the attempt ceiling before it ran: dead-lettered with the last error it knows. */
function exhausted(
  msg: ConsumeMessage,
  d: DeliveryDeps,
  env: Envelope,
  claim: Claimed,
): Promise<DeliveryResult> {
  return deadLetter(msg, d, {
    envelope: env,
    failureClass: 'attempts_exhausted',
    reason: `gave up after ${d.maxAttempts} attempts; last error: ${claim.lastError ?? 'the worker stopped mid-run (crash or kill)'}`,
    attempts: claim.attempts - 1,
    claimOwner: claim.owner,
    firstSeenAt: claim.firstSeenAt,
  });
}

/**
 * An attempt in doubt is decided before anything runs again: 'settled' when
 * the delivery ended here (done, held, asked again later), else the handler
 * runs, resuming the doubt's step when it was in one.
 */
async function decideDoubt(
  msg: ConsumeMessage,
  d: DeliveryDeps,
  env: Envelope,
  spec: HandlerSpec,
  job: Job,
  claim: Claimed,
  doubt: Doubt,
  abort: RunSignal,
  followUps: OutboxEntry[],
): Promise<{ settled: DeliveryResult } | { resumes?: Doubt }> {
  const { owner, attempts: attempt } = claim;
  const reconcile = spec.reconcile;
  const decision = await resolveDoubt({
    doubt,
    reconcile:
      reconcile &&
      (() =>
        withDeadline(
          reconcile(job, {
            ...reconcileContext(d, env, attempt, abort, doubt),
            enqueue: enqueuer(d, followUps),
          }),
          abort,
          d,
        )),
    policy: spec.inDoubt,
    attempt,
    maxAttempts: d.maxAttempts,
  });
  if (decision.do !== 'resume')
    d.metrics.inDoubt.inc({ type: env.type, resolution: decision.resolution });
  d.log.info(
    { key: env.key, type: env.type, attempt, doubt: describeDoubt(doubt), decision: decision.do },
    'in-doubt attempt decided',
  );
  switch (decision.do) {
    case 'complete': {
      if (!(await recordCompletion(d, env.key, owner, decision.result, followUps)))
        return { settled: await delay(msg, d, env, d.initialDelayMs, 'lease_lost') };
      d.metrics.jobs.inc({ type: env.type, outcome: 'completed' });
      d.ack(msg, journal(msg, env, 'completed', attempt, d));
      return { settled: 'completed' };
    }
    case 'hold':
      return {
        settled: await hold(msg, d, env, claim, `${describeDoubt(doubt)}; ${decision.reason}`),
      };
    case 'retry':
      return {
        settled: await retryInDoubt(msg, d, env, claim, decision.reason, 'reconcile_unknown'),
      };
    case 'run':
    case 'resume':
      if (!(await d.store.clearDoubt(env.key, owner)))
        return { settled: await delay(msg, d, env, d.initialDelayMs, 'lease_lost') };
      return { resumes: decision.do === 'resume' ? doubt : undefined };
  }
}

/** Quarantined for a person's decision (failure class in_doubt): never re-run on its own. */
function hold(
  msg: ConsumeMessage,
  d: DeliveryDeps,
  env: Envelope,
  claim: Claimed,
  why: string,
): Promise<DeliveryResult> {
  return deadLetter(msg, d, {
    envelope: env,
    failureClass: 'in_doubt',
    // the instruction first: a long intent is what the 300-character reason cuts
    reason: `held for a person (replay to re-run, or mark done): ${why}`,
    attempts: claim.attempts,
    claimOwner: claim.owner,
    firstSeenAt: claim.firstSeenAt,
  });
}

/** The claim given back in doubt, with its retry time; then the confirmed retry copy and the ack. */
async function retryInDoubt(
  msg: ConsumeMessage,
  d: DeliveryDeps,
  env: Envelope,
  claim: Claimed,
  reason: string,
  how: 'in_doubt_thrown' | 'timed_out' | 'reconcile_unknown',
): Promise<DeliveryResult> {
  const message = compactReason(reason);
  const delayMs = retryDelayMs(
    { initialDelayMs: d.initialDelayMs, maxDelayMs: d.maxDelayMs },
    claim.attempts,
    undefined,
    d.random,
  );
  if (!(await d.store.releaseInDoubt(env.key, claim.owner, delayMs / 1000, message, how)))
    return delay(msg, d, env, d.initialDelayMs, 'lease_lost');
  return retry(msg, d, env, claim.attempts, 'in_doubt', delayMs, message);
}

/**
 * What a handler gets. Own getters, as handlers have always had them: a copy
 * ({ ...ctx }) carries signal and log.
 */
function handlerContext(
  d: DeliveryDeps,
  env: Envelope,
  spec: HandlerSpec,
  claim: Claimed,
  abort: RunSignal,
  resumes: Doubt | undefined,
  followUps: OutboxEntry[],
): HandlerContext {
  const { owner, attempts: attempt } = claim;
  let log: Logger | undefined;
  let record: RunRecord | undefined;
  // made only for handlers that record intents or steps
  const runRecord = () =>
    (record ??= new RunRecord({
      store: d.store,
      key: env.key,
      owner,
      attempt,
      maxAttempts: d.maxAttempts,
      leaseSeconds: d.leaseSeconds,
      confirmedUntil: () => d.leases.confirmedUntil(env.key, owner),
      now: d.now,
      steps: claim.history.steps,
      resumes,
      policy: spec.inDoubt,
      reconcileContext: (doubt) => reconcileContext(d, env, attempt, abort, doubt),
      resolved: (resolution: Resolution) => d.metrics.inDoubt.inc({ type: env.type, resolution }),
      transactional: d.mode === 'transactional',
    }));
  return {
    key: env.key,
    attempt,
    previous: claim.history.previous,
    get signal() {
      return abort.signal;
    },
    // a child logger only for handlers that log
    get log() {
      return (log ??= d.log.child({ type: env.type, jobId: env.id, attempt }));
    },
    intend: (intent) => runRecord().intend(intent),
    step: (name, fn, opts) => runRecord().step(name, fn, opts),
    enqueue: enqueuer(d, followUps),
  };
}

/** ctx.enqueue: renders the follow-up now (a malformed one fails the run), written at completion. */
function enqueuer(d: DeliveryDeps, followUps: OutboxEntry[]): FollowUps['enqueue'] {
  return (queue, job) => {
    try {
      followUps.push(outboxEntry(queue, job, d.now(), 'ctx.enqueue'));
    } catch (err) {
      throw new Permanent((err as Error).message);
    }
  };
}

/** What a reconcile gets: the attempt in doubt, and the run's signal and logger. */
function reconcileContext(
  d: DeliveryDeps,
  env: Envelope,
  attempt: number,
  abort: RunSignal,
  doubt: Doubt,
): ReconcileContext {
  let log: Logger | undefined;
  return {
    key: env.key,
    attempt,
    inDoubt: doubt,
    get signal() {
      return abort.signal;
    },
    get log() {
      return (log ??= d.log.child({ type: env.type, jobId: env.id, attempt, reconcile: true }));
    },
  };
}

/**
 * Transactional mode: the handler runs inside a transaction that also records
 * its completion (committed only when recorded). 'lease_lost' when the claim
 * was taken over before the handler ran.
 */
async function runInTransaction(
  d: DeliveryDeps,
  env: Envelope,
  owner: string,
  ctx: HandlerContext,
  tx: RunTx,
  runHandler: () => Promise<unknown>,
  followUps: readonly OutboxEntry[],
): Promise<boolean | 'lease_lost'> {
  const client = (tx.client = await d.store.pool.connect());
  // A checked-out client whose backend dies emits 'error' between queries;
  // unheard, that event would crash the process. The next query fails anyway.
  tx.onError = (err) => {
    tx.broken = err;
  };
  client.on('error', tx.onError);
  await client.query('begin');
  // Renewing inside the transaction takes the claim row's lock: no
  // takeover can happen until we commit or roll back, however long the
  // handler runs, and a crash releases it with the connection.
  if (!(await d.store.renew(env.key, owner, d.leaseSeconds, client))) {
    await client.query('rollback');
    return 'lease_lost';
  }
  ctx.tx = client;
  const result = await runHandler();
  const recorded = await d.store.complete(env.key, owner, result, client, followUps);
  if (recorded) await client.query('commit');
  else await client.query('rollback');
  return recorded;
}

/** Frees what a run held, however it ended: its lease, its signal, its slot and its connection. */
function endRun(d: DeliveryDeps, key: string, owner: string, abort: RunSignal, tx: RunTx): void {
  if (d.mode === 'external') d.leases.release(key, owner);
  abort.done();
  d.metrics.inflight.dec();
  if (tx.onError) tx.client?.off('error', tx.onError);
  tx.client?.release(tx.broken); // a broken connection is destroyed, not pooled
}

/** A run past JOBFLEET_HANDLER_TIMEOUT_SECONDS: a retryable failure. */
export class HandlerTimedOut extends Error {
  override readonly name = 'HandlerTimedOut';
}

/**
 * The handler's result, or HandlerTimedOut once the handler deadline passes:
 * its signal is aborted and its delivery slot freed, whether or not it
 * listens. A hung run would otherwise hold the slot until RabbitMQ's
 * consumer_timeout closes the channel, returning every delivery on it.
 */
function withDeadline<T>(run: Promise<T>, abort: RunSignal, d: DeliveryDeps): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new HandlerTimedOut(
        `the handler ran longer than ${d.handlerTimeoutMs / 1000} s (spec.handlerTimeoutSeconds)`,
      );
      abort.abort(err);
      reject(err);
    }, d.handlerTimeoutMs);
  });
  // a run that ends after its deadline must not reject unheard
  run.catch(() => undefined);
  return Promise.race([run, deadline]).finally(() => clearTimeout(timer));
}

/**
 * The side effect has happened; its record must be written before the ack.
 * Through a store outage the delivery is held and the record tried again
 * (never the handler): until the lease runs out no one else may run this
 * key, and after it the fenced write says so ('lease_lost').
 */
async function recordCompletion(
  d: DeliveryDeps,
  key: string,
  owner: string,
  result: unknown,
  followUps: readonly OutboxEntry[],
): Promise<boolean> {
  const heldSince = d.now();
  for (let holds = 0; ; holds++) {
    try {
      return await d.store.complete(key, owner, result, undefined, followUps);
    } catch (err) {
      if (!isStoreError(err) || isMessageDataError(err)) throw new StoreUnavailable(String(err));
      d.storeDown(err);
      if (!(await d.storeBack(holds, heldSince))) throw new StoreUnavailable(String(err));
    }
  }
}

async function failed(
  msg: ConsumeMessage,
  d: DeliveryDeps,
  env: Envelope,
  spec: HandlerSpec,
  claim: Claimed,
  err: unknown,
): Promise<DeliveryResult> {
  const { owner, attempts: attempt, firstSeenAt } = claim;
  const message = compactReason(err instanceof Error ? `${err.name}: ${err.message}` : String(err));
  const giveUp = (failureClass: FailureClass, reason: string) =>
    deadLetter(msg, d, {
      envelope: env,
      failureClass,
      reason,
      attempts: attempt,
      claimOwner: owner,
      firstSeenAt,
    });
  // The claim is not this run's any more: whoever holds it decides the job.
  if (err instanceof ClaimLost) return delay(msg, d, env, d.initialDelayMs, 'lease_lost');
  if (err instanceof HoldForPerson) return hold(msg, d, env, claim, message);
  if (err instanceof Permanent) return giveUp('permanent', message);
  // The run may have made its call (it said so, or it was abandoned at its
  // deadline and may still be making it): the next attempt decides first.
  // Its later ctx.intend, steps and completion are fenced out from here on.
  if (d.mode === 'external' && (err instanceof InDoubt || err instanceof HandlerTimedOut)) {
    if (attempt < d.maxAttempts)
      return retryInDoubt(
        msg,
        d,
        env,
        claim,
        message,
        err instanceof InDoubt ? 'in_doubt_thrown' : 'timed_out',
      );
    // At the ceiling: held for a person, unless the handler re-runs blind by choice.
    if (spec.reconcile || spec.inDoubt === 'hold')
      return hold(
        msg,
        d,
        env,
        claim,
        `attempt ${attempt} of ${d.maxAttempts} ended in doubt: ${message}`,
      );
  }
  const throttled = err instanceof Throttled;
  if (!throttled && attempt >= d.maxAttempts) {
    return giveUp(
      'attempts_exhausted',
      compactReason(`gave up after ${attempt} attempts; last error: ${message}`),
    );
  }
  if (throttled) d.metrics.throttled.inc({ type: env.type });
  // A throttled run's attempt is refunded: its backoff grows with the
  // throttled retries instead, so a dependency that sends no Retry-After is
  // not hit at a constant rate.
  const delayMs = retryDelayMs(
    { initialDelayMs: d.initialDelayMs, maxDelayMs: d.maxDelayMs },
    throttled ? claim.throttled + 1 : attempt,
    throttled ? err.retryAfterMs : undefined,
    d.random,
  );
  // Release first, with the retry time, so that no other copy of this key can
  // run early; then the confirmed retry copy; then the ack.
  const released = await releaseClaim(d, env.key, owner, throttled, delayMs, message);
  if (released === 'lost') return delay(msg, d, env, d.initialDelayMs, 'lease_lost');
  if (released === 'ceiling') {
    return giveUp(
      'attempts_exhausted',
      compactReason(
        `the dependency throttled it more than ${d.maxThrottledRetries} times (spec.retry.maxThrottledRetries); last: ${message}`,
      ),
    );
  }
  const reason = throttled ? 'throttled' : 'error';
  return retry(msg, d, env, throttled ? attempt - 1 : attempt, reason, delayMs, message);
}

/**
 * Gives the claim back with its retry time. A throttled run spends no attempt
 * (the dependency was busy, the job did not fail), so a long throttling
 * incident cannot dead-letter good jobs; it has a ceiling of its own.
 */
async function releaseClaim(
  d: DeliveryDeps,
  key: string,
  owner: string,
  throttled: boolean,
  delayMs: number,
  message: string,
): Promise<'released' | 'ceiling' | 'lost'> {
  if (throttled) {
    return d.store.releaseForThrottle(key, owner, delayMs / 1000, message, d.maxThrottledRetries);
  }
  return (await d.store.releaseForRetry(key, owner, delayMs / 1000, message)) ? 'released' : 'lost';
}

/**
 * The released claim's confirmed retry copy, then the ack. `spent`: the
 * attempts spent so far (a throttled run was refunded).
 */
async function retry(
  msg: ConsumeMessage,
  d: DeliveryDeps,
  env: Envelope,
  spent: number,
  reason: 'throttled' | 'error' | 'in_doubt',
  delayMs: number,
  message: string,
): Promise<DeliveryResult> {
  d.metrics.retries.inc({ type: env.type, reason });
  d.metrics.jobs.inc({ type: env.type, outcome: 'retried' });
  await publishDelayed(msg, d, delayMs, {
    [HEADERS.attempt]: spent,
    [HEADERS.lastError]: message,
  });
  d.ack(msg, journal(msg, env, 'retried', spent, d));
  return 'retried';
}

/** Waits again without spending an attempt (claim conflict, early arrival, lost lease). */
async function delay(
  msg: ConsumeMessage,
  d: DeliveryDeps,
  env: Envelope,
  delayMs: number,
  reason: 'claim_conflict' | 'lease_lost' | null,
): Promise<DeliveryResult> {
  if (reason) d.metrics.retries.inc({ type: env.type, reason });
  await publishDelayed(msg, d, delayMs, {});
  d.ack(msg);
  return 'delayed';
}

async function publishDelayed(
  msg: ConsumeMessage,
  d: DeliveryDeps,
  delayMs: number,
  extraHeaders: Record<string, unknown>,
): Promise<void> {
  const tier = tierFor([...d.tiers.keys()], delayMs);
  const due = d.now() + delayMs;
  await publishCopy(d, d.tiers.get(tier) as string, msg, {
    // The retry is "waiting" only from its due time on: age-based scaling
    // must not see a scheduled retry as backlog.
    timestamp: Math.ceil(due / 1000),
    headers: { ...extraHeaders, [HEADERS.notBefore]: due, [TIMESTAMP_MS_HEADER]: due },
  });
}

/**
 * Publishes a copy of `msg` (a retry, a dead letter) with the producer's
 * headers plus `own`. Headers another client sent may not survive amqplib's
 * encoder (integers beyond int64, NaN) or may leave no room for ours: then
 * they go as doubles, or, failing that, only our own headers are kept — a
 * copy that cannot be published would send the message round forever.
 */
async function publishCopy(
  d: DeliveryDeps,
  queue: string,
  msg: ConsumeMessage,
  own: { timestamp: number; headers: Record<string, unknown> },
): Promise<void> {
  const props = { ...copyProps(msg.properties), timestamp: own.timestamp };
  try {
    await d.publish(queue, msg.content, {
      ...props,
      headers: { ...encodableTable(msg.properties.headers ?? {}), ...own.headers },
    });
  } catch (err) {
    if (!(err instanceof RangeError || err instanceof TypeError)) throw err;
    await d.publish(queue, msg.content, {
      ...props,
      headers: {
        ...own.headers,
        [HEADERS.headersDropped]: compactReason(`the producer's headers: ${err.message}`),
      },
    });
  }
}

/** A number amqplib would encode as int64 and cannot (NaN, -Infinity, ≤ -2^63) goes as a double. */
function encodable(v: unknown): unknown {
  if (typeof v === 'number')
    return Number.isNaN(v) || v <= -(2 ** 63) ? { '!': 'double', value: v } : v;
  if (Array.isArray(v)) return v.map(encodable);
  if (v !== null && typeof v === 'object' && !Buffer.isBuffer(v) && !('!' in v))
    return encodableTable(v as Record<string, unknown>);
  return v;
}

function encodableTable(t: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(t).map(([k, v]) => [k, encodable(v)]));
}

/** The properties a copy of a message keeps (retry, dead letter, replay). */
export function copyProps(p: MessageProperties): Partial<MessageProperties> {
  // amqplib types these properties as `any`.
  const str = (v: unknown) => (typeof v === 'string' ? v : undefined);
  return {
    messageId: str(p.messageId),
    contentType: str(p.contentType) ?? 'application/json',
    correlationId: str(p.correlationId),
    type: str(p.type),
    appId: str(p.appId),
    deliveryMode: 2,
  };
}

interface DeadLetterInput {
  envelope: Partial<Envelope>;
  failureClass: FailureClass;
  reason: string;
  attempts: number;
  claimOwner: string | null;
  firstSeenAt: Date | null;
}

async function deadLetter(
  msg: ConsumeMessage,
  d: DeliveryDeps,
  x: DeadLetterInput,
): Promise<DeliveryResult> {
  const env = x.envelope;
  const reason = compactReason(x.reason);
  const payloadHash = createHash('sha256').update(msg.content).digest('hex');
  const deliveryId = deliveryIdOf(msg, env, payloadHash);
  const now = d.now();
  const firstSeen = x.firstSeenAt?.getTime() ?? timeHeader(msg, HEADERS.firstSeen, now) ?? now;
  // Confirmed copy in the quarantine queue first, then the audit record (and
  // the claim marked dead-lettered), then the ack. A crash in between
  // redelivers; the record's (delivery, attempt) uniqueness absorbs the repeat.
  await publishCopy(d, d.deadLetterQueue, msg, {
    timestamp: Math.floor(now / 1000),
    headers: deadLetterHeaders(d, x, reason, firstSeen, now),
  });
  await recordDeadLetter(d, {
    deliveryId,
    jobId: env.id ?? null,
    key: env.key ?? null,
    type: env.type ?? null,
    schemaVersion: env.schemaVersion ?? null,
    attempts: x.attempts,
    reason,
    failureClass: x.failureClass,
    queue: d.queue,
    owner: d.deadLetterOwner,
    revision: d.revision,
    payloadHash,
    firstSeenAt: new Date(firstSeen),
    claimOwner: x.claimOwner,
    payload: d.storeDeadLetterPayloads ? msg.content : null,
  });
  const type = knownType(env, d);
  d.metrics.deadLetters.inc({ type, failure_class: x.failureClass });
  d.metrics.jobs.inc({ type, outcome: 'dead_lettered' });
  d.log.warn({ type, jobId: env.id, failureClass: x.failureClass, reason }, 'dead-lettered');
  d.ack(msg, {
    deliveryId,
    jobId: env.id ?? null,
    key: env.key ?? null,
    outcome: 'dead_lettered',
    attempt: x.attempts,
    ackedAt: d.now(),
  });
  return 'dead_lettered';
}

/** The headers of a dead letter's copy in the quarantine queue (besides the producer's). */
function deadLetterHeaders(
  d: DeliveryDeps,
  x: DeadLetterInput,
  reason: string,
  firstSeen: number,
  now: number,
): Record<string, unknown> {
  const env = x.envelope;
  return {
    [TIMESTAMP_MS_HEADER]: now,
    [HEADERS.attempt]: x.attempts,
    [HEADERS.firstSeen]: firstSeen,
    [HEADERS.deadLetteredAt]: now,
    [HEADERS.reason]: reason,
    [HEADERS.failureClass]: x.failureClass,
    [HEADERS.originalQueue]: d.queue,
    ...(env.id ? { [HEADERS.jobId]: env.id } : {}),
    ...(env.key ? { [HEADERS.key]: env.key } : {}),
    ...(env.type ? { [HEADERS.type]: env.type } : {}),
    ...(env.schemaVersion !== undefined ? { [HEADERS.schemaVersion]: env.schemaVersion } : {}),
    ...(d.deadLetterOwner ? { [HEADERS.owner]: d.deadLetterOwner } : {}),
  };
}

/**
 * The dead letter's audit record (and its claim marked dead-lettered);
 * StoreUnavailable when it cannot be written.
 */
async function recordDeadLetter(d: DeliveryDeps, record: DeadLetterRecord): Promise<void> {
  try {
    await d.store.recordDeadLetter(record);
  } catch (err) {
    if (!isMessageDataError(err)) throw new StoreUnavailable(String(err));
    // A field of the message's own that the store refuses: the DLQ copy
    // (with every header) is the evidence; the row keeps what is certain.
    // Publishing again would only add copies, so the loop ends here.
    try {
      await d.store.recordDeadLetter({
        ...record,
        jobId: null,
        key: null,
        type: null,
        schemaVersion: null,
        reason: compactReason(`${record.reason} (record sanitized: ${(err as Error).message})`),
      });
    } catch (again) {
      throw new StoreUnavailable(String(again));
    }
  }
}
