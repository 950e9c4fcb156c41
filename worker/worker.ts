// The worker's lifecycle, around the per-delivery state machine: connect to
// RabbitMQ and PostgreSQL (reconnecting with backoff), declare the topology,
// consume, pause when the claim store is down, and drain on SIGTERM.
import { setMaxListeners } from 'node:events';
import { readFileSync } from 'node:fs';
import amqp, { type ChannelModel, type ConfirmChannel, type ConsumeMessage } from 'amqplib';
import pg from 'pg';
import type { Logger } from 'pino';
import { AckBatcher } from './ack-batcher.js';
import { AckJournal } from './ack-journal.js';
import { ClaimStore, poolConfig } from './claim-store.js';
import { LeaseKeeper } from './lease-keeper.js';
import { contractMismatches, keyRuleProblem, type Contract } from './contract.js';
import {
  handleDelivery,
  handleOverLimit,
  type DeliveryDeps,
  type DeliveryResult,
  type Handler,
  type HandlerDefinition,
  type HandlerSpec,
} from './delivery.js';
import { IN_DOUBT_POLICIES, type InDoubtPolicy } from './in-doubt/index.js';
import { compactReason } from './envelope.js';
import { createLogger } from './log.js';
import { ConfigError, loadConfig, type WorkerConfig, type WorkerConfigInput } from './config.js';
import {
  brokerProblem,
  claimStoreProblem,
  Misconfigured,
  queueRefusal,
  type NotReady,
  type Readiness,
} from './readiness.js';
import { startHealthServer, type HealthServer } from './health-server.js';
import { workerMetrics, type Held, type WorkerMetrics } from './metrics.js';
import { HeadWatch } from './queue-head.js';
import { sendConfirmed } from './producer.js';
import { topology, type QueueDecl, type Topology } from './topology.js';
import { brokerUrls, withHeartbeat } from './broker-urls.js';
import { HOLD_LIMIT_MS } from './hold-limit.js';
import { startRelay, type Relay } from './outbox/index.js';

export interface WorkerOptions {
  /** what this code consumes; must match JOBFLEET_KEY_RULE / JOBFLEET_SCHEMA_VERSIONS when set */
  contract: Contract;
  /**
   * one handler per job type (a function, or {run, reconcile, inDoubt});
   * a delivery of any other type is dead-lettered
   */
  handlers: Record<string, Handler | HandlerDefinition>;
  /** 'transactional': the handler gets ctx.tx, and its writes commit with the completion record */
  mode?: 'external' | 'transactional';
  /** overrides for the JOBFLEET_* environment */
  config?: Partial<WorkerConfigInput>;
  logger?: Logger;
  /** stop (drain) on SIGTERM/SIGINT and exit 0; default true */
  handleSignals?: boolean;
  /** observe each delivery's outcome (tests, custom telemetry) */
  onOutcome?: (result: DeliveryResult, msg: ConsumeMessage) => void;
  now?: () => number;
  random?: () => number;
}

export interface Worker {
  readonly config: WorkerConfig;
  readonly metrics: WorkerMetrics;
  /** the metrics/health port actually bound (useful with port 0) */
  readonly port: number | undefined;
  ready(): boolean;
  start(): Promise<void>;
  /** drains: stops consuming, waits for in-flight handlers up to the deadline, aborts the rest unacked */
  stop(opts?: { deadlineMs?: number }): Promise<void>;
  /** deletes completed claims past their retention now (it also runs every 5–10 minutes) */
  sweepClaims(): Promise<number>;
}

const logRedactions = [
  'config.brokerUrl',
  'config.claimsUrl',
  '*.password',
  '*.url',
  'brokerUrl',
  'claimsUrl',
];

