// What a status write shows anyone, pure. Every write of a JobWorker's status
// is a row in `kubectl get jw -w` and an update event for every watcher, so
// a status is written only when this projection of it changed: what the
// printer columns, the phase, the conditions' status and reason, the
// rollout's records and the words of every message say. Left out are the
// figures that only refresh what is known already: the Deployment's own
// replica count (one reconcile behind desiredReplicas), the queue depth, and
// the numbers inside messages ("2 of 3 workers are ready": Ready says it).
// They go out, fresh, with the next write that changes something, and a
// steady state writes nothing. The capacity estimate is a column; it moves
// only in steps of 10 % or more (../status/status.ts, shownCapacity).
import type { JobWorkerStatus } from '../../api/jobworker.js';

/** The status as compared for a write: equal projections, no write. */
export function visibleStatus(s: JobWorkerStatus): unknown {
  const rest: JobWorkerStatus = { ...s };
  delete rest.replicas;
  delete rest.queueDepth;
  return {
    ...rest,
    ...(s.scaling && { scaling: { ...s.scaling, message: words(s.scaling.message) } }),
    ...(s.conditions && {
      conditions: s.conditions.map((c) => ({ ...c, message: words(c.message) })),
    }),
  };
}

/** A message as compared: its words, each figure in it one mark ("# of # workers are ready"). */
export function words(message: string | undefined): string | undefined {
  return message?.replace(/\d+(?:[.,:]\d+)*/g, '#');
}
