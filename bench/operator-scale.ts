// Operator scale benchmark: N JobWorkers created at once against a real
// control plane (apiserver, controller manager, scheduler, kwok); time until
// all are Healthy against the floor (the same children applied directly, on
// a fresh control plane, in the same run), when the first and the median turn
// Healthy, API requests per JobWorker, the operator process's peak RSS, API
// writes per JobWorker, and API writes during a steady-state window of resyncs.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pino } from 'pino';
import { parse } from 'yaml';
import { Informer } from '../src/controller/informer.js';
import { API_VERSION, KIND, parseSpec, type JobWorker } from '../src/api/jobworker.js';
import { KubeClient, type KubeObject } from '../src/kube/client.js';
import {
  desiredDeployment,
  desiredMetricsService,
  desiredPdb,
  desiredRevisionRecord,
} from '../src/reconcile/children/desired.js';
import { freePort, repoRoot, startControlPlane } from '../test/ground/control-plane.js';
import { compiled } from '../test/ground/compiled.js';
import { installCrds } from '../test/ground/kube.js';
import { processCpuSeconds } from './peers/server-cpu.js';
import { profileApiserver } from './apiserver-profile.js';

/**
 * JOBFLEET_BENCH_PPROF=<dir>: a CPU profile of the apiserver over each floor and each run, from
 * its start for 180 s (longer than either takes to converge here, so all of its work is in it),
 * into <dir>/floor-N.pprof and operator-N.pprof for run N (./apiserver-profile.ts).
 */
const PPROF_DIR = process.env.JOBFLEET_BENCH_PPROF;
/** JOBFLEET_BENCH_CPU_PROF=<dir>: the operator's own CPU profile (node --cpu-prof), written when it stops. */
const CPU_PROF_DIR = process.env.JOBFLEET_BENCH_CPU_PROF;
let profiles = 0;
const profiled = (kubeconfigPath: string, name: string): Promise<void> => {
  if (!PPROF_DIR) return Promise.resolve();
  if (name === 'floor') profiles++;
  return profileApiserver(kubeconfigPath, 180, PPROF_DIR, `${name}-${profiles}`);
};

export interface OperatorBench {
  count: number;
  convergeSeconds: number;
  /** the control plane's own floor: the same children applied directly, on a fresh control plane, until all Available */
  floorSeconds: number;
  /** when the median Deployment of the floor turned Available */
  floorMedianAvailableSeconds: number;
  /** when the first and the median JobWorker turned Healthy */
  firstHealthySeconds: number;
  medianHealthySeconds: number;
  /** from a JobWorker's Deployment reading Available to the JobWorker reading Healthy (as watches saw them) */
  healthyLagSeconds: { median: number; p90: number };
  /** API requests per JobWorker until converged, by verb and resource (jobfleet_api_requests_total) */
  requestsPerJobWorker: Record<string, number>;
  peakRssMiB: number;
  /** the operator's environment taken from the chart (chartEnv) */
  chartEnv: Record<string, string>;
  /** the operator's V8 heap in use once converged (nodejs_heap_size_used_bytes) */
  heapUsedMiB: number;
  /** TCP+TLS connections the operator opened to the apiserver until converged, for requests and for watches */
  connections: Record<string, number>;
  writesPerJobWorker: number;
  steadySeconds: number;
  resyncSeconds: number;
  steadyWrites: number;
  /** reconciles in the steady-state window: all, and those that planned (the resyncs) */
  steadyReconciles: { all: number; planned: number };
  /** the operator's CPU over the steady-state window */
  steadyOperatorCpuSeconds: number;
  /** steady-state writes by kind (empty when there were none) */
  steadyByKind: Record<string, number>;
  /** where the time went until converged: CPU seconds of the operator and of the control plane's processes (apiserver, etcd, controllers, kwok), and the floor's control plane */
  cpu: {
    operator: number;
    controlPlane: number;
    floorControlPlane: number;
    /** each control-plane process's share, this run and the floor's */
    byProcess: Record<string, number>;
    floorByProcess: Record<string, number>;
  };
  /**
   * reconciles until converged (all JobWorker reconciles, the unchanged ones
   * that planned nothing among them), the seconds the planned ones took in
   * all, and how long keys waited in the queue in all
   */
  reconciles: { count: number; unchanged: number; seconds: number; queueWaitSeconds: number };
  /** JobWorker status writes per JobWorker until converged (target ≤ 2) */
  statusWritesPerJobWorker: number;
  /** the operator's CPU per JobWorker per minute over the steady window (ms; target ≤ 1) */
  steadyOperatorCpuMsPerJobWorkerMinute: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function peakRssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return kb / 1024;
}

