// What `kubectl jobworker status|history|why` print, pure: a JobWorker in,
// lines and an exit code out.
import type { Condition, JobWorkerStatus, RevisionFigures } from '../api/jobworker.js';
import { latencyWords } from '../reconcile/cohort/index.js';
import { FIRST_STATUS_HOLD_MS } from '../reconcile/status/index.js';
import type { OperatorWords } from './operator-lease.js';

export interface JobWorkerView {
  metadata: { name: string; namespace?: string; generation?: number };
  spec?: { rollout?: { analysisSeconds?: number }; broker?: { queue?: string } };
  status?: JobWorkerStatus;
}

/** 0 healthy, 1 blocked, degraded or paused, 3 still progressing or analysing (2 is for usage errors). */
export type Verdict = 0 | 1 | 3;

const cond = (jw: JobWorkerView, type: string): Condition | undefined =>
  jw.status?.conditions?.find((c) => c.type === type);

export function verdict(jw: JobWorkerView, operator?: OperatorWords): Verdict {
  // No operator updates it: what it says is not now, and nothing will change it by itself.
  if (operator?.silent) return 1;
  const st = jw.status;
  if (!st || (st.observedGeneration ?? 0) < (jw.metadata.generation ?? 0)) return 3;
  // Healthy while a new revision is still watched for automatic rollback is not done yet.
  if (st.phase === 'Healthy') return st.analysis ? 3 : 0;
  // Paused waits for a person as Blocked and Degraded do: it never turns Healthy by itself.
  if (st.phase === 'Blocked' || st.phase === 'Degraded' || st.phase === 'Paused') return 1;
  return 3;
}

/** Where the age comes from, when it is not the broker's own head timestamp. */
function ageFrom(st: NonNullable<JobWorkerView['status']>): string {
  if (st.ageSource === 'DeliveryTimestamps') return " (measured from the workers' deliveries)";
  if (st.ageSource !== 'Estimated') return '';
  const why = st.conditions?.find((c) => c.type === 'AgeMeasured' && c.status === 'False')?.reason;
  const words = why === undefined ? undefined : ESTIMATED_BECAUSE[why];
  return ` (estimated from depth and rates${words ? `: ${words}` : ''})`;
}

/** AgeMeasured's False reasons in words (the reason itself, "Estimated", would say it twice). */
const ESTIMATED_BECAUSE: Record<string, string> = {
  NoMessageTimestamps: 'deliveries carry no timestamp',
  Estimated: 'no worker has reported a delivery',
};

/** Why the phase may not be now's, if it may not. */
function phaseNote(jw: JobWorkerView, operator?: OperatorWords): string {
  if (operator?.silent)
    return ' (as last written: no operator updates this status now, see Operator)';
  const written = jw.status?.observedGeneration;
  if (written === undefined)
    return ` (no status yet: a new JobWorker's first is written once it is Available, or ${FIRST_STATUS_HOLD_MS / 1000} s after its Deployment is created)`;
  if (written < (jw.metadata.generation ?? 0))
    return ' (not yet observed: the operator has not seen the latest spec)';
  return '';
}

