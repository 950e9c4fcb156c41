// The shape every benchmarked queue system implements, so that the
// orchestrator (bench/worker-throughput.ts) treats jobfleet, raw amqplib and
// the peer libraries alike: the parent prepares a fresh namespace and fills
// it; a child process (bench/peers/child.ts) consumes it with a no-op handler.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** What every job carries: its sequence number and when the producer sent it. */
export interface BenchJob {
  n: number;
  /** wallMs() at publish */
  at: number;
}

/**
 * Wall-clock milliseconds with sub-millisecond resolution. Every process on
 * the machine reads the same clock, so a publish time taken in the parent and
 * a handler start taken in a child can be subtracted.
 */
export const wallMs = (): number => performance.timeOrigin + performance.now();

export interface Services {
  amqpUrl: string;
  rabbitMgmtUrl: string;
  /** the bench's own database: its pg_stat_database row counts our traffic only */
  pgUrl: string;
  redisUrl: string;
  /** the type of the RabbitMQ queue raw amqplib and jobfleet consume (classic unless a row says) */
  queueType?: 'classic' | 'quorum';
}

/** Serialisable: what a consumer in another process needs to find its queue. */
export type Target = Record<string, string>;

export interface Producer {
  send(job: BenchJob): Promise<void>;
  close(): Promise<void>;
}

/** One run's queue, table or key space, created fresh and removed afterwards. */
export interface Namespace {
  target: Target;
  /** enqueues jobs 0..n-1 (creating the queue or schema even when n is 0) and closes its connections */
  fill(n: number): Promise<void>;
  /** a producer for the paced latency run */
  openProducer(): Promise<Producer>;
  cleanup(): Promise<void>;
}

/** How a consumer reports to the child process that hosts it. */
export interface ConsumerHooks {
  /** the no-op handler was invoked for this job */
  started(job: BenchJob): void;
  /** a job's completion was recorded (acked, committed) */
  finished(): void;
  /** for libraries that complete in batches out of sight: every started job is now finished */
  finishAll(): void;
  /** resolves once every started job has finished */
  allFinished(): Promise<void>;
}

export interface Consumer {
  /** connects; consumes nothing yet where the library allows that */
  open(): Promise<void>;
  /** begins consuming */
  start(): Promise<void>;
  /** resolves once the completion of every started job is recorded (drains what the library batches) */
  settle(): Promise<void>;
  close(): Promise<void>;
}

export interface System {
  /** the module name under bench/peers/ */
  id: SystemId;
  label: string;
  /** the installed version, for RESULTS.md */
  version: string;
  /** how it is configured here, and after which docs, for RESULTS.md */
  settings: string;
  /** whether the consumer's figures include PostgreSQL work */
  usesPostgres: boolean;
  /** why it cannot run on this machine, if it cannot */
  unavailable?(services: Services): Promise<string | undefined>;
  prepare(services: Services): Promise<Namespace>;
  consumer(target: Target, options: Record<string, number>, hooks: ConsumerHooks): Consumer;
}

export type SystemId = 'raw' | 'jobfleet' | 'pg-boss' | 'graphile-worker' | 'bullmq';

/** The version in a package.json: this project's (repoRoot) or an installed package's. */
export function packageVersion(dir: string): string {
  const file = path.join(dir, 'package.json');
  return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
}

export const installedVersion = (pkg: string): string =>
  packageVersion(path.join(repoRoot, 'node_modules', pkg));

/** Runs `send` for jobs 0..n-1, `concurrency` at a time. */
export async function sendAll(
  n: number,
  concurrency: number,
  send: (n: number) => Promise<unknown>,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, n) }, async () => {
      while (next < n) await send(next++);
    }),
  );
}
