// The JobReplay API (jobfleet.dev/v1alpha1): a declarative, audited replay of
// a JobWorker's dead letters — `kubectl apply` it, watch its status. Like the
// JobWorker, the zod schema is the source of truth for the CRD.
import { z } from 'zod';
import { parseWith, type Parsed } from './parse.js';
import { FAILURE_CLASSES } from '../../worker/envelope.js';

export const REPLAY_KIND = 'JobReplay';
export const REPLAY_PLURAL = 'jobreplays';
/** A dry run's entries are kept in its status: bounded so the object stays small. */
export const DRY_RUN_MAX = 500;

export const jobReplaySpec = z
  .object({
    jobWorker: z
      .string()
      .min(1)
      .max(253)
      .describe('The JobWorker (same namespace) whose dead letters are replayed'),
    selector: z
      .object({
        ids: z
          .array(z.number().int().min(1))
          .max(10_000)
          .optional()
          .describe('Dead-letter entry ids (jobfleet dlq list)'),
        keys: z
          .array(z.string().min(1).max(512))
          .max(10_000)
          .optional()
          .describe('Idempotency keys'),
        reasonContains: z
          .string()
          .min(1)
          .max(512)
          .optional()
          .describe('Only entries whose reason contains this text'),
        failureClass: z
          .enum(FAILURE_CLASSES)
          .optional()
          .describe('Only dead letters of this failure class'),
        since: z.string().datetime().optional().describe('Dead-lettered at or after (RFC 3339)'),
        until: z.string().datetime().optional().describe('Dead-lettered before (RFC 3339)'),
      })
      .describe(
        'Which quarantined dead letters; every field narrows, at least one is required (a dry run may list them all)',
      ),
    ratePerSecond: z.number().min(0.01).max(1000).default(5).describe('Replays per second'),
    burst: z.number().int().min(1).max(1000).default(10).describe('Replays at once, at most'),
    maxCount: z
      .number()
      .int()
      .min(1)
      .max(100_000)
      .default(100)
      .describe('Replay at most this many'),
    failureThreshold: z
      .number()
      .int()
      .min(1)
      .default(5)
      .describe('Stop once this many replayed jobs fail again'),
    initiator: z
      .string()
      .min(1)
      .max(253)
      .describe('Who asked for the replay (recorded in the audit)'),
    reason: z.string().min(1).max(1024).describe('Why (recorded in the audit)'),
    dryRun: z
      .boolean()
      .default(false)
      .describe(
        `List what the selector matches, replaying nothing: status.entries holds the first maxCount (at most ${DRY_RUN_MAX}), status.selected how many match. kubectl jobworker dlq list makes one, reads it and deletes it`,
      ),
    force: z
      .boolean()
      .default(false)
      .describe(
        'Replay even while the incident lasts (the JobWorker late, throttled, rolling, or the failures still arriving); recorded in the audit with the reason',
      ),
  })
  .meta({
    'x-kubernetes-validations': [
      { rule: 'self == oldSelf', message: 'a JobReplay cannot be changed: create another one' },
      {
        rule: 'self.dryRun || has(self.selector.ids) || has(self.selector.keys) || has(self.selector.reasonContains) || has(self.selector.failureClass) || has(self.selector.since) || has(self.selector.until)',
        message: 'select something: ids, keys, reasonContains, failureClass, since or until',
        fieldPath: '.selector',
      },
      {
        rule: `!self.dryRun || self.maxCount <= ${DRY_RUN_MAX}`,
        message: `a dry run lists at most ${DRY_RUN_MAX} entries: lower maxCount`,
        fieldPath: '.maxCount',
      },
    ],
  })
  .describe('Which dead letters to replay, how fast, and who asks and why (audited)');

export type JobReplaySpec = z.output<typeof jobReplaySpec>;

/** Why a replay waits (src/dlq/replay-hold.ts). */
export const HOLD_REASONS = [
  'TargetPaused',
  'RolloutInProgress',
  'AgeOverObjective',
  'DependencyThrottling',
  'FailuresStillArriving',
] as const;

export const REPLAY_PHASES = [
  'Pending',
  'Held',
  'Running',
  'Succeeded',
  'Failed',
  'Stopped',
] as const;
export type ReplayPhase = (typeof REPLAY_PHASES)[number];

/** One quarantined dead letter, as a dry run lists it (no payload: it may hold personal data). */
const deadLetterEntry = z
  .object({
    id: z.number().int().describe('The entry id (replay it by spec.selector.ids)'),
    key: z.string().optional().describe('Its idempotency key, when the message had one'),
    type: z.string().optional().describe('Its job type, when the envelope named one'),
    failureClass: z.string().describe('Why, as a class: permanent, attempts_exhausted, …'),
    attempts: z.number().int().describe('Runs before it was dead-lettered'),
    reason: z.string().describe('Why, in words (never a secret)'),
    deadLetteredAt: z.string().describe('When it was quarantined (RFC 3339)'),
  })
  .describe('A quarantined dead letter (its payload stays in the quarantine)');
export type DeadLetterEntry = z.infer<typeof deadLetterEntry>;

export const jobReplayStatus = z
  .object({
    observedGeneration: z
      .number()
      .int()
      .optional()
      .describe('The spec generation this status describes'),
    phase: z
      .enum(REPLAY_PHASES)
      .optional()
      .describe(
        'Pending, Held (waiting for the incident to end: heldReason), Running, Succeeded, Failed or Stopped',
      ),
    heldReason: z.enum(HOLD_REASONS).optional().describe('Why the replay waits, while Held'),
    selected: z.number().int().optional().describe('Dead letters the selector matched'),
    replayed: z.number().int().optional().describe('Republished to the work queue'),
    skipped: z.number().int().optional().describe('Keys that had completed meanwhile: not run'),
    completed: z.number().int().optional().describe('Replayed and completed'),
    failedAgain: z.number().int().optional().describe('Replayed and dead-lettered again'),
    pending: z.number().int().optional().describe('Replayed, outcome not yet known'),
    notFound: z
      .number()
      .int()
      .optional()
      .describe('Selected ids or keys with no quarantined entry'),
    startedAt: z.string().optional().describe('When the replay started'),
    finishedAt: z.string().optional().describe('When it finished'),
    message: z.string().optional().describe('What happened, in words'),
    entries: z
      .array(deadLetterEntry)
      .max(DRY_RUN_MAX)
      .optional()
      .describe(
        'A dry run’s answer: the first maxCount dead letters the selector matches, oldest first',
      ),
  })
  .describe('The replay’s progress, written as it goes');
export type JobReplayStatus = z.infer<typeof jobReplayStatus>;

export function parseReplaySpec(raw: unknown): Parsed<JobReplaySpec> {
  return parseWith(jobReplaySpec, raw);
}