export function createWorker(opts: WorkerOptions): Worker {
  const config = loadConfig(opts.config);
  const keyProblem = keyRuleProblem(opts.contract.keyRule);
  if (keyProblem) throw new ConfigError(`contract.keyRule: ${keyProblem}`);
  const mismatches = contractMismatches(opts.contract, {
    keyRule: config.keyRule,
    schemaVersions: config.schemaVersions,
  });
  if (mismatches.length) {
    throw new ConfigError(
      `refusing to start: this image's code does not match the JobWorker's contract:\n  - ${mismatches.join('\n  - ')}\n` +
        'Deploy an image whose createWorker({contract}) matches spec.contract, or change spec.contract to match the code.',
    );
  }
  const types = Object.keys(opts.handlers);
  if (!types.length) throw new ConfigError('handlers: give at least one job type and its handler');
  // refuses a malformed definition now, not at its first job
  return new QueueWorker(opts, config, handlerSpecs(opts.handlers, config.inDoubt));
}

/** Each handler with its in-doubt policy filled in; throws ConfigError naming a malformed one. */
function handlerSpecs(
  handlers: WorkerOptions['handlers'],
  policy: InDoubtPolicy,
): Map<string, HandlerSpec> {
  const specs = new Map<string, HandlerSpec>();
  for (const [type, h] of Object.entries(handlers)) {
    const at = `handlers.${type}`;
    if (typeof h === 'function') {
      specs.set(type, { run: h, inDoubt: policy });
      continue;
    }
    if (typeof h?.run !== 'function')
      throw new ConfigError(
        `${at}: give a function, or {run, reconcile?, inDoubt?} whose run is one`,
      );
    if (h.reconcile !== undefined && typeof h.reconcile !== 'function')
      throw new ConfigError(
        `${at}.reconcile: give a function (job, ctx) => answer, or leave it out`,
      );
    if (h.inDoubt !== undefined && !IN_DOUBT_POLICIES.includes(h.inDoubt))
      throw new ConfigError(
        `${at}.inDoubt: "${String(h.inDoubt)}" is not one of ${IN_DOUBT_POLICIES.join(', ')}`,
      );
    specs.set(type, {
      run: h.run,
      ...(h.reconcile && { reconcile: h.reconcile }),
      inDoubt: h.inDoubt ?? policy,
    });
  }
  return specs;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(t);
      resolve();
    });
  });

export { HOLD_LIMIT_MS };

function backoffMs(attempt: number, random: () => number): number {
  const cap = Math.min(30_000, 500 * 2 ** Math.min(attempt, 10));
  return cap / 2 + random() * (cap / 2);
}

interface InFlight {
  done: Promise<unknown>;
  /** when it arrived (this.now()) */
  since: number;
  /** the channel it arrived on: only that channel can ack it */
  channel: ConfirmChannel;
  /** a work-queue delivery: the consumer it came to (HeadWatch counts its prefetch) */
  consumer?: number;
}

class QueueWorker implements Worker {
  readonly metrics: WorkerMetrics;
  /** what the operator's measured queue age reads (worker/queue-head.ts) */
  private readonly head: HeadWatch;
  /** counts work-queue consumers started: a delivery of an earlier one no longer holds a slot */
  private consumers = 0;
  readonly config: WorkerConfig;
  private readonly log: Logger;
  private readonly topo: Topology;
  private readonly store: ClaimStore;
  private readonly journal: AckJournal;
  private readonly now: () => number;
  private readonly random: () => number;
  private readonly drain = new AbortController();
  /** aborts the drain's wait once the drain is over */
  private readonly stopping = new AbortController();
  /** ends every connect/reconnect loop: aborted as soon as stop() begins */
  private readonly retrying = new AbortController();
  private readonly inflight = new Map<ConsumeMessage, InFlight>();
  private readonly channels = new WeakMap<
    ConfirmChannel,
    { deps: DeliveryDeps; acks: AckBatcher }
  >();
  private readonly leases: LeaseKeeper;
  private readonly brokerUrls: string[];
  /** the next of brokerUrls to try */
  private nextBroker = 0;
  private readonly shared: ReturnType<QueueWorker['staticDeps']>;
  private conn: ChannelModel | undefined;
  private channel: ConfirmChannel | undefined;
  private consumerTag: string | undefined;
  /** quorum queues: the queue the broker's delivery limit dead-letters into, and our consumer of it */
  private overLimitQueue: string | undefined;
  private overLimitTag: string | undefined;
  private storeOk = false;
  /** the broker's connection.blocked reason while a resource alarm lasts */
  private blocked: string | undefined;
  /** deliveries held through a claim-store outage, waiting for it to end */
  private readonly heldWaiters = new Set<() => void>();
  /** why the last attempt to reach each failed (cleared on success): /readyz says it */
  private storeTrouble: NotReady | undefined;
  private brokerTrouble: NotReady | undefined;
  private health: HealthServer | undefined;
  private started: Promise<void> | undefined;
  private stopped: Promise<void> | undefined;
  private sweeper: NodeJS.Timeout | undefined;
  /** the outbox relays this worker runs (docs/outbox.md): active, or standing by */
  private relays: Relay[] = [];
  /** the pool of the producer's outbox JOBFLEET_OUTBOX_URL names, when it names one */
  private outboxPool: pg.Pool | undefined;
  private readonly signalHandler = () => {
    this.log.info('signal received: draining');
    this.stop().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };

