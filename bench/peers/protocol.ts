// Messages between the orchestrator and a consumer process (IPC channel).
//
//   child → ready              connected, consuming nothing yet
//   parent → go                start consuming
//   child → consuming          the library's start has returned
//   child → progress {started} every 25 ms when the spec asks (several processes share one queue)
//   parent → settle {expect?}  finish once `expect` jobs have started (latency), or now (shared)
//   child → done {report}      after the library has recorded every completion
import type { ServerCpu } from './server-cpu.js';
import type { SystemId, Target } from './system.js';

export interface ChildSpec {
  system: SystemId;
  target: Target;
  options: Record<string, number>;
  mode: 'throughput' | 'latency';
  /** settle on its own once this many jobs have started; otherwise wait for the parent's settle */
  expect?: number;
  progress?: boolean;
  /** after this many completions each, a full GC and a heap reading (the child runs with --expose-gc) */
  heapAt?: number[];
}

export interface ChildReport {
  started: number;
  finished: number;
  /** wallMs() of the first handler start, and of the last recorded completion */
  firstStartedAt?: number;
  lastFinishedAt?: number;
  /** process CPU (user + system) from the first handler start until settled */
  cpuMicros: number;
  /** the servers' CPU in µs (./server-cpu.ts) over the same window */
  serverCpu: ServerCpu;
  /** latency mode: pairs of job number and (handler start − publish) in ms, flattened */
  latencies: number[];
  /** heap used after a full GC, at each of the spec's heapAt counts */
  heap?: Array<{ jobs: number; heapBytes: number }>;
}

export type ParentMessage = { type: 'go' } | { type: 'settle'; expect?: number };

export type ChildMessage =
  | { type: 'ready' }
  | { type: 'consuming' }
  | { type: 'progress'; started: number }
  | { type: 'done'; report: ChildReport }
  | { type: 'failed'; error: string };
