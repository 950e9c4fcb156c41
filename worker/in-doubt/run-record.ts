// ctx.intend and ctx.step: what a run records about itself before and after
// its calls, each write fenced by the run's owner token. A run that no longer
// holds its claim (taken over, or its lease not confirmed in time) is told so
// by a ClaimLost before it makes its call.
import type { Logger } from 'pino';
import { storableJson } from '../storable.js';
import { readAnswer, type ReconcileAnswer } from './answers.js';
import type { Doubt, IntentRecord } from './attempts.js';
import { decide, type InDoubtPolicy, type Resolution } from './decide.js';
import { ClaimLost, HoldForPerson, InDoubt } from './errors.js';

/** What a reconcile is given (the handler's, or a step's). */
export interface ReconcileContext {
  key: string;
  /** this attempt's number */
  attempt: number;
  /** the attempt in doubt: its intent, the step it was in, when it started, why it is in doubt */
  inDoubt: Doubt;
  /** aborts at the handler deadline, the drain deadline or a lost lease */
  signal: AbortSignal;
  log: Logger;
}

export interface StepOptions {
  /** asked instead of re-running this step when the attempt that was in it is in doubt */
  reconcile?: (ctx: ReconcileContext) => Promise<ReconcileAnswer>;
}

/** The claim store's fenced writes a run makes (true: written; false: the claim is not ours). */
export interface RunRecordStore {
  intend(key: string, owner: string, intent: string, leaseSeconds: number): Promise<boolean>;
  recordStep(key: string, owner: string, name: string, result: string): Promise<boolean>;
}

export interface RunRecordDeps {
  store: RunRecordStore;
  key: string;
  owner: string;
  attempt: number;
  maxAttempts: number;
  leaseSeconds: number;
  /** local time (ms) until which this run's lease is known to hold; undefined: not held */
  confirmedUntil(): number | undefined;
  now(): number;
  /** results of the steps recorded by earlier attempts */
  steps: Readonly<Record<string, unknown>>;
  /** the doubt this run resumes after it was decided: its step is the interrupted one */
  resumes?: Doubt;
  policy: InDoubtPolicy;
  reconcileContext(doubt: Doubt): ReconcileContext;
  resolved(resolution: Resolution): void;
  /** transactional mode: the run's writes commit or roll back as one; nothing is in doubt */
  transactional: boolean;
}

export class RunRecord {
  private readonly steps: Record<string, unknown>;
  /** the step running now: ctx.intend inside it records it too */
  private current: string | undefined;
  private resumed = false;

  constructor(private readonly d: RunRecordDeps) {
    this.steps = { ...d.steps };
  }

  /** Records what the run is about to do; throws ClaimLost when the claim is not ours. */
  async intend(value: unknown): Promise<void> {
    if (this.d.transactional) return;
    const record: IntentRecord = { ...(this.current && { step: this.current }), value };
    await this.fenced('ctx.intend', (d) =>
      d.store.intend(d.key, d.owner, storableJson(record), d.leaseSeconds),
    );
  }

  /**
   * Runs `fn` once per key: a result recorded by an earlier attempt is
   * returned without calling it. The step an in-doubt attempt was in is
   * decided by its own reconcile (or the policy) before it runs again.
   */
  async step<T>(name: string, fn: () => Promise<T>, opts: StepOptions = {}): Promise<T> {
    if (this.d.transactional) return fn();
    if (Object.hasOwn(this.steps, name)) return this.steps[name] as T;
    const doubt = this.d.resumes;
    if (doubt?.step === name && !this.resumed) {
      this.resumed = true;
      // The step's start, carrying the doubt's intent: a crash while deciding leaves the same doubt.
      await this.begin(name, doubt.intent);
      const answer = opts.reconcile ? await this.ask(name, opts.reconcile, doubt) : undefined;
      const decision = decide(answer, this.d.policy, this.d.attempt, this.d.maxAttempts);
      this.d.resolved(decision.resolution);
      switch (decision.do) {
        case 'complete':
          await this.finish(name, decision.result);
          return decision.result as T;
        case 'retry':
          throw new InDoubt(`step "${name}": ${decision.reason}`);
        case 'hold':
          throw new HoldForPerson(`step "${name}": ${decision.reason}`);
        case 'run':
          break;
      }
    } else {
      await this.begin(name, undefined);
    }
    const result = await fn();
    await this.finish(name, result);
    return result;
  }

  private async begin(name: string, value: unknown): Promise<void> {
    const record: IntentRecord = { step: name, ...(value != null && { value }) };
    await this.fenced(`ctx.step("${name}")`, (d) =>
      d.store.intend(d.key, d.owner, storableJson(record), d.leaseSeconds),
    );
    this.current = name;
  }

  private async finish(name: string, result: unknown): Promise<void> {
    await this.fenced(`ctx.step("${name}")'s result`, (d) =>
      d.store.recordStep(d.key, d.owner, name, storableJson(result)),
    );
    this.steps[name] = result;
    this.current = undefined;
  }

  private async ask(
    name: string,
    reconcile: NonNullable<StepOptions['reconcile']>,
    doubt: Doubt,
  ): Promise<ReconcileAnswer> {
    const where = `step "${name}"'s reconcile`;
    try {
      return readAnswer(await reconcile(this.d.reconcileContext(doubt)), where);
    } catch (err) {
      return {
        outcome: 'unknown',
        reason: `${where} threw ${String((err as Error)?.message ?? err)}`,
      };
    }
  }

  /**
   * A write that must land while the lease holds: refused at once once the
   * lease is past, and given up (ClaimLost) when it has not landed by then.
   */
  private async fenced(what: string, write: (d: RunRecordDeps) => Promise<boolean>): Promise<void> {
    const left = (this.d.confirmedUntil() ?? 0) - this.d.now();
    const lost = (why: string) =>
      new ClaimLost(
        `${what}: ${why}; make no call (whichever worker holds the claim decides this job)`,
      );
    if (left <= 0) throw lost("this run's lease could not be renewed in time");
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), left);
    });
    const written = await Promise.race([
      write(this.d).catch((err: unknown) => err as Error),
      late,
    ]).finally(() => clearTimeout(timer));
    if (written === true) return;
    if (written === false) throw lost('the claim was taken over by another worker');
    if (written === 'late')
      throw lost('the claims database did not answer before the lease ran out');
    throw lost(`the claims database refused the write (${String(written?.message ?? written)})`);
  }
}