export function statusLines(
  jw: JobWorkerView,
  now = new Date(),
  operator?: OperatorWords,
): string[] {
  const st = jw.status ?? {};
  const lines = [
    `Name:        ${jw.metadata.namespace ? `${jw.metadata.namespace}/` : ''}${jw.metadata.name}`,
    `Phase:       ${st.phase ?? 'Unknown'}${phaseNote(jw, operator)}`,
    ...(operator ? [`Operator:    ${operator.line}`] : []),
    `Revision:    current ${st.currentRevision ?? '-'}, update ${st.updateRevision ?? '-'}${st.abortedRevision ? `, aborted ${st.abortedRevision}` : ''}`,
    `Replicas:    desired ${st.desiredReplicas ?? '-'}${st.resumeReplicas !== undefined ? ` (paused; ${st.resumeReplicas} on resume)` : ''}, ready ${st.readyReplicas ?? '-'}`,
    `Oldest age:  ${st.oldestMessageAgeSeconds !== undefined ? `${st.oldestMessageAgeSeconds} s` : '-'}${ageFrom(st)}, depth ${st.queueDepth ?? '-'}${st.scaling?.limitedBy ? `, limited by ${st.scaling.limitedBy}` : ''}`,
  ];
  if (st.capacityPerReplica !== undefined)
    lines.push(
      `Capacity:    ${st.capacityPerReplica} jobs/s per replica (from ${st.capacitySource === 'Saturation' ? 'the completion rate while a backlog waited' : st.capacitySource === 'Prometheus' ? "the workers' figures in Prometheus" : "the worker pods' own figures"})`,
    );
  if (st.rollout)
    lines.push(
      `Rollback:    ${st.rollout.from} → ${st.rollout.to}, step ${st.rollout.phase} (${st.rollout.trigger}${st.rollout.reason ? `: ${st.rollout.reason}` : ''}); drain deadline ${st.rollout.drainDeadline}`,
    );
  if (st.analysis) {
    const a = st.analysis;
    const window = jw.spec?.rollout?.analysisSeconds ?? 300;
    const left = Math.max(
      0,
      Math.round((Date.parse(a.startedAt) + window * 1000 - now.getTime()) / 1000),
    );
    lines.push(
      `Analysis:    revision ${a.revision} watched against ${a.stable} for rising age or crash loops, ${left} s of ${window} s left${a.overObjectiveSince ? `; over the objective since ${a.overObjectiveSince}` : ''}`,
    );
  }
  if (st.cohort) lines.push(...cohortLines(st.cohort, now));
  else if (st.lastCohort)
    lines.push(
      `Last cohort: revision ${st.lastCohort.revision} ${st.lastCohort.result}${st.lastCohort.check ? ` (${st.lastCohort.check})` : ''} at ${st.lastCohort.finishedAt}`,
    );
  const broker = cond(jw, 'BrokerSettingsSafe');
  if (broker) lines.push(`Broker:      ${brokerWords(broker)}`);
  if (st.deadLetters)
    lines.push(
      `Dead letters: ${st.deadLetters.quarantined} quarantined${st.deadLetters.oldestDeadLetteredAt ? `, oldest from ${st.deadLetters.oldestDeadLetteredAt}` : ''} (owner ${st.deadLetters.owner ?? '-'})`,
    );
  if (st.inDoubt)
    lines.push(
      `In doubt:    ${st.inDoubt.deciding} being decided, ${st.inDoubt.held} held for a person${st.inDoubt.held ? ` (kubectl jobworker why ${jw.metadata.name} names them)` : ''}`,
    );
  if (st.outbox)
    lines.push(
      `Outbox:      ${st.outbox.unsent} waiting${st.outbox.oldestUnsentSeconds !== undefined ? `, the oldest ${st.outbox.oldestUnsentSeconds} s` : ''}; relay ${st.outbox.relay ?? 'none active'}${st.outbox.lastError ? `, failing: ${st.outbox.lastError}` : ''}`,
    );
  for (const type of [
    'RolloutBlocked',
    'Degraded',
    'Paused',
    'WorkersReady',
    'Draining',
    'Progressing',
    'DeadLettersOverdue',
  ]) {
    const c = cond(jw, type);
    const notable =
      c &&
      ((type === 'Progressing' && c.status === 'True') ||
        (type === 'Progressing' && c.reason === 'RollbackComplete') ||
        (type === 'WorkersReady' && c.status === 'False') ||
        (type !== 'Progressing' && type !== 'WorkersReady' && c.status === 'True'));
    if (notable) lines.push(`${`${type}:`.padEnd(13)}${c.reason} — ${c.message}`);
  }
  return lines;
}

/** A Cohort rollout: its step, the time left, and cohort against stable, check by check. */
function cohortLines(c: NonNullable<JobWorkerStatus['cohort']>, now: Date): string[] {
  const left = c.analysisUntil
    ? `, ${Math.max(0, Math.round((Date.parse(c.analysisUntil) - now.getTime()) / 1000))} s left`
    : '';
  const lines = [
    `Cohort:      revision ${c.revision} beside ${c.stable}, step ${c.step} of ${c.steps} (${c.phase}${left}): ${c.replicas} cohort, ${c.stableReplicas} stable replicas`,
  ];
  if (c.reason) lines.push(`             aborted on ${c.check ?? '?'}: ${c.reason}`);
  const f = c.figures;
  if (!f) return lines;
  const share = (n: number, r: RevisionFigures) =>
    r.handled ? `${((100 * n) / r.handled).toFixed(1)}%` : '-';
  const rows: Array<[string, (r: RevisionFigures) => string]> = [
    ['handled', (r) => String(r.handled)],
    ['dead-lettered', (r) => share(r.deadLettered, r)],
    ['retried', (r) => share(r.retried, r)],
    ['duplicates', (r) => share(r.duplicates, r)],
    ['p95 latency', latencyWords],
    ['restarts', (r) => String(r.restarts)],
  ];
  lines.push(`  ${'since'.padEnd(15)}${f.since}`);
  lines.push(`  ${'check'.padEnd(15)}${'cohort'.padEnd(12)}stable`);
  for (const [label, v] of rows)
    lines.push(`  ${label.padEnd(15)}${v(f.cohort).padEnd(12)}${v(f.stable)}`);
  return lines;
}

export function historyLines(jw: JobWorkerView): string[] {
  const st = jw.status ?? {};
  const rows = [
    ['REVISION', 'IMAGE', 'KEY RULE', 'SCHEMA VERSIONS', 'FIRST DEPLOYED', ''],
    ...(st.history ?? []).map((h) => [
      h.revision,
      h.image,
      h.keyRule ?? '-',
      h.schemaVersions?.join(',') ?? '-',
      h.deployedAt,
      [
        h.revision === st.currentRevision ? 'current' : '',
        h.revision === st.updateRevision && h.revision !== st.currentRevision ? 'update' : '',
        h.revision === st.abortedRevision ? 'aborted' : '',
      ]
        .filter(Boolean)
        .join(', '),
    ]),
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) =>
    r
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd(),
  );
}

