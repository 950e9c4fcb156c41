// What a reconcile announces, as Kubernetes Events, once the writes it
// describes have been made (src/controller/reconciler.ts).
import type { EventReason } from '../../api/reasons.js';

export interface PlanEvent {
  type: 'Normal' | 'Warning';
  reason: EventReason;
  message: string;
  /**
   * The write it announces, when that is the stable Deployment's (a scale, a
   * new template, a drain): emitted only once that write succeeded. Others
   * announce what the status write records.
   */
  of?: 'Deployment';
}
