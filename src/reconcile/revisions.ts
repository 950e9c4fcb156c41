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

/**
 * The revision `r` is, adding it to `history` when new. History keeps the
 * newest `limit` entries plus every revision in `keep` (the one the
 * Deployment runs, the current one, a rollback's ends): the gate reads
 * their contracts, and a rollback restores their specs, so evicting them
 * would let an incompatible change through once enough edits pile up.
 */
export function assignRevision(
  history: readonly HistoryEntry[],
  r: RevisionInput,
  now: Date,
  limit: number,
  keep: ReadonlyArray<string | undefined> = [],
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
  // Newest last; the last `limit`, and the protected ones whatever their age.
  const all = [...history, entry];
  const newest = new Set(all.slice(-limit));
  const kept = all.filter((h) => newest.has(h) || keep.includes(h.revision));
  return { revision: next, history: kept, isNew: true };
}