/** The operator's /metrics text now. */
const scrape = async (port: number) => (await fetch(`http://127.0.0.1:${port}/metrics`)).text();

/** A counter of a /metrics text, summed by some of its labels (values joined by a space). */
function counterBy(text: string, metric: string, ...labels: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const l of text.split('\n').filter((x) => x.startsWith(`${metric}{`))) {
    const value = labels
      .map((label) => new RegExp(`${label}="([^"]+)"`).exec(l)?.[1] ?? '?')
      .join(' ');
    out[value] = (out[value] ?? 0) + Number(l.split(' ').at(-1));
  }
  return out;
}

/** One unlabelled gauge of a /metrics text; with `labelled`, the sum over its label sets. */
function gauge(text: string, metric: string, labelled = false): number {
  if (labelled) return total(counterBy(text, metric));
  const line = text.split('\n').find((l) => l.startsWith(`${metric} `));
  return Number(line?.split(' ')[1] ?? NaN);
}

type Status = { status?: { [k: string]: unknown } };

/** A Deployment with its one pod available, at its generation. */
const available = (d: KubeObject & Status) =>
  Number(d.status?.availableReplicas ?? 0) >= 1 &&
  Number(d.status?.observedGeneration ?? 0) >= (d.metadata.generation ?? 0);

/** A JobWorker Healthy at its generation. */
const healthy = (j: KubeObject & Status) =>
  j.status?.phase === 'Healthy' && j.status.observedGeneration === j.metadata.generation;

/**
 * When each of `count` objects of a kind first met `done`, in seconds since
 * `t0`: from a watch (the project's informer), so that measuring adds no
 * load of its own to the apiserver (a list of a thousand objects every second did).
 */
async function firstTimes(
  client: KubeClient,
  apiVersion: string,
  kind: string,
  namespace: string,
  count: number,
  t0: number,
  done: (o: KubeObject & Status) => boolean,
): Promise<Map<string, number>> {
  const at = new Map<string, number>();
  let finish: () => void = () => undefined;
  const all = new Promise<void>((r) => (finish = r));
  const informer = new Informer(client, {
    apiVersion,
    kind,
    namespace,
    resyncMs: 24 * 3600_000,
    log: pino({ level: 'silent' }),
    onChange: (key, obj) => {
      if (!obj || at.has(key) || !done(obj)) return;
      at.set(key, (performance.now() - t0) / 1000);
      if (at.size === count) finish();
    },
  });
  await informer.start();
  try {
    await all;
  } finally {
    informer.stop();
  }
  return at;
}

/** CPU seconds so far of each of a control plane's processes, by name (kube-apiserver, etcd, …). */
export function planeCpu(pids: number[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const pid of pids) {
    const name = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    out[name] = (out[name] ?? 0) + processCpuSeconds(pid);
  }
  return out;
}

const minus = (a: Record<string, number>, b: Record<string, number>) =>
  Object.fromEntries(Object.entries(a).map(([k, v]) => [k, v - (b[k] ?? 0)]));

/** API writes so far, by kind (jobfleet_api_writes_total). */
const writesByKind = async (port: number) =>
  counterBy(await scrape(port), 'jobfleet_api_writes_total', 'kind');

/** The value at quantile `q` (0..1) of ascending `sorted`, 0 when empty. */
const quantile = (sorted: number[], q: number) => sorted[Math.floor(sorted.length * q)] ?? 0;

