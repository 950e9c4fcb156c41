// Reconciles JobReplay resources: resolves the JobWorker's queue and
// credentials, runs the replay (src/dlq/replay.ts) in the background and
// writes its progress to status. The audit rows carry the JobReplay's uid as
// the replay id, so a replay interrupted by an operator restart or a leader
// change resumes where it stopped: resolved entries are no longer selected,
// and what was already replayed counts against maxCount. While the incident
// lasts (src/dlq/replay-hold.ts) a replay is Held, before it starts and
// between messages, and goes on by itself once it is over.
import { setTimeout as sleep } from 'node:timers/promises';
import amqp from 'amqplib';
import pg from 'pg';
import type { Logger } from 'pino';
import { connectAny } from '../../worker/broker-urls.js';
import { API_VERSION, KIND, parseSpec, type JobWorkerStatus } from '../api/jobworker.js';
import {
  REPLAY_KIND,
  parseReplaySpec,
  type DeadLetterEntry,
  type JobReplaySpec,
  type JobReplayStatus,
} from '../api/jobreplay.js';
import { replay, type ReplayProgress } from '../dlq/replay.js';
import { askHold, holdGate } from '../dlq/replay-gate.js';
import { replayRate, type Hold } from '../dlq/replay-hold.js';
import { DeadLetterStore, type DeadLetterRow, type Selector } from '../dlq/store.js';
import type { KubeClient, KubeObject } from '../kube/client.js';
import { eventTarget, type EventRecorder } from '../kube/events.js';
import { resolveJobWorker } from '../kube/jobworker-target.js';
import { FIELD_MANAGER } from '../reconcile/children/index.js';
import { iso } from '../reconcile/model/index.js';
import { ClaimStore } from '../../worker/claim-store.js';
import type { ProcessResult } from './workqueue.js';
import type { EventReason } from '../api/reasons.js';

/** After the pass, how long replayed jobs are waited for before the replay reports what it saw. */
const SETTLE_TIMEOUT_MS = 15 * 60_000;
const TERMINAL = new Set(['Succeeded', 'Failed', 'Stopped']);

export interface ReplayControllerDeps {
  client: KubeClient;
  events: EventRecorder;
  log: Logger;
  now?: () => Date;
  /** status writes at most this often while a replay runs (default 1 s) */
  progressEveryMs?: number;
  /** how often replayed jobs are checked after the pass (default 2 s) */
  settlePollMs?: number;
}

type JobReplay = KubeObject & { spec?: unknown; status?: JobReplayStatus };

/** The JobWorker a replay targets: its queues, its broker and its claims database. */
interface ReplayTarget {
  queue: string;
  deadLetterQueue: string;
  amqpUrl: string;
  claimsUrl: string;
}

/** What the phases of one replay run share. */
interface ReplayRun {
  jr: JobReplay;
  spec: JobReplaySpec;
  t: ReplayTarget;
  signal: AbortSignal;
  store: DeadLetterStore;
  channel: amqp.ConfirmChannel;
  target: Parameters<EventRecorder['emit']>[0];
  /** undefined when forced */
  gate: (() => Promise<void>) | undefined;
}

export class JobReplayController {
  private readonly runs = new Map<string, { abort: AbortController; done: Promise<void> }>();
  /** per JobReplay uid: the status last written */
  private readonly written = new Map<string, JobReplayStatus>();
  private readonly now: () => Date;

  constructor(private readonly d: ReplayControllerDeps) {
    this.now = d.now ?? (() => new Date());
  }

