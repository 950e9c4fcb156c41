// The message envelope (docs/worker.md, "What a message may hold") and the pure decision of whether a
// delivery can be run at all. Anything that fails here is dead-lettered at
// once: retrying a malformed message cannot fix it.
import { z } from 'zod';
import { renderKey, type Contract } from './contract.js';
import { isInt32, MAX_INT32, storable } from './storable.js';

/**
 * Text the claim store keeps exactly (see storable.ts): otherwise two
 * different keys could be stored as one, and the second job acked as a
 * duplicate of the first.
 */
const storableText = (max: number) =>
  z
    .string()
    .min(1)
    .max(max)
    .refine((s) => !s.includes('\0'), {
      message: 'must not contain NUL (U+0000): PostgreSQL text cannot store it',
    })
    .refine((s) => s.isWellFormed(), {
      message: 'must not contain a lone UTF-16 surrogate (it cannot be stored without loss)',
    });

const createdAtSchema = z.iso.datetime({ offset: true });

export const envelopeSchema = z.object({
  id: storableText(200),
  key: storableText(512),
  type: storableText(200),
  schemaVersion: z
    .number()
    .int()
    .min(1)
    .max(MAX_INT32, `must fit a 32-bit integer (at most ${MAX_INT32})`),
  payload: z.unknown(),
  createdAt: createdAtSchema,
});

/** The pattern zod checks createdAt against, for the check without zod below. */
const CREATED_AT = createdAtSchema._zod.def.pattern as RegExp;

const plainText = (v: unknown, max: number): v is string =>
  typeof v === 'string' &&
  v.length >= 1 &&
  v.length <= max &&
  !v.includes('\0') &&
  v.isWellFormed();

/**
 * envelopeSchema.safeParse, with the common case taken without zod: an
 * envelope that passes each of the schema's rules, checked field by field
 * (zod's parse cost a no-op job more CPU and allocation than the rest of its
 * decoding). Anything else goes to zod, which decides and names the field;
 * so this check may only accept what zod accepts, and builds the same
 * object (test/unit/worker-pure.test.ts compares the two).
 */
export function parseEnvelope(json: unknown) {
  const plain = plainEnvelope(json);
  return plain ? { success: true as const, data: plain } : envelopeSchema.safeParse(json);
}

export function plainEnvelope(json: unknown): Envelope | undefined {
  if (json === null || typeof json !== 'object' || Array.isArray(json)) return undefined;
  const o = json as Record<string, unknown>;
  const { id, key, type, schemaVersion, createdAt } = o;
  if (!plainText(id, 200) || !plainText(key, 512) || !plainText(type, 200)) return undefined;
  if (!Number.isInteger(schemaVersion)) return undefined;
  const version = schemaVersion as number;
  if (version < 1 || version > MAX_INT32) return undefined;
  if (typeof createdAt !== 'string' || !CREATED_AT.test(createdAt) || !('payload' in o))
    return undefined;
  return { id, key, type, schemaVersion: version, payload: o.payload, createdAt };
}

export type Envelope<P = unknown> = Omit<z.infer<typeof envelopeSchema>, 'payload'> & {
  payload: P;
};

/** Why a delivery was dead-lettered: a bounded set, used as a metric label and a CLI filter. */
export const FAILURE_CLASSES = [
  'body_too_large',
  'not_json',
  'invalid_envelope',
  'unknown_type',
  'schema_version',
  'key_mismatch',
  'invalid_payload',
  'permanent',
  'attempts_exhausted',
  // the broker's delivery limit (quorum queues): returned unacked too many times
  'delivery_limit',
  // an attempt whose outcome is unknown, held for a person's decision (docs/in-doubt.md)
  'in_doubt',
] as const;
export type FailureClass = (typeof FAILURE_CLASSES)[number];

export type Decoded =
  | { ok: true; envelope: Envelope }
  | { ok: false; failureClass: FailureClass; reason: string; partial?: Partial<Envelope> };

