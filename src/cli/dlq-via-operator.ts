// `kubectl jobworker dlq list|replay NAME` through the apiserver alone. Each
// asks the operator with a JobReplay — a dry run for `list` — and follows its
// status. Why this route: the Secrets name the database and the broker by
// their in-cluster names, which a laptop cannot resolve, and on-call should
// not need `get secrets` to look at a quarantine. The operator has both; the
// user needs only `create`, `get` and `delete` on JobReplays (the chart's
// edit role). The audit names the user the apiserver authenticated: the
// plugin writes it into spec.initiator, and the chart's admission policy
// refuses any other name. (`show` and `discard` still read the Secrets.)
import { parseArgs } from 'node:util';
import { API_VERSION } from '../api/jobworker.js';
import {
  DRY_RUN_MAX,
  REPLAY_KIND,
  type DeadLetterEntry,
  type JobReplayStatus,
} from '../api/jobreplay.js';
import { KubeApiError, resourcePath, type KubeClient, type KubeObject } from '../kube/client.js';
import { FAILURE_CLASSES } from '../../worker/envelope.js';
import { date, deadLetterIds, oneOf, positiveNumber, printDeadLetters } from './dlq.js';

const options = {
  id: { type: 'string', multiple: true },
  key: { type: 'string', multiple: true },
  'reason-contains': { type: 'string' },
  class: { type: 'string' },
  since: { type: 'string' },
  until: { type: 'string' },
  limit: { type: 'string', default: '50' },
  json: { type: 'boolean', default: false },
  reason: { type: 'string' },
  initiator: { type: 'string' },
  rate: { type: 'string', default: '5' },
  burst: { type: 'string', default: '10' },
  'max-count': { type: 'string', default: '100' },
  'failure-threshold': { type: 'string', default: '5' },
  force: { type: 'boolean', default: false },
  // accepted for jobfleet dlq's sake: the plugin always follows the JobReplay to its end
  wait: { type: 'boolean', default: false },
  'wait-timeout': { type: 'string', default: '300' },
  'hold-timeout': { type: 'string', default: '900' },
} as const;
type Values = ReturnType<typeof parseArgs<{ options: typeof options }>>['values'];

export interface OperatorDlq {
  client: KubeClient;
  namespace: string;
  jobWorker: string;
  /** the user the apiserver authenticated (SelfSubjectReview) */
  whoAmI(): Promise<string>;
  /** how often the JobReplay's status is read (ms) */
  pollMs?: number;
}

type JobReplayObject = KubeObject & { status?: JobReplayStatus };
const TERMINAL = ['Succeeded', 'Failed', 'Stopped'];

/** The JobReplay selector the flags describe (the same flags as `jobfleet dlq`). */
function selectorOf(o: Values): Record<string, unknown> {
  const ids = deadLetterIds(o.id);
  const failureClass = oneOf(o.class, FAILURE_CLASSES, '--class');
  const since = date(o.since, '--since')?.toISOString();
  const until = date(o.until, '--until')?.toISOString();
  return {
    ...(ids.length && { ids }),
    ...(o.key?.length && { keys: o.key }),
    ...(o['reason-contains'] && { reasonContains: o['reason-contains'] }),
    ...(failureClass && { failureClass }),
    ...(since && { since }),
    ...(until && { until }),
  };
}

export async function dlqViaOperator(
  t: OperatorDlq,
  sub: 'list' | 'replay',
  argv: string[],
): Promise<number> {
  const { values: o } = parseArgs({ args: argv, options, allowPositionals: false });
  return sub === 'list' ? list(t, o) : replay(t, o);
}

/** Creates the JobReplay (a generated name) and returns its name. */
async function create(
  t: OperatorDlq,
  prefix: string,
  spec: Record<string, unknown>,
): Promise<string> {
  const created = await t.client.request<KubeObject>(
    'POST',
    resourcePath(API_VERSION, REPLAY_KIND, t.namespace),
    {
      apiVersion: API_VERSION,
      kind: REPLAY_KIND,
      metadata: { generateName: `${t.jobWorker.slice(0, 40)}-${prefix}-`, namespace: t.namespace },
      spec: { jobWorker: t.jobWorker, ...spec },
    },
  );
  return created.metadata.name;
}

/** Reads the JobReplay until `done` says so, or until `timeoutMs`. */
async function follow(
  t: OperatorDlq,
  name: string,
  timeoutMs: number,
  seen: (jr: JobReplayObject) => boolean,
): Promise<JobReplayObject | undefined> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const jr = await t.client.get<JobReplayObject>(API_VERSION, REPLAY_KIND, t.namespace, name);
    if (seen(jr)) return jr;
    if (Date.now() > until) return undefined;
    await new Promise((r) => setTimeout(r, t.pollMs ?? 300));
  }
}

