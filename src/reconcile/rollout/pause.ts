// The pause switch, pure: spec.paused, and who flipped it and why.
// `kubectl jobworker pause|resume` writes both annotations with the switch; a
// plain `kubectl apply` of spec.paused is named by its field manager.
import type { JobWorkerStatus } from '../../api/jobworker.js';
import type { KubeObject } from '../../api/kube-object.js';
import { isTrue } from '../model/index.js';
import { managerOf } from '../children/index.js';

export const ANNOTATION_PAUSE_BY = 'jobfleet.dev/pause-changed-by';
export const ANNOTATION_PAUSE_REASON = 'jobfleet.dev/pause-reason';

export interface PauseSwitch {
  /** who last flipped spec.paused */
  by: string;
  reason: string;
}

export function pauseSwitch(raw: KubeObject): PauseSwitch {
  const a = raw.metadata.annotations ?? {};
  return {
    by: a[ANNOTATION_PAUSE_BY] ?? managerOf(raw, ['spec', 'paused']) ?? 'an unknown manager',
    reason: a[ANNOTATION_PAUSE_REASON] ?? 'no reason given',
  };
}

/** The status last written says the fleet was paused. */
export const wasPaused = (previous: JobWorkerStatus | undefined): boolean =>
  isTrue(previous?.conditions, 'Paused');
