// What an attempt knows of the ones before it, read from its claim row
// (migration 9): the previous attempt (ctx.previous), the attempt whose
// outcome is still undecided (the doubt), and the steps already recorded.
// Pure: parses the statement's jsonb answer.

/** How an earlier attempt ended, as the next one sees it. */
export type AttemptEnd = 'in_doubt' | 'failed' | 'throttled';

/** Why an attempt is in doubt. */
export type DoubtCause =
  /** its worker died or froze mid-run, and the claim was taken over after its lease */
  | 'taken_over'
  /** the handler threw InDoubt: it sent the request and does not know the answer */
  | 'in_doubt_thrown'
  /** the handler ran past handlerTimeoutSeconds and was abandoned */
  | 'timed_out'
  /** the drain deadline aborted it mid-run */
  | 'drained';

/** The attempt before this one (ctx.previous). */
export interface PreviousAttempt {
  attempt: number;
  /** the owner token it ran under */
  owner: string | null;
  startedAt: Date | null;
  /** what it recorded with ctx.intend before its call (null: nothing) */
  intent: unknown;
  /** the step it was in when it ended (ctx.step), if any */
  step: string | null;
  ended: AttemptEnd;
  /** its error, when it failed */
  error: string | null;
}

/** An attempt whose outcome is unknown and not yet decided. */
export interface Doubt {
  attempt: number;
  owner: string | null;
  startedAt: Date | null;
  intent: unknown;
  step: string | null;
  cause: DoubtCause;
}

export interface AttemptHistory {
  previous?: PreviousAttempt;
  doubt?: Doubt;
  /** recorded results of ctx.step, by name */
  steps: Readonly<Record<string, unknown>>;
}

/**
 * The intent column holds {step?, value?}: ctx.intend's value, and the step
 * the attempt was in. Handlers see the two apart.
 */
export interface IntentRecord {
  step?: string;
  value?: unknown;
}

const obj = (v: unknown): Record<string, unknown> | undefined =>
  v !== null && typeof v === 'object' && !Array.isArray(v)
    ? (v as Record<string, unknown>)
    : undefined;
const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const date = (v: unknown): Date | null => {
  const t = typeof v === 'string' ? Date.parse(v) : NaN;
  return Number.isFinite(t) ? new Date(t) : null;
};

function intentOf(v: unknown): { intent: unknown; step: string | null } {
  const r = obj(v);
  return { intent: r?.value ?? null, step: str(r?.step) };
}

const ENDS: readonly AttemptEnd[] = ['in_doubt', 'failed', 'throttled'];
const CAUSES: readonly DoubtCause[] = ['taken_over', 'in_doubt_thrown', 'timed_out', 'drained'];

/** `v` when it is one of `allowed`, else `fallback`. */
const oneOf = <T extends string>(v: unknown, allowed: readonly T[], fallback: T): T =>
  allowed.includes(v as T) ? (v as T) : fallback;

/** What an attempt's jsonb (previous or doubt) says of the attempt itself. */
const attemptOf = (r: Record<string, unknown>, attempt: number) => ({
  attempt,
  owner: str(r.owner),
  startedAt: date(r.startedAt),
  ...intentOf(r.intent),
});

/** The claim statement's `attempt` column; anything it cannot read is left out. */
export function readHistory(column: unknown): AttemptHistory {
  const h = obj(column);
  const p = obj(h?.previous);
  const d = obj(h?.doubt);
  // each step's results, in the order recorded: the first is the step's (a second is a fault verify reports)
  const steps = Object.fromEntries(
    Object.entries(obj(h?.steps) ?? {})
      .filter(([, v]) => Array.isArray(v) && v.length > 0)
      .map(([name, v]) => [name, (v as unknown[])[0]]),
  );
  const history: AttemptHistory = { steps };
  if (p && typeof p.attempt === 'number')
    history.previous = {
      ...attemptOf(p, p.attempt),
      // a released claim from before migration 9 says nothing: it failed
      ended: oneOf(p.ended, ENDS, 'failed'),
      error: str(p.error),
    };
  if (d && typeof d.attempt === 'number')
    history.doubt = { ...attemptOf(d, d.attempt), cause: oneOf(d.how, CAUSES, 'taken_over') };
  return history;
}

/** A sentence for logs, dead-letter reasons and `kubectl jobworker why`. */
export function describeDoubt(d: Doubt): string {
  const how: Record<DoubtCause, string> = {
    taken_over: 'its worker stopped mid-run (crash, kill, lost node, or paused past its lease)',
    in_doubt_thrown: 'the handler threw InDoubt',
    timed_out: 'it ran past handlerTimeoutSeconds',
    drained: 'the drain deadline aborted it mid-run',
  };
  const step = d.step ? ` in step "${d.step}"` : '';
  const intent = d.intent == null ? 'no intent recorded' : `intent ${JSON.stringify(d.intent)}`;
  return `attempt ${d.attempt}${step} is in doubt: ${how[d.cause]}; ${intent}`;
}