  constructor(
    private readonly opts: WorkerOptions,
    config: WorkerConfig,
    /** the handlers with their in-doubt policy, checked by createWorker */
    private readonly specs: ReadonlyMap<string, HandlerSpec>,
  ) {
    this.config = config;
    this.now = opts.now ?? Date.now;
    this.head = new HeadWatch(config.prefetch, this.now);
    this.metrics = workerMetrics(undefined, {
      held: () => this.held(),
      head: () => this.head.snapshot(),
    });
    this.random = opts.random ?? Math.random;
    // Every delivery in flight listens for the drain (up to the prefetch at
    // once, removed when it ends): not a leak, so no MaxListeners warning.
    setMaxListeners(0, this.drain.signal);
    this.log = (opts.logger ?? createLogger({ redact: logRedactions })).child({
      queue: config.queue,
      revision: config.revision,
    });
    this.topo = topology(config);
    this.brokerUrls = brokerUrls(config.brokerUrl);
    const pool = new pg.Pool({
      ...poolConfig(config.claimsUrl, config.tlsCaFile),
      // transactional handlers hold a connection each for their whole run;
      // the active outbox relay holds one (its lock's session)
      max: Math.min(config.prefetch, 50) + 3,
    });
    pool.on('error', (err) =>
      this.log.warn({ err: compactReason(err.message) }, 'claim store connection error'),
    );
    this.store = new ClaimStore(pool, undefined, config.queue);
    this.leases = new LeaseKeeper(this.store, config.leaseSeconds, this.now);
    this.journal = new AckJournal(
      this.store,
      (err) =>
        this.log.warn(
          { err: compactReason(String((err as Error)?.message ?? err)) },
          'ack journal write failed (tried again in 1 s; a batch PostgreSQL refuses is dropped)',
        ),
      (n) => this.metrics.ackJournalDropped.inc(n),
    );
    this.shared = this.staticDeps();
  }

  get port(): number | undefined {
    return this.health?.port;
  }

  ready(): boolean {
    return this.readiness().ready;
  }

  /** What /readyz answers: ready, or the reason, the message and the fix. */
  readiness(): Readiness {
    const starting = (what: string): NotReady => ({
      reason: 'Starting',
      message: `connecting to ${what}`,
      fix: 'none: it is starting',
    });
    if (this.drain.signal.aborted || this.stopped)
      return {
        ready: false,
        reason: 'Draining',
        message: 'stopping: in-flight jobs finish, no new deliveries',
        fix: 'none: it is shutting down',
      };
    if (!this.storeOk) return { ready: false, ...(this.storeTrouble ?? starting('PostgreSQL')) };
    if (!this.channel) return { ready: false, ...(this.brokerTrouble ?? starting('RabbitMQ')) };
    if (this.blocked !== undefined)
      return {
        ready: false,
        reason: 'BrokerResourceAlarm',
        message: `RabbitMQ blocks this connection's publishes: ${this.blocked || 'a resource alarm'}`,
        fix: 'free memory or disk on the broker (rabbitmq-diagnostics alarms names the node and the resource); until then retries and dead letters wait, and deliveries are held unacked',
      };
    if (!this.consumerTag)
      return {
        ready: false,
        reason: 'NotConsuming',
        message: 'connected, but not consuming the work queue',
        fix: 'wait a few seconds; if it stays, read the worker logs',
      };
    return { ready: true };
  }