  async reconcile(key: string): Promise<ProcessResult> {
    const [namespace, name] = key.split('/') as [string, string];
    const jr = await this.d.client.find<JobReplay>(API_VERSION, REPLAY_KIND, namespace, name);
    if (!jr || jr.metadata.deletionTimestamp) {
      this.runs.get(key)?.abort.abort();
      return {};
    }
    if (TERMINAL.has(jr.status?.phase ?? '')) return {};
    // Running: looked at again after as long as a new run asks (the queue keeps the latest requeue only).
    if (this.runs.has(key)) return { requeueAfterMs: 10_000 };

    const parsed = parseReplaySpec(jr.spec);
    if (!parsed.ok) {
      // The spec is immutable: an invalid one can only be replaced.
      await this.writeStatus(jr, {
        phase: 'Failed',
        message: `The spec is invalid: ${parsed.problems.join('; ')}. Create a corrected JobReplay.`,
        finishedAt: iso(this.now()),
      });
      return {};
    }
    const spec = parsed.spec;
    const target = await resolveJobWorker(this.d.client, namespace, spec.jobWorker);
    if ('problem' in target) {
      const fix = target.missing ? 'fix spec.jobWorker' : 'fix it, and the replay starts';
      await this.writeStatus(jr, { phase: 'Pending', message: `${target.problem}: ${fix}.` });
      return { requeueAfterMs: 10_000 };
    }
    if (spec.dryRun) {
      await this.dryRun(jr, spec, target);
      return {};
    }
    const abort = new AbortController();
    const done = this.run(jr, spec, target, abort.signal)
      .catch(async (err: Error) => {
        this.d.log.warn({ key, err }, 'replay interrupted; it resumes on the next reconcile');
        await this.writeStatus(jr, {
          message: `Interrupted: ${err.message}. Retrying; what was replayed stays replayed.`,
        }).catch(() => undefined);
      })
      .finally(() => this.runs.delete(key));
    this.runs.set(key, { abort, done });
    // Wakes the controller once the run ends (to resume after an interruption).
    return { requeueAfterMs: 10_000 };
  }

  private async run(
    jr: JobReplay,
    spec: JobReplaySpec,
    t: ReplayTarget,
    signal: AbortSignal,
  ): Promise<void> {
    const pool = new pg.Pool({
      connectionString: t.claimsUrl,
      max: 2,
      connectionTimeoutMillis: 5000,
    });
    pool.on('error', () => undefined);
    const conn = await connectAny(t.amqpUrl, (url) => amqp.connect(url));
    conn.on('error', () => undefined);
    try {
      const channel = await conn.createConfirmChannel();
      channel.on('error', () => undefined); // a refusal rejects the operation that caused it
      await new ClaimStore(pool).migrate(); // the audit tables, when no worker of this version ran yet
      const store = new DeadLetterStore(pool);
      const target = eventTarget({ ...jr, apiVersion: API_VERSION, kind: REPLAY_KIND });
      // While the incident lasts nothing is replayed (../dlq/replay-hold.ts), unless forced.
      const gate = spec.force ? undefined : this.holdGate(jr, spec, store, t.queue, target, signal);
      await gate?.();
      if (signal.aborted) return;
      const run: ReplayRun = { jr, spec, t, signal, store, channel, target, gate };
      const { rate, running } = await this.begin(run);
      const p = await this.pass(run, rate, running);
      if (signal.aborted) return;
      if (p.stoppedBy) {
        await this.finish(jr, target, 'Stopped', p, 'Warning', 'ReplayStopped');
        return;
      }
      const last = await this.settle(run, p, running);
      if (signal.aborted) return;
      const ok = last.failedAgain === 0 && last.pending === 0 && last.notFound === 0;
      await this.finish(
        jr,
        target,
        ok ? 'Succeeded' : 'Failed',
        last,
        ok ? 'Normal' : 'Warning',
        ok ? 'ReplaySucceeded' : 'ReplayFailed',
      );
    } finally {
      await conn.close().catch(() => undefined);
      await pool.end().catch(() => undefined);
    }
  }

  /**
   * The run starts (its event, the first time only) at the rate the fleet
   * allows now (an event when capped), and says so in status. `running`: the
   * status message while the pass runs.
   */
  private async begin(run: ReplayRun): Promise<{ rate: number; running: string }> {
    const { jr, spec, target } = run;
    const startedAt = jr.status?.startedAt ?? iso(this.now());
    if (!jr.status?.startedAt)
      await this.d.events.emit(
        target,
        'Normal',
        'ReplayStarted',
        `${spec.initiator} replays dead letters of ${spec.jobWorker} at ${spec.ratePerSecond}/s (max ${spec.maxCount}): ${spec.reason}`,
      );
    const rate = await this.allowedRate(jr, spec);
    if (rate.capped)
      await this.d.events.emit(
        target,
        'Normal',
        'ReplayRateCapped',
        `Replaying at ${rate.capped}.`,
      );
    // the cap stays in the message while the pass runs: the plugin prints it
    const running = rate.capped ? `Replaying at ${rate.capped}.` : 'Replaying.';
    await this.writeStatus(jr, { phase: 'Running', startedAt, message: running });
    return { rate: rate.rate, running };
  }

