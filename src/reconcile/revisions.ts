// Revisions, pure: each distinct pod template (image, config, contract) is a
// revision, numbered in order of first appearance. A spec that returns to an
// earlier template returns to that revision's number (a rollback).
import type { JobWorkerStatus } from '../api/jobworker.js';

export type HistoryEntry = NonNullable<JobWorkerStatus['history']>[number];

export interface RevisionInput {
  templateHash: string;
  image: string;
  contractHash: string;
  keyRule: string;
  schemaVersions: number[];
  /** the spec that produced the template: what a rollback to this revision restores */
  spec: Record<string, unknown>;
}

export function assignRevision(
  history: readonly HistoryEntry[],
  r: RevisionInput,
  now: Date,
  limit: number,
): { revision: string; history: HistoryEntry[]; isNew: boolean } {
  const known = history.find((h) => h.templateHash === r.templateHash);
  if (known) {
    // Entries written before revisions kept their contract and spec get them now.
    const filled = known.spec
      ? history
      : history.map((h) =>
          h === known
            ? { ...h, keyRule: r.keyRule, schemaVersions: r.schemaVersions, spec: r.spec }
            : h,
        );
    return { revision: known.revision, history: [...filled], isNew: false };
  }
  const next = String(history.reduce((max, h) => Math.max(max, Number(h.revision) || 0), 0) + 1);
  const entry: HistoryEntry = {
    revision: next,
    image: r.image,
    contractHash: r.contractHash,
    templateHash: r.templateHash,
    keyRule: r.keyRule,
    schemaVersions: r.schemaVersions,
    spec: r.spec,
    deployedAt: now.toISOString().replace(/\.\d{3}Z$/, 'Z'),
  };
  // Newest last; keep the last `limit`.
  return { revision: next, history: [...history, entry].slice(-limit), isNew: true };
}
