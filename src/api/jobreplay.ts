// The JobReplay API (jobfleet.dev/v1alpha1): a declarative, audited replay of
// a JobWorker's dead letters — `kubectl apply` it, watch its status. Like the
// JobWorker, the zod schema is the source of truth for the CRD.
import { z } from 'zod';
import { FAILURE_CLASSES } from '../../worker/envelope.js';

export const REPLAY_KIND = 'JobReplay';
export const REPLAY_PLURAL = 'jobreplays';

export const jobReplaySpec = z
  .object({
    jobWorker: z
      .string()
      .min(1)
      .max(253)
      .describe('The JobWorker (same namespace) whose dead letters are replayed'),
    selector: z
      .object({
        ids: z.array(z.number().int().min(1)).max(10_000).optional(),
        keys: z.array(z.string().min(1).max(512)).max(10_000).optional(),
        reasonContains: z.string().min(1).max(512).optional(),
        failureClass: z
          .enum(FAILURE_CLASSES)
          .optional()
          .describe('Only dead letters of this failure class'),
        since: z.string().datetime().optional().describe('Dead-lettered at or after (RFC 3339)'),
        until: z.string().datetime().optional().describe('Dead-lettered before (RFC 3339)'),
      })
      .describe('Which quarantined dead letters; every field narrows, at least one is required')
      .meta({
        'x-kubernetes-validations': [
          {
            rule: 'has(self.ids) || has(self.keys) || has(self.reasonContains) || has(self.failureClass) || has(self.since) || has(self.until)',
            message: 'select something: ids, keys, reasonContains, failureClass, since or until',
          },
        ],
      }),
    ratePerSecond: z.number().min(0.01).max(1000).default(5).describe('Replays per second'),
    burst: z.number().int().min(1).max(1000).default(10).describe('Replays at once, at most'),
    maxCount: z.number().int().min(1).max(100_000).default(100),
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
  })
  .meta({
    'x-kubernetes-validations': [
      { rule: 'self == oldSelf', message: 'a JobReplay cannot be changed: create another one' },
    ],
  });

export type JobReplaySpec = z.output<typeof jobReplaySpec>;

export const REPLAY_PHASES = ['Pending', 'Running', 'Succeeded', 'Failed', 'Stopped'] as const;
export type ReplayPhase = (typeof REPLAY_PHASES)[number];

export const jobReplayStatus = z.object({
  observedGeneration: z.number().int().optional(),
  phase: z.enum(REPLAY_PHASES).optional(),
  selected: z.number().int().optional(),
  replayed: z.number().int().optional(),
  skipped: z.number().int().optional().describe('Keys that had completed meanwhile: not run'),
  completed: z.number().int().optional(),
  failedAgain: z.number().int().optional(),
  pending: z.number().int().optional(),
  notFound: z.number().int().optional(),
  startedAt: z.string().optional(),
  finishedAt: z.string().optional(),
  message: z.string().optional(),
});
export type JobReplayStatus = z.infer<typeof jobReplayStatus>;

export function parseReplaySpec(
  raw: unknown,
): { ok: true; spec: JobReplaySpec } | { ok: false; problems: string[] } {
  const r = jobReplaySpec.safeParse(raw);
  if (r.success) return { ok: true, spec: r.data };
  return {
    ok: false,
    problems: r.error.issues.map((i) => `spec.${i.path.join('.')}: ${i.message}`),
  };
}
