// The transactional outbox (docs/outbox.md): enqueue in the caller's
// transaction, a relay that publishes with confirms, and the follow-up jobs a
// handler emits with its completion record.
export { enqueue, insertEntries, migrateOutbox, type Queryable } from './enqueue.js';
export { outboxEntry, type OutboxEntry, type OutboxJob } from './rows.js';
export { startRelay, type Relay, type RelayOptions } from './relay.js';
export { outboxMetrics } from './metrics.js';
export { OUTBOX_MIGRATIONS } from './sql.js';
