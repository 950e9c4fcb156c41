// What the JobWorker says of the outbox that feeds its queue, pure: the
// OutboxDelivering condition and status.outbox (docs/outbox.md).
import type { JobWorkerStatus } from '../../api/jobworker.js';
import type { ConditionInput, OutboxInput } from '../model/index.js';
import { duration } from './duration.js';

/** A relay heartbeats every 5 s while it holds the lock: this long without one, none holds it. */
export const RELAY_SILENT_SECONDS = 30;

export function outboxCondition(o: OutboxInput): ConditionInput {
  const type = 'OutboxDelivering';
  const s = o.stats;
  if (!s)
    return { type, status: 'Unknown', reason: 'Unreadable', message: o.error ?? 'Not read yet.' };
  if (!s.exists)
    return {
      type,
      status: 'Unknown',
      reason: 'NoOutboxTable',
      message:
        'The database spec.outbox names has no jobfleet_outbox: the producer creates it with migrateOutbox(pool) (docs/outbox.md), or spec.outbox.urlSecretRef names the wrong database.',
    };
  if (s.unsent === 0)
    return {
      type,
      status: 'True',
      reason: 'Delivered',
      message: 'Nothing waits in the outbox for this queue.',
    };
  const waiting = `${s.unsent} job${s.unsent === 1 ? '' : 's'} wait${s.unsent === 1 ? 's' : ''} in the outbox (the oldest ${duration(s.oldestSeconds ?? 0)})`;
  const r = s.relay;
  if (!r || r.heartbeatSeconds > RELAY_SILENT_SECONDS)
    return {
      type,
      status: 'False',
      reason: 'NoRelay',
      message: `${waiting} and no relay holds its lock${r ? ` (the last, ${r.holder}, was heard ${duration(r.heartbeatSeconds)} ago)` : ''}: run one (spec.outbox.relay: Workers, or startRelay in the producer).`,
    };
  if (relayFailing(r))
    return {
      type,
      status: 'False',
      reason: 'RelayFailing',
      message: `${waiting}: the relay ${r.holder} failed ${duration(r.lastErrorSeconds ?? 0)} ago and has published nothing since: ${r.lastError}`,
    };
  if ((s.oldestSeconds ?? 0) > o.stalledAfterSeconds)
    return {
      type,
      status: 'False',
      reason: 'OutboxStalled',
      message: `${waiting}, past spec.outbox.stalledAfterSeconds ${o.stalledAfterSeconds}, though the relay ${r.holder} reports no error: read its logs (a long transaction in that database holds rows back, or a row the broker keeps refusing).`,
    };
  return {
    type,
    status: 'True',
    reason: 'Delivering',
    message: `${waiting}; the relay ${r.holder} is publishing them.`,
  };
}

export function outboxField(o: OutboxInput): JobWorkerStatus['outbox'] {
  const s = o.stats;
  if (!s) return undefined;
  const r = s.relay;
  const current = r && r.heartbeatSeconds <= RELAY_SILENT_SECONDS;
  const failing = current && relayFailing(r);
  return {
    unsent: s.unsent,
    ...(s.oldestSeconds !== null && { oldestUnsentSeconds: Math.round(s.oldestSeconds) }),
    ...(current && { relay: r.holder }),
    ...(failing && { lastError: r.lastError as string }),
  };
}

type Relay = NonNullable<NonNullable<OutboxInput['stats']>['relay']>;

/** Its last error is newer than its last publish. */
function relayFailing(r: Relay): boolean {
  return (
    r.lastError !== null &&
    r.lastErrorSeconds !== null &&
    (r.lastSentSeconds === null || r.lastErrorSeconds < r.lastSentSeconds)
  );
}
