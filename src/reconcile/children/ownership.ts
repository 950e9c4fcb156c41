// Which of the objects observe read are this JobWorker's own. A JobWorker
// deleted and created again under the same name finds what the first one
// left (a revision record, a cohort Deployment): by name alone it would take
// them for its own past. The rule, in one place: owned by this object's uid,
// or, for the cohort Deployment (read by name), labelled as its cohort.
import type { KubeObject } from '../../api/kube-object.js';
import { LABEL_COHORT, LABEL_JOBWORKER, revisionRecordName } from './desired.js';

export const ownedBy = (o: KubeObject | undefined, uid: string | undefined): boolean =>
  !!uid && !!o?.metadata.ownerReferences?.some((r) => r.uid === uid);

/** The Deployment named as `jobworker`'s cohort, if it is its cohort (a JobWorker may be named so). */
export function ownCohort(
  named: KubeObject | undefined,
  jobworker: string,
): KubeObject | undefined {
  const labels = named?.metadata.labels ?? {};
  return labels[LABEL_COHORT] === 'true' && labels[LABEL_JOBWORKER] === jobworker
    ? named
    : undefined;
}

type RevisionRecord = KubeObject & { data?: { [k: string]: unknown } };

/** Whether the ControllerRevision `name` among `records` is this JobWorker's (`jw`), another object's, or absent. */
export function recordState(
  jw: KubeObject,
  records: KubeObject[],
  name: string,
): 'own' | 'foreign' | 'absent' {
  const r = records.find((x) => x.metadata.name === name);
  return !r ? 'absent' : ownedBy(r, jw.metadata.uid) ? 'own' : 'foreign';
}

/** `revision`'s recorded spec, if this JobWorker (`jw`) recorded it. */
export function ownRecord(
  jw: KubeObject,
  records: KubeObject[],
  revision: string,
): RevisionRecord | undefined {
  const name = revisionRecordName(jw.metadata.name, revision);
  return recordState(jw, records, name) === 'own'
    ? records.find((r) => r.metadata.name === name)
    : undefined;
}