  start(): Promise<void> {
    this.started ??= this.doStart();
    return this.started;
  }

  private async doStart(): Promise<void> {
    this.health = await startHealthServer(
      this.config.metricsPort,
      this.config.metricsHost,
      this.metrics.registry,
      () => this.readiness(),
    );
    if (this.opts.handleSignals !== false) {
      process.once('SIGTERM', this.signalHandler);
      process.once('SIGINT', this.signalHandler);
    }
    try {
      await this.untilStoreAnswers(true);
      await this.connectBroker(true);
    } catch (err) {
      // Misconfigured: nothing to wait for. Close what start-up opened, so the
      // process can exit with the cause. This is its last log line: the pod's
      // termination message (FallbackToLogsOnError) carries it to the operator.
      // The problem's message and fix apart (the operator puts both on the
      // JobWorker): the error's own text already joins them.
      const problem = (err as Misconfigured).problem;
      this.log.error(
        problem
          ? { reason: problem.reason, message: problem.message, fix: problem.fix }
          : { err: (err as Error).message },
        'refusing to start',
      );
      await this.health?.close();
      await this.store.pool.end().catch(() => undefined);
      throw err;
    }
    if (this.retrying.signal.aborted) return; // stopped during start-up
    this.scheduleSweep();
    this.startRelays();
    this.log.info({ prefetch: this.config.prefetch, port: this.port }, 'worker started');
  }

  /**
   * The claims database's outbox (handlers' follow-ups), unless
   * JOBFLEET_OUTBOX_RELAY=off, and the producer's outbox JOBFLEET_OUTBOX_URL
   * names: one relay each, which publishes while it holds the outbox's lock
   * and stands by while another pod does.
   */
  private startRelays(): void {
    const c = this.config;
    const ca = c.tlsCaFile ? [readFileSync(c.tlsCaFile)] : undefined;
    const common = {
      brokerUrl: c.brokerUrl,
      ...(ca && { socketOptions: { ca } }),
      registry: this.metrics.registry,
      logger: this.log,
      random: this.random,
    };
    if (c.outboxRelay === 'on')
      this.relays.push(
        startRelay({ ...common, pool: this.store.pool, outbox: 'claims', migrate: false }),
      );
    if (c.outboxUrl) {
      const pool = new pg.Pool({ ...poolConfig(c.outboxUrl, c.tlsCaFile), max: 2 });
      pool.on('error', (err) =>
        this.log.warn({ err: compactReason(err.message) }, 'outbox database connection error'),
      );
      this.outboxPool = pool;
      this.relays.push(startRelay({ ...common, pool, outbox: 'outbox' }));
    }
  }

  /**
   * Waits (with backoff) until PostgreSQL answers; migrates on first contact.
   * At start-up a misconfiguration (credentials, database, schema) throws:
   * no retry fixes it. Later, the same errors are waited out (a Secret may
   * be rotating).
   */
  private async untilStoreAnswers(startingUp: boolean): Promise<void> {
    for (let attempt = 0; !this.retrying.signal.aborted; attempt++) {
      try {
        if (startingUp) await this.store.migrate();
        else await this.store.ping();
        this.storeOk = true;
        this.storeTrouble = undefined;
        this.wakeHeld();
        return;
      } catch (err) {
        this.storeOk = false;
        this.storeTrouble = claimStoreProblem(err, compactReason);
        if (startingUp && this.storeTrouble.reason !== 'ClaimsStoreUnreachable')
          throw new Misconfigured(this.storeTrouble);
        this.log.warn(
          { err: compactReason((err as Error).message), attempt },
          'claim store unavailable; retrying',
        );
        await sleep(backoffMs(attempt, this.random), this.retrying.signal);
      }
    }
  }

