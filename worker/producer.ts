// The producer helper: publishes an envelope the way workers expect it
// (docs/worker.md): messageId = id, timestamp = now (whole seconds, the AMQP
// property: a classic queue's head age reads it) and a `timestamp_in_ms`
// header (milliseconds, as RabbitMQ's timestamp interceptor writes it: the
// workers' measured age reads it), JSON body, persistent, and a publisher
// confirm before it resolves.
import { randomUUID } from 'node:crypto';
import type { ConfirmChannel, Options } from 'amqplib';
import { renderKey } from './contract.js';
import { TIMESTAMP_MS_HEADER } from './queue-head.js';

/** AMQP headers the runtime reads and writes. */
export const HEADERS = {
  attempt: 'x-jobfleet-attempt',
  notBefore: 'x-jobfleet-not-before',
  firstSeen: 'x-jobfleet-first-seen',
  lastError: 'x-jobfleet-last-error',
  deadLetteredAt: 'x-jobfleet-dead-lettered-at',
  reason: 'x-jobfleet-reason',
  failureClass: 'x-jobfleet-failure-class',
  originalQueue: 'x-jobfleet-original-queue',
  jobId: 'x-jobfleet-job-id',
  key: 'x-jobfleet-key',
  type: 'x-jobfleet-type',
  schemaVersion: 'x-jobfleet-schema-version',
  owner: 'x-jobfleet-owner',
  /** why a copy carries only jobfleet's headers (the producer's could not be re-encoded) */
  headersDropped: 'x-jobfleet-headers-dropped',
} as const;

export interface PublishJob<P = unknown> {
  type: string;
  schemaVersion: number;
  payload: P;
  /** the idempotency key; or give `keyRule` and it is rendered from the payload */
  key?: string;
  keyRule?: string;
  /** defaults to a random UUID */
  id?: string;
}

/** Publishes one job to `queue` and waits for the broker's confirm. Resolves to the id and key used. */
export async function publish<P>(
  channel: ConfirmChannel,
  queue: string,
  job: PublishJob<P>,
  now: () => number = Date.now,
): Promise<{ id: string; key: string }> {
  let key = job.key;
  if (key === undefined) {
    if (!job.keyRule)
      throw new Error('publish: give job.key, or job.keyRule to render it from the payload');
    const r = renderKey(job.keyRule, job.payload);
    if (!r.ok) throw new Error(`publish: ${r.problem}`);
    key = r.key;
  }
  const id = job.id ?? randomUUID();
  const at = now();
  const body = Buffer.from(
    JSON.stringify({
      id,
      key,
      type: job.type,
      schemaVersion: job.schemaVersion,
      payload: job.payload,
      createdAt: new Date(at).toISOString(),
    }),
  );
  await sendConfirmed(channel, queue, body, {
    messageId: id,
    timestamp: Math.floor(at / 1000),
    contentType: 'application/json',
    persistent: true,
    headers: { [HEADERS.attempt]: 0, [TIMESTAMP_MS_HEADER]: at },
  });
  return { id, key };
}

/**
 * Sends with a publisher confirm: resolves once the broker has the message;
 * rejects when it refuses it or the channel is already gone.
 */
export function sendConfirmed(
  channel: ConfirmChannel,
  queue: string,
  body: Buffer,
  props: Options.Publish,
): Promise<void> {
  const fail = (err: unknown) => (err instanceof Error ? err : new Error(String(err)));
  return new Promise<void>((resolve, reject) => {
    try {
      channel.sendToQueue(queue, body, props, (err) => (err ? reject(fail(err)) : resolve()));
    } catch (err) {
      reject(fail(err));
    }
  });
}
