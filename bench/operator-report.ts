// The operator benchmark's RESULTS.md section (bench/operator-scale.ts
// measures it): each run's row, then the median of the ratios.
import { header } from './results.js';
import type { OperatorBench } from './operator-scale.js';

const total = (w: Record<string, number>) => Object.values(w).reduce((a, b) => a + b, 0);
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** (control-plane CPU + operator CPU) / the floor's control-plane CPU: the target is ≤ 1.4 (issue 50). */
const cpuRatio = (r: OperatorBench) =>
  (r.cpu.controlPlane + r.cpu.operator) / Math.max(1e-9, r.cpu.floorControlPlane);

function row(r: OperatorBench, run: string): string {
  const requests = Object.entries(r.requestsPerJobWorker)
    .filter(([, n]) => n >= 0.01)
    .sort((a, b) => b[1] - a[1])
    .map(([verb, n]) => `${verb} ${n.toFixed(2)}`)
    .join(', ');
  return [
    run,
    `${r.convergeSeconds.toFixed(1)} s`,
    `${r.floorSeconds.toFixed(1)} s`,
    `${(r.convergeSeconds / r.floorSeconds).toFixed(2)}×`,
    `${r.firstHealthySeconds.toFixed(0)} s / ${r.medianHealthySeconds.toFixed(0)} s (${((100 * r.medianHealthySeconds) / r.convergeSeconds).toFixed(0)} %)`,
    `${r.floorMedianAvailableSeconds.toFixed(0)} s (${((100 * r.floorMedianAvailableSeconds) / r.floorSeconds).toFixed(0)} %)`,
    `${r.healthyLagSeconds.median.toFixed(0)} s / ${r.healthyLagSeconds.p90.toFixed(0)} s`,
    `${r.cpu.operator.toFixed(1)} s`,
    `${r.cpu.controlPlane.toFixed(0)} s / ${r.cpu.floorControlPlane.toFixed(0)} s`,
    `**${cpuRatio(r).toFixed(2)}**`,
    `${((1000 * r.cpu.operator) / r.count).toFixed(1)} ms`,
    `${r.reconciles.count} (${r.reconciles.unchanged} unchanged; ${((1000 * r.reconciles.seconds) / Math.max(1, r.reconciles.count - r.reconciles.unchanged)).toFixed(1)} ms each planned; queue wait ${r.reconciles.queueWaitSeconds.toFixed(0)} s in all)`,
    `${((r.reconciles.count - r.reconciles.unchanged) / r.count).toFixed(2)} (${(r.reconciles.count / r.count).toFixed(2)} in all)`,
    `${r.statusWritesPerJobWorker.toFixed(2)}`,
    `${total(r.requestsPerJobWorker).toFixed(2)}: ${requests}`,
    `${r.connections.requests ?? 0} + ${r.connections.watches ?? 0}`,
    `${r.peakRssMiB.toFixed(0)} MiB (${r.heapUsedMiB.toFixed(0)} MiB)`,
    `${r.writesPerJobWorker.toFixed(2)}`,
  ].join(' | ');
}

