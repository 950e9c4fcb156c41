// The JobWorker's children: the Deployments, Service, PDB and
// ControllerRevisions it should have, who owns what, and the writes that get
// them there.
// The folder's only door: code outside it imports from here.
export {
  cohortDeploymentName,
  commonLabels,
  CONTRACT_ENV,
  contractHash,
  deployedContract,
  deployedRevision,
  desiredCohortDeployment,
  desiredDeployment,
  desiredMetricsService,
  desiredPdb,
  desiredRevisionRecord,
  envProblems,
  FIELD_MANAGER,
  LABEL_COHORT,
  LABEL_JOBWORKER,
  LABEL_REVISION,
  METRICS_PORT,
  revisionOf,
  revisionRecordName,
  templateHash,
  TERMINATION_MARGIN_SECONDS,
  WORKER_CONTAINER,
} from './desired.js';
export { managerOf } from './managed-fields.js';
export { ownCohort, ownRecord } from './ownership.js';
export {
  afterConflict,
  type FleetWrites,
  settle,
  type Settled,
  type StatusMemory,
  type Write,
  writesOf,
} from './writes.js';
