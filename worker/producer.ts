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

/** What a job becomes on the wire, before it is sent: the envelope's fields, its key rendered. */
export interface RenderedJob {
  id: string;
  key: string;
  type: string;
  schemaVersion: number;
  /** the payload as JSON text, placed in the body as it is */
  payloadJson: string;
  /** ms since the epoch: the envelope's createdAt and the message's timestamps */
  createdAtMs: number;
}

/** Renders a job's key (from `keyRule` when no key is given) and id; throws naming what is missing. */
export function renderJob<P>(job: PublishJob<P>, at: number, who = 'publish'): RenderedJob {
  let key = job.key;
  if (key === undefined) {
    if (!job.keyRule)
      throw new Error(`${who}: give job.key, or job.keyRule to render it from the payload`);
    const r = renderKey(job.keyRule, job.payload);
    if (!r.ok) throw new Error(`${who}: ${r.problem}`);
    key = r.key;
  }
  const payloadJson = JSON.stringify(job.payload);
  if (payloadJson === undefined) throw new Error(`${who}: job.payload must be a JSON value`);
  return {
    id: job.id ?? randomUUID(),
    key,
    type: job.type,
    schemaVersion: job.schemaVersion,
    payloadJson,
    createdAtMs: at,
  };
}

/**
 * The body and properties a rendered job is published with: the body is the
 * envelope as JSON; timestamp (whole seconds, the AMQP property a classic
 * queue's head age reads) and the `timestamp_in_ms` header (what the workers'
 * measured age reads) are its creation time, so a job that waited anywhere
 * before the broker (an outbox) shows that wait in the queue's age.
 */
export function wireMessage(
  job: RenderedJob,
  headers: Record<string, string> = {},
): { body: Buffer; props: Options.Publish } {
  const body = Buffer.from(
    `{"id":${JSON.stringify(job.id)},"key":${JSON.stringify(job.key)},"type":${JSON.stringify(job.type)},` +
      `"schemaVersion":${job.schemaVersion},"payload":${job.payloadJson},` +
      `"createdAt":${JSON.stringify(new Date(job.createdAtMs).toISOString())}}`,
  );
  return {
    body,
    props: {
      messageId: job.id,
      timestamp: Math.floor(job.createdAtMs / 1000),
      contentType: 'application/json',
      persistent: true,
      headers: { ...headers, [HEADERS.attempt]: 0, [TIMESTAMP_MS_HEADER]: job.createdAtMs },
    },
  };
}

/** Publishes one job to `queue` and waits for the broker's confirm. Resolves to the id and key used. */
export async function publish<P>(
  channel: ConfirmChannel,
  queue: string,
  job: PublishJob<P>,
  now: () => number = Date.now,
): Promise<{ id: string; key: string }> {
  const rendered = renderJob(job, now());
  const { body, props } = wireMessage(rendered);
  await sendConfirmed(channel, queue, body, props);
  return { id: rendered.id, key: rendered.key };
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