  /**
   * Replayed jobs share the downstream budget with first attempts: never
   * faster than it allows, asked again while the replay runs (the fleet's capacity moves).
   */
  private async allowedRate(jr: JobReplay, spec: JobReplaySpec) {
    const jw = await this.d.client.find<KubeObject & { status?: JobWorkerStatus }>(
      API_VERSION,
      KIND,
      jr.metadata.namespace,
      spec.jobWorker,
    );
    const parsed = jw ? parseSpec(jw.spec) : undefined;
    return replayRate(spec.ratePerSecond, parsed?.ok ? parsed.spec : undefined, jw?.status);
  }

  /**
   * The pass over the selected dead letters; its progress goes to status at
   * most every progressEveryMs, one write at a time.
   */
  private async pass(run: ReplayRun, rate: number, running: string): Promise<ReplayProgress> {
    const { jr, spec, t, signal, store, channel, gate } = run;
    let lastWrite = 0;
    let writing: Promise<unknown> = Promise.resolve();
    const p = await replay(
      {
        selector: storeSelector(spec, t.queue),
        deadLetterQueue: t.deadLetterQueue,
        replayId: jr.metadata.uid as string,
        initiator: spec.initiator,
        reason: spec.force
          ? `${spec.reason} (forced: replayed whatever the incident)`
          : spec.reason,
        ratePerSecond: rate,
        burst: spec.burst,
        maxCount: spec.maxCount,
        failureThreshold: spec.failureThreshold,
      },
      {
        store,
        channel,
        now: () => this.now().getTime(),
        sleep: (ms) => sleep(ms),
        signal,
        ...(gate && { gate }),
        rate: async () => (await this.allowedRate(jr, spec)).rate,
        onProgress: (x) => {
          const now = Date.now();
          if (x.done || now - lastWrite < (this.d.progressEveryMs ?? 1000)) return;
          lastWrite = now;
          writing = writing.then(() => this.writeProgress(jr, x, running)).catch(() => undefined);
        },
      },
    );
    await writing;
    return p;
  }

  /**
   * The pass is done; the replayed jobs run on the workers. Wait for them
   * (SETTLE_TIMEOUT_MS at most).
   */
  private async settle(
    run: ReplayRun,
    p: ReplayProgress,
    running: string,
  ): Promise<ReplayProgress> {
    const { jr, signal, store } = run;
    let last = p;
    const until = Date.now() + SETTLE_TIMEOUT_MS;
    while (last.pending > 0 && Date.now() < until && !signal.aborted) {
      await this.writeProgress(
        jr,
        { ...last, message: `Replayed; waiting for ${last.pending} jobs to finish.` },
        running,
      );
      await new Promise((r) => setTimeout(r, this.d.settlePollMs ?? 2000));
      last = { ...last, ...(await store.replayCounts(jr.metadata.uid as string)) };
    }
    return last;
  }

  /** The counts so far in status; `running` unless the pass says something of its own. */
  private writeProgress(jr: JobReplay, p: ReplayProgress, running: string): Promise<void> {
    return this.writeStatus(jr, { phase: 'Running', ...counts(p), message: p.message || running });
  }

  /**
   * A dry run: what the selector matches, written to status and nothing
   * replayed. How `kubectl jobworker dlq list` reads the quarantine through
   * the apiserver alone (the user needs neither the Secrets nor a route to
   * the database). A database it cannot reach fails the run, saying so.
   */
  private async dryRun(
    jr: JobReplay,
    spec: JobReplaySpec,
    t: { queue: string; claimsUrl: string },
  ) {
    const pool = new pg.Pool({
      connectionString: t.claimsUrl,
      max: 1,
      connectionTimeoutMillis: 5000,
    });
    pool.on('error', () => undefined);
    try {
      const store = new DeadLetterStore(pool);
      const selector = storeSelector(spec, t.queue);
      const [rows, selected] = await Promise.all([
        store.list(selector, spec.maxCount),
        store.count(selector),
      ]);
      await this.writeStatus(jr, {
        phase: 'Succeeded',
        selected,
        entries: rows.map(entryOf),
        message: `${selected} quarantined dead letter${selected === 1 ? '' : 's'} of ${spec.jobWorker} match${selected === 1 ? 'es' : ''}${selected > rows.length ? ` (the first ${rows.length} listed)` : ''}; nothing was replayed (a dry run).`,
        finishedAt: iso(this.now()),
      });
    } catch (err) {
      await this.writeStatus(jr, {
        phase: 'Failed',
        message: `The claims database could not be read: ${(err as Error).message}.`,
        finishedAt: iso(this.now()),
      });
    } finally {
      await pool.end().catch(() => undefined);
    }
  }