/** The blocking reason and how to fix it; or that nothing blocks. An operator that is silent, or cannot be checked, is said first. */
export function whyLines(jw: JobWorkerView, operator?: OperatorWords): string[] {
  const out = blockers(jw);
  if (!out.length && !operator?.silent)
    out.push(`Nothing blocks ${jw.metadata.name}: phase ${jw.status?.phase ?? 'Unknown'}.`);
  out.push(...heldLines(jw));
  // what does not stop the fleet today, but needs a person before it does
  const broker = cond(jw, 'BrokerSettingsSafe');
  if (
    broker?.status === 'Unknown' ||
    (broker?.status === 'True' && broker.reason !== 'SettingsSafe')
  )
    out.push(`Warning: broker settings (${broker.reason}): ${broker.message}`);
  return operator?.why ? [operator.why, ...out] : out;
}

/**
 * Held in-doubt jobs: they block nothing, but each waits for a person's
 * decision (docs/in-doubt.md#a-held-job), named with the attempt in doubt
 * and its intent.
 */
function heldLines(jw: JobWorkerView): string[] {
  const d = jw.status?.inDoubt;
  if (!d?.held) return [];
  const queue = jw.spec?.broker?.queue;
  const listed = d.heldJobs ?? [];
  return [
    `Held for a person: ${d.held} in-doubt job${d.held === 1 ? '' : 's'} (docs/in-doubt.md#a-held-job): replay one whose effect did not happen, \`jobfleet dlq discard --id ID --mark-done\` one whose effect did${queue ? ` (jobfleet dlq list --queue ${queue} --class in_doubt)` : ''}.`,
    ...listed.map((j) => `  #${j.id} ${j.key ?? '(no key)'}: ${j.reason}`),
    ...(d.held > listed.length ? [`  … and ${d.held - listed.length} more`] : []),
  ];
}

/** BrokerSettingsSafe in a few words, then what it says. */
function brokerWords(c: Condition): string {
  if (c.status === 'False') return `UNSAFE (${c.reason}) — ${c.message}`;
  if (c.status === 'Unknown') return `not checked — ${c.message}`;
  return c.reason === 'SettingsSafe'
    ? 'settings safe'
    : `safe, with a warning (${c.reason}) — ${c.message}`;
}

function blockers(jw: JobWorkerView): string[] {
  const out: string[] = [];
  const blocked = cond(jw, 'RolloutBlocked');
  if (blocked?.status === 'True')
    out.push(`Rollout blocked (${blocked.reason}): ${blocked.message}`);
  const degraded = cond(jw, 'Degraded');
  if (degraded?.status === 'True') out.push(`Degraded (${degraded.reason}): ${degraded.message}`);
  const paused = cond(jw, 'Paused');
  if (paused?.status === 'True') out.push(`Paused (${paused.reason}): ${paused.message}`);
  const workers = cond(jw, 'WorkersReady');
  if (workers?.status === 'False')
    out.push(`Workers not ready (${workers.reason}): ${workers.message}`);
  const draining = cond(jw, 'Draining');
  if (draining?.status === 'True')
    out.push(
      `Draining (${draining.reason}): ${draining.message} This ends by itself at the deadline.`,
    );
  const scaling = cond(jw, 'ScalingActive');
  if (scaling?.status === 'False')
    out.push(`Not scaling on queue age (${scaling.reason}): ${scaling.message}`);
  const dl = cond(jw, 'DeadLettersOverdue');
  if (dl?.status === 'True') out.push(`Dead letters overdue (${dl.reason}): ${dl.message}`);
  const broker = cond(jw, 'BrokerSettingsSafe');
  if (broker?.status === 'False')
    out.push(`Broker settings lose or stall jobs (${broker.reason}): ${broker.message}`);
  const outbox = cond(jw, 'OutboxDelivering');
  if (outbox?.status === 'False')
    out.push(
      `Jobs stuck in the outbox (${outbox.reason}): ${outbox.message} (docs/runbook.md#outbox-stalled)`,
    );
  const lastCohort = jw.status?.lastCohort;
  if (
    jw.status?.abortedRevision &&
    lastCohort?.result === 'Aborted' &&
    lastCohort.revision === jw.status.abortedRevision
  )
    out.push(
      `Revision ${lastCohort.revision}'s cohort was aborted (${lastCohort.check ?? '?'}): ${lastCohort.message} It stays off until the spec changes: fix it and apply a new revision.`,
    );
  else if (jw.status?.abortedRevision)
    out.push(
      `Revision ${jw.status.abortedRevision} was rolled back automatically (${jw.status.lastRollback?.message ?? 'see kubectl describe'}). It stays off until the spec changes: fix it and apply a new revision.`,
    );
  return out;
}
