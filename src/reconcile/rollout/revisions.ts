// Revisions, pure: each distinct pod template (image, config, contract) is a
// revision, numbered in order of first appearance. A spec that returns to an
// earlier template returns to that revision's number (a rollback).
import type { JobWorkerStatus } from '../../api/jobworker.js';

export type HistoryEntry = NonNullable<JobWorkerStatus['history']>[number];

export interface RevisionInput {
  templateHash: string;
  image: string;
  contractHash: string;
  keyRule: string;
  schemaVersions: number[];
}

/**
 * The revision `r` is, adding it to `history` when new. History keeps the
 * newest `limit` entries plus every revision in `keep` (the one the
 * Deployment runs, the current one, a rollback's ends): the gate reads
 * their contracts, so evicting them would let an incompatible change
 * through once enough edits pile up. An entry is a summary; the full spec
 * of each revision is kept once, in its ControllerRevision
 * (desiredRevisionRecord). `evicted` names the entries dropped.
 */
export function assignRevision(
  history: readonly HistoryEntry[],
  r: RevisionInput,
  now: Date,
  limit: number,
  keep: ReadonlyArray<string | undefined> = [],
): { revision: string; history: HistoryEntry[]; isNew: boolean; evicted: string[] } {
  const known = history.find((h) => h.templateHash === r.templateHash);
  if (known) {
    // Entries written before revisions kept their contract get it now.
    const filled = known.keyRule
      ? history
      : history.map((h) =>
          h === known ? { ...h, keyRule: r.keyRule, schemaVersions: r.schemaVersions } : h,
        );
    return { revision: known.revision, history: [...filled], isNew: false, evicted: [] };
  }
  const next = String(history.reduce((max, h) => Math.max(max, Number(h.revision) || 0), 0) + 1);
  const entry: HistoryEntry = {
    revision: next,
    image: r.image,
    contractHash: r.contractHash,
    templateHash: r.templateHash,
    keyRule: r.keyRule,
    schemaVersions: r.schemaVersions,
    deployedAt: now.toISOString().replace(/\.\d{3}Z$/, 'Z'),
  };
  // Newest last; the last `limit`, and the protected ones whatever their age.
  const all = [...history, entry];
  const newest = new Set(all.slice(-limit));
  const kept = all.filter((h) => newest.has(h) || keep.includes(h.revision));
  const evicted = all.filter((h) => !kept.includes(h)).map((h) => h.revision);
  return { revision: next, history: kept, isNew: true, evicted };
}