  /** The replay's gate (../dlq/replay-gate.ts): Held and Running again in status, each with its event. */
  private holdGate(
    jr: JobReplay,
    spec: JobReplaySpec,
    store: DeadLetterStore,
    queue: string,
    target: Parameters<EventRecorder['emit']>[0],
    signal: AbortSignal,
  ): () => Promise<void> {
    return holdGate({
      check: () => this.hold(jr, spec, store, queue),
      onHeld: async (hold) => {
        await this.writeStatus(jr, {
          phase: 'Held',
          heldReason: hold.reason,
          message: hold.message,
        });
        await this.d.events.emit(target, 'Normal', 'ReplayHeld', hold.message);
      },
      onResumed: async (was) => {
        const message = `The hold ended (${was.reason}): replaying.`;
        await this.writeStatus(jr, { phase: 'Running', heldReason: undefined, message });
        await this.d.events.emit(target, 'Normal', 'ReplayResumed', message);
      },
      now: () => this.now().getTime(),
      signal,
    });
  }

  /** The target JobWorker's status and the quarantine's recent arrivals, asked whether to hold. */
  private async hold(
    jr: JobReplay,
    spec: JobReplaySpec,
    store: DeadLetterStore,
    queue: string,
  ): Promise<Hold | undefined> {
    const jw = await this.d.client.find<KubeObject & { status?: JobWorkerStatus }>(
      API_VERSION,
      KIND,
      jr.metadata.namespace,
      spec.jobWorker,
    );
    return askHold(store, {
      jobWorker: spec.jobWorker,
      queue,
      failureClass: spec.selector.failureClass,
      status: jw?.status,
      now: this.now().getTime(),
    });
  }

  private async finish(
    jr: JobReplay,
    target: Parameters<EventRecorder['emit']>[0],
    phase: 'Succeeded' | 'Failed' | 'Stopped',
    p: ReplayProgress,
    type: 'Normal' | 'Warning',
    reason: EventReason,
  ): Promise<void> {
    const message =
      phase === 'Stopped'
        ? p.message
        : `replayed ${p.replayed} of ${p.selected} selected; skipped ${p.skipped} already completed; completed ${p.completed}, failed again ${p.failedAgain}, pending ${p.pending}${p.notFound ? `; ${p.notFound} not found in the dead-letter queue` : ''}`;
    await this.writeStatus(jr, { phase, ...counts(p), message, finishedAt: iso(this.now()) });
    await this.d.events.emit(target, type, reason, message);
  }

  /**
   * Server-side apply owns what it sends: every write carries the whole
   * status (the last one written plus the change), or fields would vanish.
   */
  private async writeStatus(jr: JobReplay, s: JobReplayStatus): Promise<void> {
    const uid = jr.metadata.uid as string;
    const status = {
      ...(this.written.get(uid) ?? jr.status),
      ...s,
      observedGeneration: jr.metadata.generation ?? 1,
    };
    this.written.set(uid, status);
    if (this.written.size > 10_000) this.written.clear();
    await this.d.client.apply(
      {
        apiVersion: API_VERSION,
        kind: REPLAY_KIND,
        metadata: { name: jr.metadata.name, namespace: jr.metadata.namespace },
        status,
      },
      FIELD_MANAGER,
      { subresource: 'status' },
    );
  }

  /** Stops every run (leadership lost, or shutdown); each resumes wherever the next leader reconciles it. */
  async stop(): Promise<void> {
    const runs = [...this.runs.values()];
    for (const r of runs) r.abort.abort();
    await Promise.all(runs.map((r) => r.done));
  }
}

function storeSelector(spec: JobReplaySpec, queue: string): Selector {
  const s = spec.selector;
  return {
    queue,
    ids: s.ids,
    keys: s.keys,
    reason: s.reasonContains,
    failureClass: s.failureClass,
    since: s.since ? new Date(s.since) : undefined,
    until: s.until ? new Date(s.until) : undefined,
  };
}

function entryOf(r: DeadLetterRow): DeadLetterEntry {
  return {
    id: Number(r.id),
    ...(r.key !== null && { key: r.key }),
    ...(r.type !== null && { type: r.type }),
    failureClass: r.failure_class,
    attempts: r.attempts,
    reason: r.reason,
    deadLetteredAt: iso(r.dead_lettered_at),
  };
}

function counts(p: ReplayProgress): JobReplayStatus {
  return {
    selected: p.selected,
    replayed: p.replayed,
    skipped: p.skipped,
    completed: p.completed,
    failedAgain: p.failedAgain,
    pending: p.pending,
    notFound: p.notFound,
  };
}
