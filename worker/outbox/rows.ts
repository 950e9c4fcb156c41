// A job as an outbox row and back, pure: the row keeps the envelope's fields
// (rendered as publish() renders them: key rule, id, creation time), and the
// relay publishes it as publish() would have (producer.ts's wireMessage).
import { renderJob, wireMessage, type PublishJob, type RenderedJob } from '../producer.js';

export interface OutboxJob<P = unknown> extends PublishJob<P> {
  /** more AMQP headers to send with it, string values (e.g. W3C traceparent) */
  headers?: Record<string, string>;
}

/** A job rendered for its queue, ready to insert. */
export interface OutboxEntry {
  queue: string;
  job: RenderedJob;
  headers?: Record<string, string>;
}

/** Renders a job for the outbox; throws naming the field and the fix. */
export function outboxEntry<P>(
  queue: string,
  job: OutboxJob<P>,
  at: number,
  who = 'enqueue',
): OutboxEntry {
  if (typeof queue !== 'string' || queue === '')
    throw new Error(`${who}: queue must name the work queue (e.g. "orders.ship")`);
  for (const [name, value] of Object.entries(job.headers ?? {}))
    if (typeof value !== 'string')
      throw new Error(`${who}: job.headers.${name} must be a string (headers are sent as text)`);
  return {
    queue,
    job: renderJob(job, at, who),
    ...(job.headers && Object.keys(job.headers).length > 0 && { headers: job.headers }),
  };
}

/** The insert's parameters: one array per column, one element per entry. */
export function insertValues(entries: readonly OutboxEntry[]): unknown[] {
  return [
    entries.map((e) => e.queue),
    entries.map((e) => e.job.id),
    entries.map((e) => e.job.key),
    entries.map((e) => e.job.type),
    entries.map((e) => e.job.schemaVersion),
    entries.map((e) => e.job.payloadJson),
    entries.map((e) => (e.headers ? JSON.stringify(e.headers) : null)),
    entries.map((e) => new Date(e.job.createdAtMs).toISOString()),
  ];
}

/** An outbox row as the relay reads it (OUTBOX_SQL.take). */
export interface OutboxRow {
  id: string;
  queue: string;
  message_id: string;
  key: string;
  type: string;
  schema_version: number;
  payload: string;
  headers: Record<string, unknown> | null;
  created_ms: number;
  publishes: number;
}

/** What the relay publishes for a row: the body and properties publish() would have sent. */
export function rowMessage(row: OutboxRow): ReturnType<typeof wireMessage> {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(row.headers ?? {})) if (typeof v === 'string') headers[k] = v;
  return wireMessage(
    {
      id: row.message_id,
      key: row.key,
      type: row.type,
      schemaVersion: row.schema_version,
      payloadJson: row.payload,
      createdAtMs: Math.round(row.created_ms),
    },
    headers,
  );
}