const total = (w: Record<string, number>) => Object.values(w).reduce((a, b) => a + b, 0);

/**
 * The operator container's environment as the chart sets it by default, for
 * the settings that decide speed and memory: read from
 * templates/deployment.yaml with values.yaml's defaults filled in, so the
 * bench measures what the chart ships.
 */
function chartEnv(): Record<string, string> {
  const values = parse(
    readFileSync(path.join(repoRoot, 'charts/jobfleet/values.yaml'), 'utf8'),
  ) as Record<string, unknown>;
  const template = readFileSync(
    path.join(repoRoot, 'charts/jobfleet/templates/deployment.yaml'),
    'utf8',
  );
  const env: Record<string, string> = {};
  for (const name of [
    'NODE_OPTIONS',
    'MALLOC_ARENA_MAX',
    'JOBFLEET_CONCURRENCY',
    'JOBFLEET_CREATION_WINDOW',
  ]) {
    const raw = new RegExp(`\\{ name: ${name}, value: (.+) \\}`).exec(template)?.[1];
    if (raw === undefined) throw new Error(`the chart no longer sets ${name}: update the bench`);
    env[name] = raw
      .replace(/\{\{ \.Values\.(\w+)(?: \| quote)? \}\}/g, (_, v: string) => String(values[v]))
      .replace(/^'(.*)'$/, '$1');
  }
  return env;
}

/** The example's JobWorker spec, without its management URL (nothing polls RabbitMQ). */
export function exampleSpec(): { broker: Record<string, unknown> } & Record<string, unknown> {
  const example = parse(readFileSync(path.join(repoRoot, 'examples/jobworker.yaml'), 'utf8')) as {
    spec: { broker: Record<string, unknown> } & Record<string, unknown>;
  };
  delete example.spec.broker.managementUrlSecretRef;
  return example.spec;
}

/**
 * The floor: what a user's own manifests and the least controller would
 * cost the control plane for the same fleet — each JobWorker object itself,
 * its Deployment, Service and PDB (the operator's own templates, owned by it),
 * its ControllerRevision, and one status write — server-side applied
 * directly in the same batches of 50, on a fresh control plane, without the
 * operator, until every Deployment is Available.
 */
async function floorRun(
  count: number,
): Promise<{ seconds: number; medianAvailable: number; cpu: Record<string, number> }> {
  const plane = await startControlPlane({ beforeControllers: installCrds });
  const cpu0 = planeCpu(plane.pids);
  try {
    const client = KubeClient.fromFile(plane.kubeconfigPath);
    const namespace = 'floor';
    await client.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } });
    const raw = exampleSpec();
    const spec = parseSpec(raw);
    if (!spec.ok) throw new Error(spec.problems.join('; '));
    const t0 = performance.now();
    const profile = profiled(plane.kubeconfigPath, 'floor');
    const names = Array.from({ length: count }, (_, i) => `w-${String(i).padStart(4, '0')}`);
    for (let i = 0; i < names.length; i += 50) {
      await Promise.all(
        names.slice(i, i + 50).map(async (name) => {
          const made = await client.apply<KubeObject>(
            { apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace }, spec: raw },
            'floor',
          );
          const jw = { ...made, spec: spec.spec } as unknown as JobWorker;
          for (const o of [
            desiredDeployment(jw, '1', 1),
            desiredMetricsService(jw),
            desiredPdb(jw),
          ])
            await client.apply(o, 'floor');
          await client.create(desiredRevisionRecord(jw, '1', raw));
          await client.apply(
            {
              apiVersion: API_VERSION,
              kind: KIND,
              metadata: { name, namespace },
              status: { observedGeneration: made.metadata.generation, phase: 'Progressing' },
            },
            'floor',
            { subresource: 'status' },
          );
        }),
      );
    }
    const availableAt = await firstTimes(
      client,
      'apps/v1',
      'Deployment',
      namespace,
      count,
      t0,
      (d) => available(d),
    );
    const seconds = (performance.now() - t0) / 1000;
    // CPU until converged, not until the profile ends
    const cpu = minus(planeCpu(plane.pids), cpu0);
    await profile;
    return {
      seconds,
      medianAvailable: quantile(
        [...availableAt.values()].sort((a, b) => a - b),
        0.5,
      ),
      cpu,
    };
  } finally {
    await plane.stop();
  }
}