export function renderOperatorSection(rs: OperatorBench[], args: string[]): string {
  const last = rs.at(-1)!;
  const ratios = rs.map((r) => r.convergeSeconds / r.floorSeconds);
  const cmd = `make bench BENCH=operator${args.length ? ` BENCH_ARGS="${args.join(' ')}"` : ''}`;
  return `${header('Operator: JobWorkers created at once', cmd)}
${last.count} JobWorkers (examples/jobworker.yaml without its management URL, so nothing polls RabbitMQ) created in batches of 50 against the test ground's real control plane
(kube-apiserver, controller manager, scheduler, kwok marking pods Ready). The operator runs compiled, as the image runs it,
in its own process (\`node dist/src/main.js\`, built by the bench when a source is newer; one namespace), with the
chart's default environment for speed and memory (${Object.entries(last.chartEnv)
    .map(([k, v]) => `\`${k}=${v}\``)
    .join(
      ', ',
    )}). Converged = every JobWorker \`Healthy\` at its generation. ${rs.length} runs back to back, each
with its own floor: each run's row, then the median ratio.

| run | time to all converged | floor (the JobWorkers, their children and records, one status write each, applied directly) | ratio | first / median Healthy (% of the total) | floor's median Deployment Available (% of the floor) | Deployment Available → JobWorker Healthy (median / p90) | operator CPU | control plane CPU: this run / its floor | CPU ratio (control plane + operator) / floor (≤ 1.4) | operator CPU per JobWorker (≤ 15 ms) | reconciles until converged | reconciles per JobWorker that planned (≤ 4; in all, the unchanged ones too) | status writes per JobWorker (≤ 2) | API requests per JobWorker | connections opened (requests + watches) | operator peak RSS (heap in use) | API writes per JobWorker |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---:|---:|
${rs.map((r, i) => `| ${row(r, String(i + 1))} |`).join('\n')}

**Median ratio: ${median(ratios).toFixed(2)}×** (runs: ${ratios.map((x) => `${x.toFixed(2)}×`).join(', ')}); CPU ratio: ${rs.map((r) => cpuRatio(r).toFixed(2)).join(', ')} (target ≤ 1.4 in every run).
Steady state, after the last run converged: ${last.steadyWrites} API writes in ${last.steadySeconds} s (resync every ${last.resyncSeconds} s, the operator's default unless the command says \`--resync\`), operator CPU ${last.steadyOperatorCpuMsPerJobWorkerMinute.toFixed(2)} ms per JobWorker per minute (target 0 writes, ≤ 1 ms); ${last.steadyReconciles.planned} of ${last.steadyReconciles.all} reconciles in the window planned, ${last.steadyReconciles.planned ? ((1000 * last.steadyOperatorCpuSeconds) / last.steadyReconciles.planned).toFixed(2) : '–'} ms of operator CPU per planned one (all of the window's CPU over them)${
    Object.keys(last.steadyByKind).length
      ? `: ${Object.entries(last.steadyByKind)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')}`
      : ''
  }.

The floor runs first, on a fresh control plane of its own (the operator's run then gets another), so neither
sees the other's objects. API requests count every call the operator made until the last JobWorker turned
Healthy (lists and watches included, spread over the JobWorkers), by verb and resource. Both runs time each object
from a watch (lists every second were a load of their own on the apiserver):
"Deployment Available → JobWorker Healthy" is the operator's own lag behind the control plane, the floor's median
says how progressive the control plane itself is with this many objects at once. CPU: user + system seconds from
\`/proc/PID/stat\` over the time to converge, of the operator's process and of every control-plane process
(kube-apiserver, etcd, controller manager, scheduler, kwok); the two cores are shared by all of them.

${FINDING}

Writes per JobWorker: the Deployment, Service and PDB applies, the revision's ControllerRevision, one or two status
writes and the Created event. The first status waits up to 10 s from the Deployment's creation for the JobWorker to turn
Available (src/reconcile/status/first-status.ts): one that does gets one write, already Healthy; one that does not gets
its first (Progressing) then, and its Healthy one when it is Available. The floor makes the user's own writes (the JobWorker) and the least a controller that reports
anything makes (the same children and record, one status write), so the CPU ratio is what the operator adds beyond that.
Steady state: a reconcile that finds the same spec generation, the same children and the same quarantine read plans
nothing (\`jobfleet_reconcile_unchanged_total\`), the operator's own status writes wake nothing, and applies and status
writes are skipped when nothing changed, so the target is 0 writes.
`;
}

