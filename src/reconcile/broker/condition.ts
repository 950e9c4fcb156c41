// The BrokerSettingsSafe condition, its Event when what it says changes, and
// the figures the operator's gauge exports.
import type { Condition, JobWorkerSpec } from '../../api/jobworker.js';
import type { BrokerSettingsRead, ConditionInput, PlanEvent } from '../model/index.js';
import { brokerFindings, brokerQueues, type BrokerFinding } from './findings.js';

export const BROKER_REASONS = [
  'PolicyDropsJobs',
  'ConsumerTimeoutTooShort',
  'FeatureFlagsDisabled',
  'DeprecatedFeaturesUsed',
] as const;

export interface BrokerVerdict {
  condition: ConditionInput;
  /** findings of each reason (the gauge jobfleet_broker_settings_unsafe); undefined when not checked */
  counts?: Record<(typeof BROKER_REASONS)[number], number>;
}

/**
 * BrokerSettingsSafe: False naming each policy that loses or stalls jobs and
 * its fix; True with a warning reason when only the next upgrade is at risk;
 * Unknown when the management API could not be read. Undefined without a
 * management URL (nothing read). Findings come in a fixed order, so an
 * unchanged broker computes the same message and writes nothing.
 */
export function brokerVerdict(
  read: BrokerSettingsRead | undefined,
  spec: JobWorkerSpec | undefined,
): BrokerVerdict | undefined {
  const type = 'BrokerSettingsSafe';
  if (!read || !spec) return undefined;
  if (!read.ok)
    return {
      condition: {
        type,
        status: 'Unknown',
        reason: 'NotChecked',
        message: `The broker's policies were not checked: ${read.error}`,
      },
    };
  const findings = brokerFindings({
    queues: brokerQueues(spec),
    settings: read.settings,
    handlerTimeoutSeconds: spec.retry.handlerTimeoutSeconds,
  });
  const counts = Object.fromEntries(
    BROKER_REASONS.map((r) => [r, findings.filter((f) => f.reason === r).length]),
  ) as Record<(typeof BROKER_REASONS)[number], number>;
  const failures = findings.filter((f) => f.severity === 'failure');
  const warnings = findings.filter((f) => f.severity === 'warning');
  const say = (fs: BrokerFinding[]) => fs.map((f) => `${f.says} Fix: ${f.fix}`).join(' ');
  const [failure] = failures;
  if (failure)
    return {
      counts,
      condition: {
        type,
        status: 'False',
        reason: failure.reason as 'PolicyDropsJobs' | 'ConsumerTimeoutTooShort',
        message: say(failures),
      },
    };
  const [warning] = warnings;
  if (warning)
    return {
      counts,
      condition: {
        type,
        status: 'True',
        reason: warning.reason as 'FeatureFlagsDisabled' | 'DeprecatedFeaturesUsed',
        message: `No policy loses or stalls jobs. ${say(warnings)}`,
      },
    };
  return {
    counts,
    condition: {
      type,
      status: 'True',
      reason: 'SettingsSafe',
      message: 'No policy or operator policy loses or stalls jobs on the JobWorker’s queues.',
    },
  };
}

/**
 * An Event when the condition says something new: Normal once a failure
 * clears (warnings or not), else a Warning for a policy that loses or stalls
 * jobs or a warning reason.
 * Nothing for a first safe check, nor for an unreadable API.
 */
export function brokerEvents(
  previous: readonly Condition[] | undefined,
  c: ConditionInput | undefined,
): PlanEvent[] {
  if (!c || c.status === 'Unknown') return [];
  const before = previous?.find((x) => x.type === 'BrokerSettingsSafe');
  if (before && before.reason === c.reason && before.message === c.message) return [];
  if (c.status === 'True' && before?.status === 'False')
    return [{ type: 'Normal', reason: 'BrokerSettingsSafe', message: c.message }];
  return c.status === 'False' || c.reason !== 'SettingsSafe'
    ? [{ type: 'Warning', reason: 'BrokerSettingsUnsafe', message: c.message }]
    : [];
}
