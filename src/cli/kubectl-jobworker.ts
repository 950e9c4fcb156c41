// `kubectl jobworker …`: the kubectl plugin (kubectl finds the
// `kubectl-jobworker` executable on PATH). Rollout commands read and patch
// the JobWorker; `dlq list` and `dlq replay` ask the operator through the
// apiserver (a JobReplay: ./dlq-via-operator.ts); `dlq show` and `discard`
// resolve its queues and the URLs in the Secrets it names and run
// `jobfleet dlq` against them, so on-call never copies a credential.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { API_VERSION, KIND, parseSpec, type JobWorkerStatus } from '../api/jobworker.js';
import { KubeApiError, KubeClient, resourcePath, type KubeObject } from '../kube/client.js';
import { KubeAccess } from '../kube/kubeconfig.js';
import { resolveJobWorker } from '../kube/jobworker-target.js';
import { revisionRecordName } from '../reconcile/children/index.js';
import { ANNOTATION_PAUSE_BY, ANNOTATION_PAUSE_REASON } from '../reconcile/rollout/index.js';
import { ANNOTATION_COHORT_COMMAND, type CohortCommand } from '../reconcile/cohort/index.js';
import { runDlq } from './dlq.js';
import { dlqViaOperator } from './dlq-via-operator.js';
import { historyLines, statusLines, verdict, whyLines } from './jobworker-view.js';
import {
  leaseToRead,
  operatorWords,
  type LeaseRead,
  type LeaseSpec,
  type OperatorWords,
} from './operator-lease.js';
import { KUBECTL_JOBWORKER_USAGE } from './help.js';

/** Set when plugins/build.ts bundles this file: the bundle has no package.json beside it. */
declare const JOBFLEET_VERSION: string | undefined;

/** The version of the package this file came from (source or dist/: the nearest jobfleet package.json). */
function packageVersion(): string {
  if (typeof JOBFLEET_VERSION === 'string') return JOBFLEET_VERSION;
  for (let dir = path.dirname(fileURLToPath(import.meta.url)); ; dir = path.dirname(dir)) {
    try {
      const p = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as {
        name?: string;
        version?: string;
      };
      if (p.name === 'jobfleet' && p.version) return p.version;
    } catch {
      // no package.json here: look further up
    }
    if (dir === path.dirname(dir)) return 'unknown';
  }
}

type JobWorkerObject = KubeObject & { spec: Record<string, unknown>; status?: JobWorkerStatus };

/**
 * kubectl's global flags a plugin receives after its name: -n/--namespace,
 * --kubeconfig, --context, --as and --as-group (repeatable), each also as
 * --flag=value; the rest in order.
 */
function globalFlags(argv: string[]): {
  namespace?: string;
  kubeconfig?: string;
  context?: string;
  as?: string;
  asGroups: string[];
  args: string[];
} {
  const flags: Record<string, string | undefined> = {};
  const asGroups: string[] = [];
  const names: Record<string, string> = {
    '-n': 'namespace',
    '--namespace': 'namespace',
    '--kubeconfig': 'kubeconfig',
    '--context': 'context',
    '--as': 'as',
    '--as-group': 'asGroup',
  };
  const args: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const eq = a.indexOf('=');
    const flag = eq > 0 && a.startsWith('--') ? a.slice(0, eq) : a;
    const name = names[flag];
    if (!name) {
      args.push(a);
      continue;
    }
    const value = eq > 0 && flag !== a ? a.slice(eq + 1) : argv[++i];
    if (name === 'asGroup') {
      if (value) asGroups.push(value);
    } else flags[name] = value;
  }
  return { ...flags, asGroups, args };
}

/** What every command acts through: kubectl's client and namespace, and the JobWorker read by name. */
interface PluginContext {
  client: KubeClient;
  namespace: string;
  /** the JobWorker, or an error saying it does not exist */
  get(name: string): Promise<JobWorkerObject>;
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (!command || command === '--help' || command === '-h') {
    console.log(KUBECTL_JOBWORKER_USAGE);
    return command ? 0 : 2;
  }
  if (command === 'version') {
    console.log(`kubectl-jobworker ${packageVersion()}`);
    return 0;
  }
  const flags = globalFlags(rest);
  const { args } = flags;
  const c = pluginContext(flags);

