// Every system the worker benchmark knows, by id. The child process imports
// only its own module; the orchestrator imports them all through here.
import { system as bullmq } from './bullmq.js';
import { system as graphileWorker } from './graphile-worker.js';
import { system as jobfleet } from './jobfleet.js';
import { system as pgBoss } from './pg-boss.js';
import { system as raw } from './raw.js';
import type { System, SystemId } from './system.js';

export const systems: Record<SystemId, System> = {
  raw,
  jobfleet,
  'pg-boss': pgBoss,
  'graphile-worker': graphileWorker,
  bullmq,
};
