// `make bench BENCH=status-writes`: what one JobWorker status write costs the
// control plane, by the status's shape, side by side on one real control
// plane. The shapes are the operator's own: a JobWorker is created and the
// operator (compiled, as the image runs it) writes its statuses while a watch
// keeps each one; then the operator stops and each shape is written onto
// fresh JobWorkers, `count` at a time, 16 at once, counting the apiserver's
// and etcd's CPU (/proc) over the writes. The floor's shape
// (`{observedGeneration, phase}`) is the baseline. Rounds alternate the
// order of the shapes, so a shape is not always the one after another.
import { spawn } from 'node:child_process';
import { API_VERSION, KIND, type JobWorkerStatus } from '../src/api/jobworker.js';
import { KubeClient } from '../src/kube/client.js';
import { freePort, repoRoot, startControlPlane } from '../test/ground/control-plane.js';
import { compiled } from '../test/ground/compiled.js';
import { installCrds } from '../test/ground/kube.js';
import { exampleSpec, planeCpu } from './operator-scale.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface StatusWriteShape {
  shape: string;
  bytes: number;
  /** apiserver + etcd CPU per write (ms), one figure per round */
  ms: number[];
}

export interface StatusWriteBench {
  count: number;
  rounds: number;
  shapes: StatusWriteShape[];
}

/** The conditions of a new JobWorker's status that say nothing is happening. */
const QUIET = ['Paused', 'Draining', 'RolloutBlocked', 'Degraded'];

export async function runStatusWriteBench(opts: {
  count: number;
  rounds: number;
}): Promise<StatusWriteBench> {
  const plane = await startControlPlane({ beforeControllers: installCrds });
  const cpu = () => {
    const by = planeCpu(plane.pids);
    return (by['kube-apiserver'] ?? 0) + (by.etcd ?? 0);
  };
  const client = KubeClient.fromFile(plane.kubeconfigPath);
  const namespace = 'bench';
  const spec = exampleSpec();
  const create = (name: string) =>
    client.create({ apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace }, spec });
  const writeStatus = (name: string, status: JobWorkerStatus) =>
    client.apply(
      { apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace }, status },
      'jobfleet-operator',
      { subresource: 'status' },
    );
  try {
    await client.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } });
    for (const name of ['rabbitmq', 'claims-db'])
      await client.create({
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name, namespace },
        stringData: { url: 'amqp://x' },
      });
    const { first, healthy } = await operatorStatuses(plane.kubeconfigPath, client, namespace);
    const shapes: Array<{ shape: string; before?: JobWorkerStatus; status: JobWorkerStatus }> = [
      {
        shape: "the floor's `{observedGeneration, phase}`",
        status: { observedGeneration: 1, phase: 'Progressing' },
      },
      { shape: "the operator's first (Progressing), on a JobWorker without status", status: first },
      {
        shape: "the operator's Healthy one, on top of its first (the second of two)",
        before: first,
        status: healthy,
      },
      {
        shape: "the operator's Healthy one, on a JobWorker without status (the only one)",
        status: healthy,
      },
      {
        shape: `the operator's first without its ${QUIET.length} conditions that say nothing happens (${QUIET.join(', ')})`,
        status: { ...first, conditions: first.conditions?.filter((c) => !QUIET.includes(c.type)) },
      },
    ];
    const ms = shapes.map(() => [] as number[]);
    let n = 0;
    for (let round = 0; round < opts.rounds; round++) {
      const order = shapes.map((_, i) => i);
      if (round % 2) order.reverse();
      for (const i of order) {
        const s = shapes[i]!;
        const names = Array.from({ length: opts.count }, () => `w-${n++}`);
        for (let j = 0; j < names.length; j += 50)
          await Promise.all(
            names.slice(j, j + 50).map(async (name) => {
              await create(name);
              if (s.before) await writeStatus(name, s.before);
            }),
          );
        await sleep(1500); // the creates' own watch traffic settles
        const c0 = cpu();
        for (let j = 0; j < names.length; j += 16)
          await Promise.all(names.slice(j, j + 16).map((name) => writeStatus(name, s.status)));
        await sleep(1500); // and the writes' own (the watch cache, the watchers)
        ms[i]!.push(((cpu() - c0) * 1000) / opts.count);
      }
    }
    return {
      count: opts.count,
      rounds: opts.rounds,
      shapes: shapes.map((s, i) => ({
        shape: s.shape,
        bytes: JSON.stringify(s.status).length,
        ms: ms[i]!,
      })),
    };
  } finally {
    await plane.stop();
  }
}