  private async connectBroker(startingUp = false): Promise<void> {
    for (let attempt = 0; !this.retrying.signal.aborted; attempt++) {
      let conn: ChannelModel | undefined;
      let adopted = false;
      try {
        const ca = this.config.tlsCaFile ? [readFileSync(this.config.tlsCaFile)] : undefined;
        // No Nagle: an ack is a small frame on the way to the next delivery,
        // and must not wait behind an unacknowledged segment.
        // A cluster's nodes in turn: each failed attempt, and each lost
        // connection, moves on to the next address.
        const url = this.brokerUrls[this.nextBroker++ % this.brokerUrls.length] as string;
        conn = await amqp.connect(withHeartbeat(url), { noDelay: true, ...(ca ? { ca } : {}) });
        if (this.retrying.signal.aborted) {
          await conn.close().catch(() => undefined); // stopped while connecting
          return;
        }
        conn.on('error', (err: Error) =>
          this.log.warn({ err: compactReason(err.message) }, 'broker connection error'),
        );
        const opened = conn;
        conn.on('close', () => this.onBrokerClosed(opened));
        // A memory or disk alarm: the broker stops reading this connection's
        // publishes (retry copies, dead letters) until it clears.
        conn.on('blocked', (reason?: string) => {
          this.blocked = typeof reason === 'string' ? reason : '';
          this.log.warn({ reason: this.blocked }, 'broker resource alarm: publishes blocked');
        });
        conn.on('unblocked', () => {
          this.blocked = undefined;
          this.log.info('broker resource alarm cleared');
        });
        const ch = await conn.createConfirmChannel();
        ch.on('error', (err: Error) =>
          this.log.warn({ err: compactReason(err.message) }, 'broker channel error'),
        );
        this.overLimitQueue = (await this.declareTopology(conn)).overLimit?.name;
        await ch.prefetch(this.config.prefetch);
        if (this.retrying.signal.aborted) throw new Error('stopped while connecting');
        this.conn = conn;
        this.channel = ch;
        adopted = true;
        this.brokerTrouble = undefined;
        if (this.storeOk) await this.consume();
        return;
      } catch (err) {
        // A consume refused after the connection was taken on (its queue
        // deleted between declare and consume, as in a failover): let go of it
        // first, so that its close starts no second reconnect, then close it.
        // Dropped already (a cancel meanwhile): that reconnect is under way,
        // and this loop ends here rather than open a connection beside it.
        const dropped = adopted && conn !== this.conn;
        if (adopted && conn === this.conn) this.letGo();
        // a connection this attempt opened and did not keep: closed, not leaked
        if (conn) await conn.close().catch(() => undefined);
        if (this.retrying.signal.aborted || dropped) return;
        this.brokerTrouble = brokerProblem(err, compactReason);
        if (startingUp && this.brokerTrouble.reason !== 'BrokerUnreachable')
          throw new Misconfigured(this.brokerTrouble);
        this.log.warn(
          { err: compactReason((err as Error).message), attempt },
          'broker unavailable; retrying',
        );
        await sleep(backoffMs(attempt, this.random), this.retrying.signal);
      }
    }
  }

  /** Forgets the connection in use and its consumers (their deliveries settle on its channel). */
  private letGo(): void {
    this.conn = undefined;
    this.blocked = undefined;
    this.channel = undefined;
    this.consumerTag = undefined;
    this.overLimitTag = undefined;
    this.head.consuming(false);
  }

  private onBrokerClosed(conn: ChannelModel): void {
    if (conn !== this.conn) return;
    this.letGo();
    if (this.retrying.signal.aborted) return;
    // Unacked deliveries go back to the queue with the connection; in-flight
    // handlers finish and record, and their redeliveries are acked as duplicates.
    this.log.warn('broker connection lost; reconnecting');
    void this.connectBroker();
  }

  /**
   * Starts over on a new connection; the old one is closed once the
   * deliveries that arrived on it have settled (only its channel can ack
   * them), so a cancel leaks neither a connection nor a channel.
   */
  private onConsumerCancelled(ch: ConfirmChannel): void {
    const old = this.conn;
    if (!old || ch !== this.channel) return;
    this.onBrokerClosed(old);
    const pending = [...this.inflight.values()].filter((e) => e.channel === ch).map((e) => e.done);
    void Promise.allSettled(pending).then(() => {
      this.channels.get(ch)?.acks.flush();
      return old.close().catch(() => undefined);
    });
  }