async function list(t: OperatorDlq, o: Values): Promise<number> {
  const limit = positiveNumber(o.limit, '--limit', DRY_RUN_MAX);
  const name = await create(t, 'list', {
    dryRun: true,
    selector: selectorOf(o),
    maxCount: limit,
    initiator: await t.whoAmI(),
    reason: 'kubectl jobworker dlq list',
  });
  try {
    const jr = await follow(t, name, 60_000, (x) => TERMINAL.includes(x.status?.phase ?? ''));
    if (!jr)
      throw new Error(
        `the operator did not answer JobReplay ${t.namespace}/${name} within 60 s: is it running? (kubectl get jobreplay ${name} -n ${t.namespace} -o yaml)`,
      );
    const s = jr.status!;
    if (s.phase !== 'Succeeded') throw new Error(s.message ?? `the dry run ended ${s.phase}`);
    const entries: DeadLetterEntry[] = s.entries ?? [];
    const total = s.selected ?? entries.length;
    if (o.json) {
      console.log(JSON.stringify({ total, rows: entries }, null, 2));
      return 0;
    }
    printDeadLetters(
      `${total} quarantined dead letter${total === 1 ? '' : 's'} of JobWorker ${t.jobWorker}${total > entries.length ? ` (first ${entries.length})` : ''}`,
      entries.map((e) => ({ ...e, at: new Date(e.deadLetteredAt) })),
    );
    return 0;
  } finally {
    await t.client.delete(API_VERSION, REPLAY_KIND, t.namespace, name);
  }
}

/**
 * A replay: the JobReplay is created and followed until it ends (exit 0 when
 * it succeeded, 1 otherwise), holds longer than --hold-timeout (exit 3), or
 * --wait-timeout passes (exit 0: it goes on by itself). A held or unfinished
 * replay is left to the operator, which resumes it once the hold ends.
 */
async function replay(t: OperatorDlq, o: Values): Promise<number> {
  const typed = (o.reason ?? '').trim();
  if (!typed) throw new Error('replay needs --reason "why" (recorded in the audit trail)');
  const selector = selectorOf(o);
  if (!Object.keys(selector).length)
    throw new Error(
      'replay needs a selection: --id, --key, --class, --reason-contains, --since or --until',
    );
  const user = await t.whoAmI();
  const reason =
    o.initiator && o.initiator !== user ? `${typed} (initiator given as ${o.initiator})` : typed;
  let name: string;
  try {
    name = await create(t, 'replay', {
      selector,
      ratePerSecond: positiveNumber(o.rate, '--rate'),
      burst: positiveNumber(o.burst, '--burst'),
      maxCount: positiveNumber(o['max-count'], '--max-count'),
      failureThreshold: positiveNumber(o['failure-threshold'], '--failure-threshold'),
      force: o.force,
      initiator: user,
      reason,
    });
  } catch (err) {
    if (err instanceof KubeApiError && err.status === 403)
      throw new Error(
        `you may not create JobReplays in ${t.namespace} (the chart's edit role grants it): ${err.message}`,
        { cause: err },
      );
    throw err;
  }
  console.error(`jobreplay/${name} created: kubectl get jobreplay ${name} -n ${t.namespace} -w`);
  const holdMs = positiveNumber(o['hold-timeout'], '--hold-timeout') * 1000;
  let heldSince: number | undefined;
  let said = '';
  const jr = await follow(
    t,
    name,
    positiveNumber(o['wait-timeout'], '--wait-timeout') * 1000,
    (x) => {
      const s = x.status;
      if (s?.message && s.message !== said) console.error((said = s.message));
      heldSince = s?.phase === 'Held' ? (heldSince ?? Date.now()) : undefined;
      return (
        TERMINAL.includes(s?.phase ?? '') ||
        (heldSince !== undefined && Date.now() - heldSince >= holdMs)
      );
    },
  );
  const s = jr?.status;
  if (!s || !TERMINAL.includes(s.phase ?? '')) {
    console.error(
      s?.phase === 'Held'
        ? `held (${s.heldReason}): ${s.message} — the JobReplay goes on by itself when the hold ends (kubectl delete jobreplay ${name} -n ${t.namespace} to cancel it)`
        : `still running: it goes on by itself (kubectl get jobreplay ${name} -n ${t.namespace} -w)`,
    );
    return s?.phase === 'Held' ? 3 : 0;
  }
  if (o.json) console.log(JSON.stringify({ name, ...s }, null, 2));
  return s.phase === 'Succeeded' ? 0 : 1;
}