/**
 * The statuses the operator writes for a new JobWorker: the first
 * (Progressing, as written when its Deployment is not Available within the
 * hold) and the Healthy one. The operator's first status write is held
 * (src/reconcile/status/first-status.ts), so its Deployment is kept from
 * turning Available (0 replicas ready: kwok's node is cordoned) until the
 * first is written.
 */
async function operatorStatuses(
  kubeconfig: string,
  client: KubeClient,
  namespace: string,
): Promise<{ first: JobWorkerStatus; healthy: JobWorkerStatus }> {
  const seen: JobWorkerStatus[] = [];
  const ac = new AbortController();
  void client
    .watch(
      `/apis/${API_VERSION}/namespaces/${namespace}/jobworkers`,
      {},
      (_type, o) => {
        const status = o.status as JobWorkerStatus | undefined;
        if (o.metadata.name === 'shapes' && status) seen.push(status);
      },
      ac.signal,
    )
    .catch(() => undefined);
  const port = await freePort();
  const operator = spawn(process.execPath, [compiled('src/main.ts')], {
    cwd: repoRoot,
    env: {
      ...process.env,
      KUBECONFIG: kubeconfig,
      POD_NAMESPACE: namespace,
      POD_NAME: 'bench-operator',
      JOBFLEET_OPERATOR_PORT: String(port),
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const nodes = (await client.list('v1', 'Node')).items;
  const cordon = (unschedulable: boolean) =>
    Promise.all(
      nodes.map((n) =>
        client.request(
          'PATCH',
          `/api/v1/nodes/${n.metadata.name}`,
          { spec: { unschedulable } },
          'application/merge-patch+json',
        ),
      ),
    );
  try {
    await cordon(true);
    await client.create({
      apiVersion: API_VERSION,
      kind: KIND,
      metadata: { name: 'shapes', namespace },
      spec: exampleSpec(),
    });
    const until = async (ok: () => boolean, what: string) => {
      for (let i = 0; i < 240 && !ok(); i++) await sleep(250);
      if (!ok()) throw new Error(`the operator did not write ${what} within 60 s`);
    };
    await until(() => seen.length > 0, 'a first status');
    await cordon(false);
    await until(() => seen.at(-1)?.phase === 'Healthy', 'a Healthy status');
    return { first: seen[0]!, healthy: seen.at(-1)! };
  } finally {
    ac.abort();
    operator.kill('SIGTERM');
    await new Promise((r) => operator.once('exit', r));
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;

export function renderStatusWriteSection(r: StatusWriteBench): string {
  const floor = median(r.shapes[0]?.ms ?? []);
  const rounds = r.shapes[0]?.ms.map((_, i) => `round ${i + 1}`) ?? [];
  const rows = r.shapes.map(
    (s) =>
      `| ${s.shape} | ${s.bytes} | ${s.ms.map((x) => x.toFixed(2)).join(' | ')} | **${median(s.ms).toFixed(2)}** | ${(median(s.ms) / floor).toFixed(2)}× |`,
  );
  return `Apiserver + etcd CPU (ms) per JobWorker status write, by the status's shape: ${r.count} fresh JobWorkers
(examples/jobworker.yaml) per shape and round, written 16 at once by server-side apply on the status subresource, on
one real control plane; the shapes are what the operator itself wrote for a new JobWorker, captured from its watch.
${r.rounds} rounds, the shapes' order reversed every other round; each round shown, then the median and its ratio to the
floor's shape.

| status written | bytes | ${rounds.join(' | ')} | median | × the floor's |
|---|---:|${rounds.map(() => '---:').join('|')}|---:|---:|
${rows.join('\n')}

Why a new JobWorker's first status waits up to 10 s for it to turn Available (src/reconcile/status/first-status.ts):
two writes (the first, then the Healthy one on top of it) cost the sum of rows 2 and 3, a single Healthy one row 4.
Dropping the conditions that say nothing happens (row 5) would save less, and \`kubectl wait --for=condition=Degraded=False\`
would then wait on a condition that is absent.
`;
}