  /**
   * Declares every queue with the arguments this worker relies on. A queue
   * that exists with other arguments (declared by a producer, an admin or the
   * messaging-topology-operator) is refused, naming the argument: used as it
   * is, a quorum queue without our delivery limit and dead-letter target lets
   * the broker drop messages. The quarantine and the delivery-limit queue
   * only warn: holding messages already, they must stay readable.
   */
  private async declareTopology(conn: ChannelModel): Promise<Topology> {
    const version = String(conn.connection.serverProperties?.version ?? '');
    const major = Number(/^(\d+)\./.exec(version)?.[1] ?? NaN);
    const topo = topology({
      ...this.config,
      brokerMajor: Number.isFinite(major) ? major : undefined,
    });
    // A refused declare closes its channel: each goes on a throwaway one.
    const declare = async (q: QueueDecl, strict: boolean) => {
      const ch = await conn.createChannel();
      ch.on('error', () => undefined);
      try {
        await ch.assertQueue(q.name, q.options);
      } catch (err) {
        const refused = queueRefusal(err, q.name, 'declare');
        if (!refused) throw err;
        if (strict || refused.problem.reason !== 'QueueArgumentsDiffer') throw refused;
        this.log.warn(
          { queue: q.name, err: refused.message, fix: refused.problem.fix },
          'queue used as it is',
        );
        return;
      }
      await ch.close().catch(() => undefined);
    };
    await declare(topo.work, true);
    await declare(topo.deadLetter, false);
    if (topo.overLimit) await declare(topo.overLimit, false);
    for (const q of topo.tiers.values()) await declare(q, true);
    return topo;
  }

  private async consume(): Promise<void> {
    const ch = this.channel;
    if (!ch || this.consumerTag || this.drain.signal.aborted || this.stopped) return;
    const cancelled = () => this.onConsumerCancelled(ch); // queue deleted, node failover
    const consumeFrom = async (queue: string, onMessage: (msg: ConsumeMessage) => void) => {
      try {
        return (await ch.consume(queue, (msg) => (msg ? onMessage(msg) : cancelled()))).consumerTag;
      } catch (err) {
        throw queueRefusal(err, queue, 'consume') ?? err;
      }
    };
    const consumer = ++this.consumers;
    this.head.consuming(true);
    this.consumerTag = await consumeFrom(this.config.queue, (msg) =>
      this.onDelivery(ch, msg, handleDelivery, consumer),
    );
    if (this.overLimitQueue)
      this.overLimitTag = await consumeFrom(this.overLimitQueue, (msg) =>
        this.onDelivery(ch, msg, handleOverLimit),
      );
  }

  private async stopConsuming(): Promise<void> {
    this.head.consuming(false);
    const tags = [this.consumerTag, this.overLimitTag];
    this.consumerTag = undefined;
    this.overLimitTag = undefined;
    for (const tag of tags)
      if (tag && this.channel) await this.channel.cancel(tag).catch(() => undefined);
  }

  /** Deliveries held and the oldest one's age; the map keeps arrival order, so the first is the oldest. */
  private held(): Held {
    const first = this.inflight.values().next().value;
    return {
      deliveries: this.inflight.size,
      oldestSeconds: first ? Math.max(0, (this.now() - first.since) / 1000) : 0,
    };
  }

  private onDelivery(
    ch: ConfirmChannel,
    msg: ConsumeMessage,
    handle: (msg: ConsumeMessage, d: DeliveryDeps) => Promise<DeliveryResult>,
    consumer?: number,
  ): void {
    const entry: InFlight = { done: Promise.resolve(), since: this.now(), channel: ch, consumer };
    this.inflight.set(msg, entry);
    if (consumer !== undefined && !this.head.delivered(msg.properties))
      this.metrics.untimestamped.inc();
    const { deps, acks } = this.forChannel(ch);
    acks.delivered(msg.fields.deliveryTag);
    const settled = () => {
      this.inflight.delete(msg);
      if (consumer !== undefined && consumer === this.consumers) this.head.settled();
    };
    entry.done = handle(msg, deps).then(
      (result) => {
        settled();
        this.opts.onOutcome?.(result, msg);
      },
      (err: Error) => {
        settled();
        this.log.error({ err: compactReason(err.message) }, 'delivery failed unexpectedly');
      },
    );
  }