export async function runOperatorBench(opts: {
  count: number;
  steadySeconds: number;
  resyncSeconds: number;
  /**
   * Scaling active: every JobWorker reads this RabbitMQ's management API for
   * its queue (the example's), as a deployed one does; the floor run is skipped.
   */
  rabbit?: { amqpUrl: string; mgmtUrl: string };
}): Promise<OperatorBench> {
  const floor = opts.rabbit
    ? { seconds: 0, medianAvailable: 0, cpu: {} }
    : await floorRun(opts.count);
  const plane = await startControlPlane({ beforeControllers: installCrds });
  const client = KubeClient.fromFile(plane.kubeconfigPath);
  const namespace = 'bench';
  const port = await freePort();
  let operator: ReturnType<typeof spawn> | undefined;
  try {
    await client.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } });
    for (const name of ['rabbitmq', 'claims-db']) {
      await client.create({
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name, namespace },
        stringData: {
          url: opts.rabbit?.amqpUrl ?? 'amqp://x',
          ...(opts.rabbit && { 'management-url': opts.rabbit.mgmtUrl }),
        },
      });
    }
    // compiled, as the image runs it (node dist/src/main.js), with the chart's environment
    const env = chartEnv();
    const profileArgs = CPU_PROF_DIR ? ['--cpu-prof', `--cpu-prof-dir=${CPU_PROF_DIR}`] : [];
    operator = spawn(process.execPath, [...profileArgs, compiled('src/main.ts')], {
      cwd: repoRoot,
      env: {
        ...process.env,
        ...env,
        KUBECONFIG: plane.kubeconfigPath,
        POD_NAMESPACE: namespace,
        POD_NAME: 'bench-operator',
        JOBFLEET_OPERATOR_PORT: String(port),
        JOBFLEET_RESYNC_SECONDS: String(opts.resyncSeconds),
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    for (;;) {
      if (
        await fetch(`http://127.0.0.1:${port}/readyz`).then(
          (r) => r.ok,
          () => false,
        )
      )
        break;
      await sleep(200);
    }
    // Without the management URL: the run measures the control-plane work, not
    // 1000 JobWorkers polling one RabbitMQ's management API (as earlier runs did).
    const example = { spec: exampleSpec() };
    if (opts.rabbit)
      example.spec.broker.managementUrlSecretRef = { name: 'rabbitmq', key: 'management-url' };
    const t0 = performance.now();
    const cpu0 = { operator: processCpuSeconds(operator.pid!), plane: planeCpu(plane.pids) };
    const profile = profiled(plane.kubeconfigPath, 'operator');
    const names = Array.from({ length: opts.count }, (_, i) => `w-${String(i).padStart(4, '0')}`);
    for (let i = 0; i < names.length; i += 50) {
      await Promise.all(
        names.slice(i, i + 50).map((name) =>
          client.create({
            apiVersion: 'jobfleet.dev/v1alpha1',
            kind: 'JobWorker',
            metadata: { name, namespace },
            spec: example.spec,
          }),
        ),
      );
    }
    // When each JobWorker first reads Healthy: progressive, or all at the end? And when its
    // Deployment first read Available: the difference is the operator's own lag.
    const [healthyAt, availableAt] = await Promise.all([
      firstTimes(client, 'jobfleet.dev/v1alpha1', 'JobWorker', namespace, opts.count, t0, healthy),
      firstTimes(client, 'apps/v1', 'Deployment', namespace, opts.count, t0, available),
    ]);
    const convergeSeconds = Math.max(...healthyAt.values());
    const byProcess = minus(planeCpu(plane.pids), cpu0.plane);
    const cpu = {
      operator: processCpuSeconds(operator.pid!) - cpu0.operator,
      controlPlane: total(byProcess),
      floorControlPlane: total(floor.cpu),
      byProcess,
      floorByProcess: floor.cpu,
    };
    const times = [...healthyAt.values()].sort((a, b) => a - b);
    const lags = [...healthyAt]
      .map(([name, at]) => at - (availableAt.get(name) ?? at))
      .sort((a, b) => a - b);
    const converged = await scrape(port);
    const requests = counterBy(converged, 'jobfleet_api_requests_total', 'verb', 'resource');
    const heapUsedMiB = gauge(converged, 'nodejs_heap_size_used_bytes') / 2 ** 20;
    const connections = counterBy(converged, 'jobfleet_api_connections_total', 'purpose');
    const reconciles = {
      count: counterBy(converged, 'jobfleet_reconcile_total', 'controller').jobworker ?? 0,
      unchanged: gauge(converged, 'jobfleet_reconcile_unchanged_total'),
      seconds: gauge(converged, 'jobfleet_reconcile_duration_seconds_sum'),
      queueWaitSeconds: gauge(converged, 'jobfleet_workqueue_queue_duration_seconds_sum', true),
    };
    // counted until converged (above); the profile may run on past it
    await profile;
    // Let the last status writes and Deployment events settle, then watch a steady state.
    await sleep(5000);
    const settled = await writesByKind(port);
    const reconcilesNow = async () => {
      const m = await scrape(port);
      const all = counterBy(m, 'jobfleet_reconcile_total', 'controller').jobworker ?? 0;
      return { all, planned: all - gauge(m, 'jobfleet_reconcile_unchanged_total') };
    };
    const steadyReconciles0 = await reconcilesNow();
    const steadyCpu0 = processCpuSeconds(operator.pid!);
    if (opts.steadySeconds) await sleep(opts.steadySeconds * 1000);
    const steadyCpu = processCpuSeconds(operator.pid!) - steadyCpu0;
    const steadyReconciles1 = await reconcilesNow();
    const after = await writesByKind(port);
    const steadyByKind = Object.fromEntries(
      Object.entries(after)
        .map(([k, v]) => [k, v - (settled[k] ?? 0)] as const)
        .filter(([, v]) => v > 0),
    );
    const steadyWrites = total(after) - total(settled);
    return {
      count: opts.count,
      convergeSeconds,
      floorSeconds: floor.seconds,
      floorMedianAvailableSeconds: floor.medianAvailable,
      firstHealthySeconds: quantile(times, 0),
      medianHealthySeconds: quantile(times, 0.5),
      healthyLagSeconds: { median: quantile(lags, 0.5), p90: quantile(lags, 0.9) },
      requestsPerJobWorker: Object.fromEntries(
        Object.entries(requests).map(([verb, n]) => [verb, n / opts.count]),
      ),
      peakRssMiB: peakRssMiB(operator.pid as number),
      chartEnv: env,
      heapUsedMiB,
      connections,
      writesPerJobWorker: total(settled) / opts.count,
      statusWritesPerJobWorker: (settled['JobWorker/status'] ?? 0) / opts.count,
      steadyOperatorCpuMsPerJobWorkerMinute: opts.steadySeconds
        ? (1000 * steadyCpu) / opts.count / (opts.steadySeconds / 60)
        : 0,
      steadyReconciles: {
        all: steadyReconciles1.all - steadyReconciles0.all,
        planned: steadyReconciles1.planned - steadyReconciles0.planned,
      },
      steadyOperatorCpuSeconds: steadyCpu,
      steadyByKind,
      steadySeconds: opts.steadySeconds,
      resyncSeconds: opts.resyncSeconds,
      steadyWrites,
      cpu,
      reconciles,
    };
  } finally {
    // stopped before its control plane, so that it exits as in a rollout (and writes its profile)
    const op = operator;
    if (op && op.exitCode === null) {
      const exited = new Promise((r) => op.once('exit', r));
      op.kill('SIGTERM');
      await Promise.race([exited, sleep(15_000)]);
    }
    await plane.stop();
  }
}
