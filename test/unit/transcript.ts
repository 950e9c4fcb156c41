// Golden transcripts of rollout sequences: at each simulated second where
// anything changes, what the planner saw (the spec's generation, the pods by
// revision) and what it decided (the Deployments to apply, the status it
// wrote, the events). Kept under test/unit/__golden__/ and reviewed in diffs:
// a change to a rollout rule shows as a changed step, not as a changed
// assertion.
import type { Plan } from '../../src/reconcile/plan.js';
import { revisionOf } from '../../src/reconcile/children/desired.js';
import { applied } from './plan-writes.js';

/** A simulated pod as the harnesses keep it: terminating once it has a terminatingAt. */
export interface SeenPod {
  revision: string;
  ready: boolean;
  terminatingAt?: number;
}

export class Transcript {
  readonly lines: string[] = [];
  private last = '';

  /** One reconcile: recorded when what was seen or decided differs from the last one recorded. */
  step(t: number, generation: number, pods: readonly SeenPod[], plan: Plan): void {
    const line = `gen ${generation} ${seen(pods)} => ${decided(plan)}`;
    if (line === this.last) return;
    this.last = line;
    this.lines.push(`t=${String(t).padStart(3)}  ${line}`);
  }

  text(): string {
    return `${this.lines.join('\n')}\n`;
  }
}

function seen(pods: readonly SeenPod[]): string {
  const by = new Map<string, { ready: number; starting: number; terminating: number }>();
  for (const p of pods) {
    const c = by.get(p.revision) ?? { ready: 0, starting: 0, terminating: 0 };
    if (p.terminatingAt !== undefined) c.terminating++;
    else if (p.ready) c.ready++;
    else c.starting++;
    by.set(p.revision, c);
  }
  const revs = [...by.entries()]
    .sort(([a], [b]) => Number(a) - Number(b))
    .map(
      ([rev, c]) =>
        `r${rev}:${[c.ready && `${c.ready} ready`, c.starting && `${c.starting} starting`, c.terminating && `${c.terminating} terminating`].filter(Boolean).join(',')}`,
    );
  return `pods[${revs.join(' ')}]`;
}

function decided(plan: Plan): string {
  const deployments = applied(plan)
    .filter((c) => c.kind === 'Deployment')
    .map((d) => {
      const cohort = d.metadata.name.endsWith('-cohort') ? 'cohort ' : '';
      const replicas = (d.spec as { replicas?: number }).replicas;
      return `${cohort}r${revisionOf(d) ?? '?'}x${replicas}`;
    });
  const s = plan.status;
  const blocked = s.conditions?.find((c) => c.type === 'RolloutBlocked' && c.status === 'True');
  const status = [
    s.phase,
    `update r${s.updateRevision ?? '-'}`,
    `current r${s.currentRevision ?? '-'}`,
    s.rollout && `rollback ${s.rollout.from}->${s.rollout.to} ${s.rollout.phase}`,
    s.cohort && `cohort r${s.cohort.revision} step ${s.cohort.step} ${s.cohort.phase}`,
    s.analysis && `analysing r${s.analysis.revision}`,
    blocked && `blocked ${blocked.reason}`,
  ].filter(Boolean);
  const events = plan.events.map((e) => e.reason);
  return `deploy[${deployments.join(' ')}] status[${status.join(', ')}]${events.length ? ` events[${events.join(' ')}]` : ''}`;
}