  /** What every delivery shares, computed once rather than per message. */
  private staticDeps(): Omit<
    DeliveryDeps,
    'publish' | 'ack' | 'requeue' | 'storeDown' | 'storeBack'
  > {
    const c = this.config;
    const handlers = this.specs;
    return {
      queue: c.queue,
      deadLetterQueue: c.deadLetterQueue,
      contract: this.opts.contract,
      handlers,
      types: new Set(handlers.keys()),
      mode: this.opts.mode ?? 'external',
      store: this.store,
      leaseSeconds: c.leaseSeconds,
      maxAttempts: c.maxAttempts,
      maxThrottledRetries: c.maxThrottledRetries,
      maxMessageBytes: c.maxMessageBytes,
      initialDelayMs: c.initialDelaySeconds * 1000,
      maxDelayMs: c.maxDelaySeconds * 1000,
      // topology() lists the tiers shortest first
      tiers: new Map([...this.topo.tiers].map(([ms, q]) => [ms, q.name])),
      deadLetterOwner: c.deadLetterOwner ?? null,
      storeDeadLetterPayloads: c.deadLetterPayloads === 'store',
      revision: c.revision ?? null,
      drainSignal: this.drain.signal,
      handlerTimeoutMs: c.handlerTimeoutSeconds * 1000,
      metrics: this.metrics,
      log: this.log,
      now: this.now,
      random: this.random,
      leases: this.leases,
    };
  }

  /** The deliveries of one channel share their deps and acks: nothing is built per message. */
  private forChannel(ch: ConfirmChannel): { deps: DeliveryDeps; acks: AckBatcher } {
    let c = this.channels.get(ch);
    if (!c) {
      c = this.buildDeps(ch);
      this.channels.set(ch, c);
    }
    return c;
  }

  private buildDeps(ch: ConfirmChannel): { deps: DeliveryDeps; acks: AckBatcher } {
    const safe = (what: string, fn: () => void) => {
      try {
        fn();
      } catch (err) {
        // The channel that delivered it is gone: the broker redelivers it.
        this.log.warn({ err: compactReason((err as Error).message) }, `could not ${what}`);
      }
    };
    const acks = new AckBatcher((tag, upTo) =>
      safe('ack', () => ch.ack({ fields: { deliveryTag: tag } } as ConsumeMessage, upTo)),
    );
    const deps: DeliveryDeps = {
      ...this.shared,
      publish: (queue, content, props) => sendConfirmed(ch, queue, content, props),
      ack: (msg, journal) => {
        acks.ack(msg.fields.deliveryTag);
        if (journal) this.journal.note(journal);
      },
      requeue: (msg) => {
        acks.settledElsewhere(msg.fields.deliveryTag);
        safe('requeue', () => ch.nack(msg, false, true));
      },
      storeDown: (err) => this.onStoreDown(err),
      storeBack: (holds, heldSince) => this.storeBack(holds, heldSince),
    };
    return { deps, acks };
  }

  /**
   * Resolves true when a delivery held through a claim-store outage may try
   * again: the store takes writes, and a backoff that grows with `holds` has
   * passed (a store that answers the probe and still refuses the delivery's
   * statement is not retried hot). False when the worker stops, or the
   * delivery has been held HOLD_LIMIT_MS: then it goes back to the broker.
   */
  private async storeBack(holds: number, heldSince: number): Promise<boolean> {
    const stopping = this.retrying.signal;
    await sleep(backoffMs(holds, this.random), stopping);
    while (!this.storeOk && !stopping.aborted && this.now() - heldSince < HOLD_LIMIT_MS) {
      await new Promise<void>((resolve) => {
        this.heldWaiters.add(resolve);
        // wake to look at the hold limit, whatever the store does
        setTimeout(() => {
          this.heldWaiters.delete(resolve);
          resolve();
        }, 5000).unref();
      });
    }
    return !stopping.aborted && this.now() - heldSince < HOLD_LIMIT_MS;
  }

  private wakeHeld(): void {
    const waiters = [...this.heldWaiters];
    this.heldWaiters.clear();
    for (const w of waiters) w();
  }