  switch (command) {
    case 'status':
      return statusCommand(c, args);
    case 'history': {
      const name = args[0];
      if (!name) return usage('history NAME');
      console.log(historyLines(await c.get(name)).join('\n'));
      return 0;
    }
    case 'why': {
      const { values, positionals } = parseArgs({
        args,
        allowPositionals: true,
        options: { 'operator-namespace': { type: 'string' } },
      });
      const name = positionals[0];
      if (!name) return usage('why NAME [--operator-namespace NAMESPACE]');
      const jw = await c.get(name);
      console.log(
        whyLines(jw, await checkOperator(c, jw, values['operator-namespace'])).join('\n'),
      );
      return 0;
    }
    case 'undo':
      return undoCommand(c, args);
    case 'pause':
    case 'resume':
    case 'promote':
    case 'abort':
      return rolloutSwitch(c, command, args);
    case 'dlq':
      return dlqCommand(c, args);
    default:
      console.error(
        `kubectl jobworker: unknown command "${command}"\n\n${KUBECTL_JOBWORKER_USAGE}`,
      );
      return 2;
  }
}

/** The client kubectl's global flags name, and the namespace its commands act in. */
function pluginContext(flags: ReturnType<typeof globalFlags>): PluginContext {
  const { namespace: ns, kubeconfig, context, as, asGroups } = flags;
  // --kubeconfig replaces KUBECONFIG, as for kubectl itself
  const env = kubeconfig ? { ...process.env, KUBECONFIG: kubeconfig } : process.env;
  const access = KubeAccess.fromDefault(env, context);
  if (as) access.impersonate(as, asGroups);
  else if (asGroups.length) throw new Error('--as-group needs --as: name the user to act as');
  const client = new KubeClient(access);
  const namespace = ns ?? client.contextNamespace() ?? 'default';
  const get = (name: string) =>
    client.find<JobWorkerObject>(API_VERSION, KIND, namespace, name).then((jw) => {
      if (!jw) throw new Error(`JobWorker ${namespace}/${name} does not exist`);
      return jw;
    });
  return { client, namespace, get };
}

/** `status NAME [--watch]`: the view once (exit code: its verdict), or followed until it settles. */
async function statusCommand(c: PluginContext, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      watch: { type: 'boolean', short: 'w', default: false },
      timeout: { type: 'string', default: '10m' },
      'operator-namespace': { type: 'string' },
    },
  });
  const name = positionals[0];
  if (!name) return usage('status NAME [--watch] [--operator-namespace NAMESPACE]');
  const read = async () => {
    const jw = await c.get(name);
    return { jw, operator: await checkOperator(c, jw, values['operator-namespace']) };
  };
  if (!values.watch) {
    const { jw, operator } = await read();
    console.log(statusLines(jw, new Date(), operator).join('\n'));
    return verdict(jw, operator);
  }
  return watch(read, durationMs(values.timeout));
}

/**
 * Whether an operator still updates the JobWorker's status: its leader
 * Lease, read as this user may (./operator-lease.ts says what it means).
 */
async function checkOperator(
  c: PluginContext,
  jw: JobWorkerObject,
  operatorNamespace: string | undefined,
): Promise<OperatorWords> {
  const where = leaseToRead(jw.status?.operatorLease, operatorNamespace);
  const read = await c.client
    .find<KubeObject & { spec?: LeaseSpec }>(
      'coordination.k8s.io/v1',
      'Lease',
      where.namespace,
      where.name,
    )
    .then(
      (lease): LeaseRead => (lease ? { found: lease.spec ?? {} } : { missing: true }),
      (err: unknown): LeaseRead =>
        err instanceof KubeApiError && err.status === 403
          ? { forbidden: err.message }
          : { error: err instanceof Error ? err.message : String(err) },
    );
  return operatorWords({ where, read }, new Date());
}

/** `undo NAME [--to-revision N]` */
async function undoCommand(c: PluginContext, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { 'to-revision': { type: 'string' } },
  });
  const name = positionals[0];
  if (!name) return usage('undo NAME [--to-revision N]');
  return undo(c.client, () => c.get(name), values['to-revision']);
}

