// Whether an operator still writes a JobWorker's status, pure: from its
// leader-election Lease as the plugin read it to the words `kubectl jobworker
// status` and `why` print. A status no operator refreshes keeps saying what
// it last said (Healthy, after `helm uninstall`); the operator does not write
// a heartbeat into every status (a steady state makes no writes), so the
// plugin reads the one Lease the leader renews every few seconds instead.
import { duration } from '../reconcile/status/index.js';

/** Where the operator's Lease is: status.operatorLease, else the chart's defaults. */
export const DEFAULT_OPERATOR_LEASE = { namespace: 'jobfleet-system', name: 'jobfleet-operator' };

/** A renewal older than the lease's own duration, and at least this, is silence (a handover takes seconds). */
export const SILENT_AFTER_SECONDS = 15;

export interface LeaseSpec {
  holderIdentity?: string;
  renewTime?: string;
  leaseDurationSeconds?: number;
}

/** The Lease as read: its spec, absent, or not readable by this user (and why). */
export type LeaseRead =
  { found: LeaseSpec } | { missing: true } | { forbidden: string } | { error: string };

export interface OperatorCheck {
  where: { namespace: string; name: string };
  read: LeaseRead;
}

export interface OperatorWords {
  /** no operator renews the Lease: the status is stale and says nothing about now */
  silent: boolean;
  /** one line for `status` ("Operator:    …") */
  line: string;
  /** what `why` says first, when there is something to say */
  why?: string;
}

/**
 * Where the plugin looks: --operator-namespace, else the Lease the operator
 * recorded in status (status.operatorLease), else jobfleet-system.
 */
export function leaseToRead(
  recorded: { namespace: string; name: string } | undefined,
  flagNamespace: string | undefined,
): { namespace: string; name: string } {
  return {
    namespace: flagNamespace ?? recorded?.namespace ?? DEFAULT_OPERATOR_LEASE.namespace,
    name: recorded?.name ?? DEFAULT_OPERATOR_LEASE.name,
  };
}

export function operatorWords(c: OperatorCheck, now: Date): OperatorWords {
  const { namespace, name } = c.where;
  const lease = `Lease ${namespace}/${name}`;
  const pods = `kubectl get pods -n ${namespace}`;
  const r = c.read;
  if ('missing' in r) {
    const why = `No operator runs: there is no ${lease} (an operator takes it when it starts), so nothing updates this status. Is the operator installed, and in ${namespace}? helm list -A; ${pods}. Installed elsewhere: pass --operator-namespace NAMESPACE.`;
    return { silent: true, line: `silent: no ${lease}; is the operator installed? ${pods}`, why };
  }
  if ('forbidden' in r) {
    const line = `unknown: you may not read the ${lease} (${r.forbidden}), so whether an operator still updates this status cannot be told from here; someone who may: kubectl get lease ${name} -n ${namespace}`;
    return { silent: false, line, why: `Operator ${line}` };
  }
  if ('error' in r) {
    const line = `unknown: reading the ${lease} failed (${r.error})`;
    return { silent: false, line, why: `Operator ${line}` };
  }
  const l = r.found;
  const renewed = Date.parse(l.renewTime ?? '');
  const ago = Number.isNaN(renewed) ? undefined : Math.round((now.getTime() - renewed) / 1000);
  const limit = Math.max(l.leaseDurationSeconds ?? 0, SILENT_AFTER_SECONDS);
  if (ago === undefined || ago > limit) {
    const since =
      ago === undefined
        ? 'ever'
        : `${new Date(renewed).toISOString().replace(/\.\d+Z$/, 'Z')} (${duration(ago)} ago)`;
    const why = `No operator has renewed its ${lease} since ${since}, past the ${limit} s a leader renews within: nothing updates this status, which says what the operator last saw. Is it installed and running? helm list -A; ${pods}.`;
    return {
      silent: true,
      line: `silent: no operator has renewed its ${lease} since ${since}; is it running? ${pods}`,
      why,
    };
  }
  const holder = l.holderIdentity
    ? `${l.holderIdentity} leads`
    : 'handing over (the last leader released the lease)';
  return {
    silent: false,
    line: `${holder}, ${lease} renewed ${duration(Math.max(0, ago))} ago`,
  };
}