  /** Stop taking deliveries until PostgreSQL takes writes again; held deliveries wait for it. */
  private onStoreDown(err: unknown): void {
    if (!this.storeOk) return;
    this.storeOk = false;
    this.storeTrouble = claimStoreProblem(err, compactReason);
    this.log.warn(
      { err: compactReason(String((err as Error)?.message ?? err)) },
      'claim store down: pausing consumption',
    );
    void (async () => {
      await this.stopConsuming();
      await this.untilStoreAnswers(false);
      if (!this.retrying.signal.aborted) {
        this.log.info('claim store back: resuming');
        await this.consume().catch((e: Error) =>
          this.log.warn({ err: compactReason(e.message) }, 'resume failed'),
        );
      }
    })();
  }

  private scheduleSweep(): void {
    // Every 5–10 minutes (jittered so a fleet does not sweep in lockstep).
    const next = 300_000 + this.random() * 300_000;
    this.sweeper = setTimeout(() => {
      void this.sweepClaims().finally(() => {
        if (!this.stopping.signal.aborted) this.scheduleSweep();
      });
    }, next);
    this.sweeper.unref();
  }

  /** Deletes completed claims past their retention, in index-ordered batches. */
  async sweepClaims(): Promise<number> {
    let total = 0;
    try {
      for (;;) {
        const n = await this.store.sweepCompleted(this.config.claimRetentionSeconds);
        total += n;
        if (n < 1000 || this.stopping.signal.aborted) break;
      }
    } catch (err) {
      this.log.warn({ err: compactReason((err as Error).message) }, 'claim sweep failed');
    }
    return total;
  }

  stop(opts: { deadlineMs?: number } = {}): Promise<void> {
    this.stopped ??= this.doStop(opts.deadlineMs ?? this.config.drainDeadlineSeconds * 1000);
    return this.stopped;
  }

  private async doStop(deadlineMs: number): Promise<void> {
    process.removeListener('SIGTERM', this.signalHandler);
    process.removeListener('SIGINT', this.signalHandler);
    if (this.sweeper) clearTimeout(this.sweeper);
    // Connect loops give up now: a worker still starting (the broker or the
    // database unreachable) stops within the deadline, not when they answer.
    this.retrying.abort();
    this.wakeHeld();
    const startEnded = new AbortController();
    await Promise.race([
      (this.started ?? Promise.resolve()).catch(() => undefined).finally(() => startEnded.abort()),
      sleep(deadlineMs, startEnded.signal),
    ]);
    startEnded.abort();
    await this.stopConsuming();
    const settled = Promise.all([...this.inflight.values()].map((e) => e.done));
    const deadline = sleep(deadlineMs, this.stopping.signal);
    await Promise.race([settled, deadline]);
    this.stopping.abort();
    if (this.inflight.size) {
      this.log.warn(
        { unfinished: this.inflight.size },
        'drain deadline passed: aborting unfinished handlers, leaving them unacked',
      );
      this.drain.abort(new Error('drain deadline passed'));
      // Give aborted handlers a moment to give their claims back themselves
      // (marked in doubt). The claims of handlers that ignore the signal are
      // not given back: such a run may still make its call, so its lease
      // runs out instead, and whoever takes the key over decides it first.
      await Promise.race([
        Promise.all([...this.inflight.values()].map((e) => e.done)),
        sleep(1000),
      ]);
    }
    const conn = this.conn;
    if (this.channel) this.channels.get(this.channel)?.acks.flush();
    this.conn = undefined;
    this.channel = undefined;
    // Closing the channel returns every unacked delivery to the queue.
    await conn?.close().catch(() => undefined);
    this.leases.stop();
    await Promise.all(this.relays.map((r) => r.stop()));
    await this.outboxPool?.end().catch(() => undefined);
    const unwritten = await this.journal.close();
    if (unwritten)
      this.log.warn(
        { unwritten },
        'ack journal rows not written at stop (the claims store is down): jobfleet verify cannot check those acks',
      );
    await this.store.pool.end().catch(() => undefined);
    await this.health?.close();
    this.log.info('worker stopped');
  }
}