/** `pause|resume|promote|abort NAME --reason TEXT`: the reason is recorded beside who gave it. */
async function rolloutSwitch(
  c: PluginContext,
  command: 'pause' | 'resume' | 'promote' | 'abort',
  args: string[],
): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { reason: { type: 'string' } },
  });
  const name = positionals[0];
  const reason = values.reason?.trim();
  if (!name || !reason) return usage(`${command} NAME --reason TEXT`);
  const jw = await c.get(name);
  return command === 'pause' || command === 'resume'
    ? setPaused(c.client, jw, command === 'pause', reason)
    : cohortCommand(c.client, jw, command, reason);
}

/** `dlq list|show|replay|discard NAME [options]`: through the operator, or `jobfleet dlq` run here. */
async function dlqCommand(c: PluginContext, args: string[]): Promise<number> {
  const [sub, name, ...passOn] = args;
  if (!sub || !name || name.startsWith('-'))
    return usage('dlq list|show|replay|discard NAME [options]');
  // through the operator, but for what it cannot do: other statuses than
  // quarantined, and an edited payload (a file on this machine)
  const direct = passOn.some((a) => /^--(status|edit-payload)(=|$)/.test(a));
  if ((sub === 'list' || sub === 'replay') && !direct) {
    await c.get(name); // a JobWorker that does not exist is said here, not by the operator
    return dlqViaOperator(
      { client: c.client, namespace: c.namespace, jobWorker: name, whoAmI: () => whoAmI(c.client) },
      sub,
      passOn,
    );
  }
  const target = await resolveJobWorker(c.client, c.namespace, name);
  if ('problem' in target) throw new Error(target.problem);
  return runDlq(
    [
      sub,
      ...passOn,
      '--queue',
      target.queue,
      '--dead-letter-queue',
      target.deadLetterQueue,
      '--claims-url',
      target.claimsUrl,
      '--amqp-url',
      target.amqpUrl,
    ],
    // a replay holds while this JobWorker's status says the incident is on,
    // and goes no faster than its downstream budget lets the fleet complete
    {
      jobWorker: name,
      authenticatedUser: () => whoAmI(c.client),
      read: async () => {
        const jw = await c.get(name);
        const parsed = parseSpec(jw.spec);
        return { spec: parsed.ok ? parsed.spec : undefined, status: jw.status };
      },
    },
  );
}

function usage(line: string): number {
  console.error(`usage: kubectl jobworker ${line} [-n NAMESPACE]`);
  return 2;
}

function durationMs(v: string | undefined): number {
  const m = /^(\d+)(ms|s|m|h)?$/.exec(v ?? '');
  if (!m) throw new Error(`--timeout must be a duration like 90s or 10m, got "${v}"`);
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] ?? 's']!;
}

