// The broker's settings that lose or stall a JobWorker's jobs: policies
// matched to its queues, the consumer timeout, what blocks an upgrade; and the
// BrokerSettingsSafe condition they make.
// The folder's only door: code outside it imports from here.
export { BROKER_REASONS, brokerEvents, brokerVerdict, type BrokerVerdict } from './condition.js';
export {
  appliesTo,
  brokerFindings,
  brokerQueues,
  DEFAULT_CONSUMER_TIMEOUT_MS,
  effectivePolicy,
  patternMatches,
  type BrokerFinding,
  type BrokerQueue,
} from './findings.js';