/** What profiling the runs found (2026-12-06, this machine), and what was tried. */
const FINDING = `**Where the apiserver's extra CPU goes (profiled 2026-12-06 with \`JOBFLEET_BENCH_PPROF\`, in three runs of that day,
before the 16 MiB young generation, floor and run each profiled whole):** the CPU of the apiserver over its floor's, split by the kind of work in its
profile (the stacks' request handler and resource; \`go tool pprof -traces\`, grouped by hand):

| cause | run 1 | run 2 | run 3 |
|---|---:|---:|---:|
| status writes (JobWorker/status) | +11.7 s (24 %) | +10.3 s (36 %) | +8.8 s (126 %) |
| background (Go GC, etcd client, watch cache) | +15.7 s (33 %) | +10.1 s (35 %) | +2.2 s (32 %) |
| creates (JobWorkers, records, events) | +5.8 s (12 %) | +3.1 s (11 %) | +1.1 s (15 %) |
| watches of the children, pods and records | +3.9 s (8 %) | +3.2 s (11 %) | +1.5 s (21 %) |
| request handling (authn, authz, filters) | +3.2 s (7 %) | +1.2 s (4 %) | -0.5 s (-7 %) |
| the controllers' own updates (Deployment, ReplicaSet, PDB status) | +5.1 s (11 %) | +0.6 s (2 %) | -2.9 s (-42 %) |
| watches of JobWorkers | +0.8 s (2 %) | +0.7 s (3 %) | +0.7 s (9 %) |
| reads (list, get) | +0.1 s (0 %) | -0.0 s (-0 %) | -0.0 s (-0 %) |
| applies (the children; in the floor also the JobWorkers) | +1.9 s (4 %) | -0.5 s (-2 %) | -3.8 s (-55 %) |
| **apiserver CPU over the floor, profiled** | +48.2 s | +28.8 s | +7.0 s |

The status writes are the one steady cause: the operator writes two per JobWorker against the floor's one, and each
of its writes costs the apiserver about 6 ms of CPU (5.9–6.7 ms in the profiles) against 2–3 ms for the floor's (\`{observedGeneration, phase}\`):
a custom resource's status write runs the whole object through its schema and managed fields, and the operator's
status carries every condition with its message. Measured since, shape by shape on one control plane (2026-12-07,
\`make bench BENCH=status-writes\`, its section below): the operator's first status, its Healthy one on top of it and
a lone Healthy one cost 1.84, 2.28 and 1.68 times the floor's \`{observedGeneration, phase}\` (medians of 3 rounds). So a new
JobWorker's first status now waits up to 10 s for it to turn Available, and one that does gets a single write: in the
runs above every JobWorker got one, and the CPU ratio was 1.22, 1.32, 1.17 with operator CPU 8.0–9.4 ms per JobWorker
and a steady 0.45 ms per JobWorker per minute (the three runs before it, same day: 2.00–2.02 writes, CPU ratio 1.49,
1.32, 1.43, operator CPU 11.7–13.0 ms, steady 0.66 ms).
Reads cost nothing (the operator reads from its watches). The rest moves with the run: the Go GC and etcd
follow all the work, and "the controllers' own updates" are the same requests in both (the floor's control plane did
more of them in run 3, fewer in run 1). The floor itself moves most: its control plane used 90 s, 102 s and 135 s of
CPU for the same objects, so the CPU ratio of a run (1.85, 1.46, 1.06) follows its floor more than the operator
(operator CPU 17.8 s, 15.0 s, 14.5 s; the run's apiserver 102 s, 90 s, 87 s against its floor's 53 s, 61 s, 82 s).
Found since (2026-12-07, the operator's own CPU profile, \`JOBFLEET_BENCH_CPU_PROF\`): a quarter of the operator's CPU was
garbage collection, with the chart's 2 MiB young generation promoting watch events and plans that die young; with 16 MiB,
side by side in two pairs of one-run benches, operator CPU 9.9 and 11.9 s against 13.6 and 14.1 s, peak RSS 169 MiB
against 151 and 166 MiB, and the control plane's CPU fell with the shorter run (the runs above have it).
The next largest shares of the operator's CPU: decoding the watch streams (JSON, about a tenth) and the plans.
Then (2026-12-07) each claims database's quarantine is read every 30 s between reconciles, waking only a JobWorker whose
quarantine changed, where each JobWorker had asked for a reconcile every 30 s to read it: steady state 1.28 → 0.66 ms per
JobWorker per minute (11,103 → 1,000 reconciles in the window), and 4,112–4,306 → 3,377–3,410 reconciles until converged. Tried: a Deployment's watch events wake its
JobWorker only when they may change the plan (not the deployment controller's revision annotation, not Progressing's
reason once every replica is available, not our own apply coming back): 3.4–3.8 planned reconciles per new
JobWorker, from 4.0–4.4 (the runs of 2026-12-06 before it). Earlier (2026-12-03): the status written by JSON patch
instead of server-side apply cost the apiserver the same.`;
