// A constant of its own module, so that the operator's pure broker checks
// (src/reconcile/broker/) read it without loading the worker runtime.
/**
 * How long a delivery is held through a claim-store outage before it goes
 * back to the broker: well under RabbitMQ's consumer_timeout (30 minutes by
 * default), past which the broker closes the channel and returns every
 * delivery on it.
 */
export const HOLD_LIMIT_MS = 10 * 60_000;