export interface DecodeOptions {
  maxBytes: number;
  types: ReadonlySet<string>;
  contract: Contract;
}

export function decodeDelivery(body: Buffer, opts: DecodeOptions): Decoded {
  if (body.length > opts.maxBytes) {
    return {
      ok: false,
      failureClass: 'body_too_large',
      reason: `body is ${body.length} bytes, over the ${opts.maxBytes}-byte limit (maxMessageBytes)`,
    };
  }
  // Strict: a lenient decode turns each invalid byte into U+FFFD, so two keys
  // that differ only in an invalid byte would become one key.
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    return {
      ok: false,
      failureClass: 'not_json',
      reason:
        'body is not valid UTF-8 (a JSON message must be UTF-8; the producer sent other bytes)',
    };
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { ok: false, failureClass: 'not_json', reason: 'body is not valid JSON' };
  }
  const parsed = parseEnvelope(json);
  if (!parsed.success) {
    const fields = parsed.error.issues
      .map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`)
      .join('; ');
    return {
      ok: false,
      failureClass: 'invalid_envelope',
      reason: `invalid envelope: ${fields}`,
      partial: pickKnown(json),
    };
  }
  const envelope = parsed.data;
  if (!opts.types.has(envelope.type)) {
    return {
      ok: false,
      failureClass: 'unknown_type',
      reason: `unknown job type "${envelope.type}"; this worker handles ${[...opts.types].map((t) => `"${t}"`).join(', ')}`,
      partial: envelope,
    };
  }
  if (!opts.contract.schemaVersions.includes(envelope.schemaVersion)) {
    return {
      ok: false,
      failureClass: 'schema_version',
      reason: `schemaVersion ${envelope.schemaVersion} is outside this revision's contract [${opts.contract.schemaVersions.join(', ')}]`,
      partial: envelope,
    };
  }
  const rendered = renderKey(opts.contract.keyRule, envelope.payload);
  if (!rendered.ok) {
    return { ok: false, failureClass: 'key_mismatch', reason: rendered.problem, partial: envelope };
  }
  if (rendered.key !== envelope.key) {
    return {
      ok: false,
      failureClass: 'key_mismatch',
      reason: `key "${envelope.key}" does not match key rule "${opts.contract.keyRule}", which gives "${rendered.key}"`,
      partial: envelope,
    };
  }
  return { ok: true, envelope };
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** What can be salvaged from an invalid envelope for the dead-letter record (made storable). */
function pickKnown(json: unknown): Partial<Envelope> {
  if (json === null || typeof json !== 'object') return {};
  const o = json as Record<string, unknown>;
  const out: Partial<Envelope> = {};
  if (typeof o.id === 'string') out.id = storable(o.id, 200);
  if (typeof o.key === 'string') out.key = storable(o.key, 512);
  if (typeof o.type === 'string') out.type = storable(o.type, 200);
  if (isInt32(o.schemaVersion)) out.schemaVersion = o.schemaVersion;
  return out;
}

const SECRETISH = [
  // credentials inside URLs
  [/([a-z][a-z0-9+.-]*:\/\/)[^\s/@:]+:[^\s/@]+@/gi, '$1***@'],
  // bearer tokens, api keys, passwords in key=value or JSON form
  [/\b(bearer)\s+[A-Za-z0-9._~+/=-]+/gi, '$1 ***'],
  [
    /("?(?:password|passwd|secret|token|api[_-]?key|authorization)"?\s*[:=]\s*)"?[^\s",}]+"?/gi,
    '$1***',
  ],
] as const;

// eslint-disable-next-line no-control-regex -- control characters are what this removes
const CONTROL_OR_SPACE = /[\s\x00-\x1f\x7f]+/g;

/**
 * A dead-letter or retry reason fit for headers, logs and status: one line,
 * at most `max` characters, with credentials masked.
 */
export function compactReason(text: string, max = 300): string {
  let s = storable(text).replace(CONTROL_OR_SPACE, ' ').trim();
  for (const [re, sub] of SECRETISH) s = s.replace(re, sub);
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}