/** The live view: redrawn on a TTY, printed on change otherwise; ends healthy with no analysis left (0), blocked, degraded, paused or with no operator (1), or at the timeout (3). */
async function watch(
  read: () => Promise<{ jw: JobWorkerObject; operator: OperatorWords }>,
  timeoutMs: number,
): Promise<number> {
  const until = Date.now() + timeoutMs;
  const tty = process.stdout.isTTY === true;
  let last = '';
  for (;;) {
    const { jw, operator } = await read();
    const text = statusLines(jw, new Date(), operator).join('\n');
    // Off a TTY a countdown alone is not a change worth another block (nor the lease's renewal).
    const seen = tty
      ? text
      : text.replace(/\d+ s of (\d+ s) left/, '… of $1 left').replace(/renewed \S+ ago/, 'renewed');
    if (seen !== last) {
      if (tty) process.stdout.write('\x1b[2J\x1b[H');
      else if (last) console.log('---');
      console.log(text);
      last = seen;
    }
    const v = verdict(jw, operator);
    if (v !== 3) return v;
    if (Date.now() > until) {
      console.log(
        `still ${jw.status?.analysis ? 'analysing' : 'progressing'} after ${Math.round(timeoutMs / 1000)} s`,
      );
      return 3;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/**
 * Puts the spec of an earlier revision back (from status.history). The
 * operator sees a spec matching that revision and rolls back in its fixed
 * order; the compatibility gate applies as to any rollback. The whole spec is
 * replaced (fields the old revision did not have must go), so the write
 * carries the resourceVersion it read. The operator's status writes move that
 * on without changing the spec: a conflict then reads again and retries the
 * same revision (client-go's RetryOnConflict). A conflict with a spec edit
 * (the generation moved) stops: someone else's change is not overwritten.
 */
async function undo(
  client: KubeClient,
  read: () => Promise<JobWorkerObject>,
  to?: string,
): Promise<number> {
  let first: { generation?: number; revision: string } | undefined;
  for (let attempt = 1; ; attempt++) {
    const jw = await read();
    if (first && jw.metadata.generation !== first.generation) {
      console.error(
        `${jw.metadata.name}'s spec changed while undo was writing (generation ${first.generation ?? '?'} → ${jw.metadata.generation ?? '?'}); nothing was changed by undo: look at kubectl jobworker status ${jw.metadata.name} -n ${jw.metadata.namespace}, then run undo again if it is still wanted`,
      );
      return 2;
    }
    const plan = await undoPlan(client, jw, first?.revision ?? to);
    if ('problem' in plan) {
      console.error(plan.problem);
      return 2;
    }
    first ??= { generation: jw.metadata.generation, revision: plan.revision };
    try {
      await client.replace(plan.object);
    } catch (err) {
      if (!(err instanceof KubeApiError && err.status === 409 && attempt < UNDO_ATTEMPTS))
        throw err;
      await new Promise((r) => setTimeout(r, 10 * attempt)); // as client-go's backoff: a few ms
      continue;
    }
    console.log(
      `${jw.metadata.name}: rolling back to revision ${plan.revision} (${plan.image}). The operator drains revision ${jw.status?.currentRevision ?? '?'} first; follow it with: kubectl jobworker status ${jw.metadata.name} -n ${jw.metadata.namespace} --watch`,
    );
    return 0;
  }
}

const UNDO_ATTEMPTS = 5;

/** The JobWorker as undo writes it, or why it cannot go back. */
async function undoPlan(
  client: KubeClient,
  jw: JobWorkerObject,
  to?: string,
): Promise<{ object: KubeObject; revision: string; image: string } | { problem: string }> {
  const st = jw.status ?? {};
  const history = st.history ?? [];
  const current = Number(st.currentRevision ?? st.updateRevision ?? NaN);
  const target = to
    ? history.find((h) => h.revision === to)
    : history
        .filter((h) => Number(h.revision) < current)
        .sort((a, b) => Number(b.revision) - Number(a.revision))[0];
  if (!target) {
    return {
      problem: to
        ? `revision ${to} is not in the history of ${jw.metadata.name} (kubectl jobworker history ${jw.metadata.name} -n ${jw.metadata.namespace})`
        : `${jw.metadata.name} has no revision before ${st.currentRevision ?? '?'} to go back to`,
    };
  }
  // Each revision's spec is kept once, in its ControllerRevision (older entries carry it inline).
  const record = target.spec
    ? undefined
    : await client.find<KubeObject & { data?: Record<string, unknown> }>(
        'apps/v1',
        'ControllerRevision',
        jw.metadata.namespace,
        revisionRecordName(jw.metadata.name, target.revision),
      );
  const ours = record?.metadata.ownerReferences?.some((o) => o.uid === jw.metadata.uid);
  const spec = target.spec ?? (ours ? record?.data : undefined);
  if (!spec) {
    return {
      problem: `revision ${target.revision}'s spec is not recorded (no ControllerRevision ${revisionRecordName(jw.metadata.name, target.revision)}): apply it by hand`,
    };
  }
  const who = await whoAmI(client);
  return {
    revision: target.revision,
    image: target.image,
    object: {
      ...jw,
      metadata: {
        ...jw.metadata,
        annotations: {
          ...(jw.metadata.annotations ?? {}),
          'jobfleet.dev/undo': `to revision ${target.revision} by ${who} at ${new Date().toISOString()}`,
        },
      },
      // The pause switch stays as it is: undo changes the revision, not whether the fleet runs.
      spec: { ...spec, paused: jw.spec.paused },
    },
  };
}

/**
 * The user the apiserver authenticated (with --as, the one impersonated), as
 * its SelfSubjectReview says: what pause, promote, abort and a dead-letter
 * replay or discard record. Never a typed or local name: when the apiserver
 * will not say (before Kubernetes 1.28, or the API turned off), the command stops.
 */
async function whoAmI(client: KubeClient): Promise<string> {
  const review = await client
    .request<{ status?: { userInfo?: { username?: string } } }>(
      'POST',
      '/apis/authentication.k8s.io/v1/selfsubjectreviews',
      { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
    )
    .catch((err: Error) => {
      throw new Error(
        `the apiserver would not say who you are (SelfSubjectReview, authentication.k8s.io/v1, Kubernetes 1.28 or later), which the audit records: ${err.message}`,
        { cause: err },
      );
    });
  const user = review.status?.userInfo?.username;
  if (!user)
    throw new Error("the apiserver's SelfSubjectReview named no user: the audit needs one");
  return user;
}

/** Asks the operator to skip the cohort's current step, or to abort the cohort (../reconcile/cohort/steps.ts). */
async function cohortCommand(
  client: KubeClient,
  jw: JobWorkerObject,
  action: 'promote' | 'abort',
  reason: string,
): Promise<number> {
  const name = jw.metadata.name;
  const c = jw.status?.cohort;
  if (!c || c.phase === 'Aborting' || c.phase === 'Promoting') {
    console.error(
      `${name} has no cohort step to ${action}${c ? ` (its cohort is ${c.phase.toLowerCase()})` : ' (no Cohort rollout in progress)'}; see kubectl jobworker status ${name} -n ${jw.metadata.namespace}`,
    );
    return 1;
  }
  const command: CohortCommand = {
    action,
    revision: c.revision,
    ...(action === 'promote' && { step: c.step }),
    by: await whoAmI(client),
    reason,
  };
  await client.request(
    'PATCH',
    resourcePath(API_VERSION, KIND, jw.metadata.namespace, name),
    { metadata: { annotations: { [ANNOTATION_COHORT_COMMAND]: JSON.stringify(command) } } },
    'application/merge-patch+json',
  );
  console.log(
    action === 'promote'
      ? `${name}: revision ${c.revision} skips the analysis of step ${c.step} of ${c.steps}. Follow it with: kubectl jobworker status ${name} -n ${jw.metadata.namespace} --watch`
      : `${name}: aborting revision ${c.revision}: its cohort drains first, revision ${c.stable} keeps the fleet. Follow it with: kubectl jobworker status ${name} -n ${jw.metadata.namespace} --watch`,
  );
  return 0;
}

/** Flips spec.paused, with who and why beside it (the operator's event and status quote them). */
async function setPaused(
  client: KubeClient,
  jw: JobWorkerObject,
  paused: boolean,
  reason: string,
): Promise<number> {
  const name = jw.metadata.name;
  if ((jw.spec.paused === true) === paused) {
    console.log(`${name} is already ${paused ? 'paused' : 'running'}; nothing changed`);
    return 0;
  }
  // A merge patch: the operator's status writes in between cannot make it conflict.
  await client.request(
    'PATCH',
    resourcePath(API_VERSION, KIND, jw.metadata.namespace, name),
    {
      metadata: {
        annotations: {
          [ANNOTATION_PAUSE_BY]: await whoAmI(client),
          [ANNOTATION_PAUSE_REASON]: reason,
        },
      },
      spec: { paused },
    },
    'application/merge-patch+json',
  );
  console.log(
    paused
      ? `${name}: pausing. Consumers drain within spec.shutdown.drainDeadlineSeconds, then 0 replicas are held; resume with: kubectl jobworker resume ${name} -n ${jw.metadata.namespace} --reason …`
      : `${name}: resuming; replicas follow the scaler again. Follow it with: kubectl jobworker status ${name} -n ${jw.metadata.namespace} --watch`,
  );
  return 0;
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (err) {
  console.error(`kubectl jobworker: ${(err as Error).message}`);
  process.exitCode = 2;
}
