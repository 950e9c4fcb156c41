// Operator scale benchmark (issue 5): N JobWorkers created at once against a
// real control plane (apiserver, controller manager, scheduler, kwok); time
// until all are Healthy, the operator process's peak RSS, API writes per
// JobWorker, and API writes during a steady-state window of resyncs.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { KubeClient, type KubeObject } from '../src/kube/client.js';
import { freePort, repoRoot, startControlPlane } from '../test/ground/control-plane.js';
import { installCrds } from '../test/ground/kube.js';

export interface OperatorBench {
  count: number;
  convergeSeconds: number;
  peakRssMiB: number;
  writesPerJobWorker: number;
  steadySeconds: number;
  resyncSeconds: number;
  steadyWrites: number;
  /** steady-state writes by kind (empty when there were none) */
  steadyByKind: Record<string, number>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function peakRssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return kb / 1024;
}

/** API writes so far, by kind (the operator's jobfleet_api_writes_total). */
async function writesByKind(port: number): Promise<Record<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const l of text.split('\n').filter((x) => x.startsWith('jobfleet_api_writes_total{'))) {
    const kind = /kind="([^"]+)"/.exec(l)?.[1] ?? '?';
    out[kind] = (out[kind] ?? 0) + Number(l.split(' ').at(-1));
  }
  return out;
}

const total = (w: Record<string, number>) => Object.values(w).reduce((a, b) => a + b, 0);

export async function runOperatorBench(opts: {
  count: number;
  steadySeconds: number;
  resyncSeconds: number;
}): Promise<OperatorBench> {
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
        stringData: { url: 'amqp://x' },
      });
    }
    operator = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      cwd: repoRoot,
      env: {
        ...process.env,
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
    const example = parse(readFileSync(path.join(repoRoot, 'examples/jobworker.yaml'), 'utf8')) as {
      spec: { broker: Record<string, unknown> };
    };
    // Without the management URL: the run measures the control-plane work, not
    // 1000 JobWorkers polling one RabbitMQ's management API (as earlier runs did).
    delete example.spec.broker.managementUrlSecretRef;
    const t0 = performance.now();
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
    for (;;) {
      const list = await client.list<
        KubeObject & { status?: { phase?: string; observedGeneration?: number } }
      >('jobfleet.dev/v1alpha1', 'JobWorker', namespace);
      const healthy = list.items.filter(
        (j) =>
          j.status?.phase === 'Healthy' && j.status.observedGeneration === j.metadata.generation,
      ).length;
      if (healthy === opts.count) break;
      await sleep(1000);
    }
    const convergeSeconds = (performance.now() - t0) / 1000;
    // Let the last status writes and Deployment events settle, then watch a steady state.
    await sleep(5000);
    const settled = await writesByKind(port);
    await sleep(opts.steadySeconds * 1000);
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
      peakRssMiB: peakRssMiB(operator.pid as number),
      writesPerJobWorker: total(settled) / opts.count,
      steadyByKind,
      steadySeconds: opts.steadySeconds,
      resyncSeconds: opts.resyncSeconds,
      steadyWrites,
    };
  } finally {
    operator?.kill('SIGTERM');
    await plane.stop();
  }
}
