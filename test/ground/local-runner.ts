// The local runner: a development stand-in for the kubelet, used by `make
// demo`, `make dev` and the integration suites that run pods — never by
// production. What only a real kubelet can show (image pulls, runc and the
// securityContext, cgroup limits, probes, SIGTERM with the grace period) is
// tested on the real node instead: test/ground/real-node.ts, the e2e-node
// suites in test/e2e-node/ (docs/real-node.md). It registers a Node
// (renewing its Lease so the node controller keeps it Ready) and, for every
// pod the scheduler binds to it, runs a real worker process on this machine:
// the pod's env (Secret references resolved), the command that `command(pod)`
// maps its image to. Each pod gets its own loopback address (127.x.y.z) as
// its pod IP, and its process serves /metrics and /readyz there on the
// container's declared port, as on a real pod network: the operator reaches
// it the same way. It reports the pod Running and Ready as the process is,
// restarts a crashed process (counting restarts, keeping the tail of its
// output as the last termination message, as FallbackToLogsOnError does),
// and on deletion sends SIGTERM, then SIGKILL at the end of the grace
// period, and removes the pod once the process has exited. Given a serving
// certificate (`kubelet`), it also serves the kubelet's containerLogs API over
// TLS on a port of its own, which the Node reports as its kubelet endpoint:
// `kubectl logs` (with -c, --previous, -f, --tail…) then works on its pods,
// from the bounded log it keeps of each process's stdout and stderr
// (./container-logs.ts).
//
// Pods opt in with the node selector `jobfleet.dev/runner: local` and the
// runner's toleration (the node is tainted, so kwok's fake node keeps running
// everything else); `runnerPodTemplate(nodeName)` also pins them to one runner.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import pino from 'pino';
import { Informer } from '../../src/controller/informer.js';
import type { KubeClient, KubeObject } from '../../src/kube/client.js';
import { ContainerLog, serveContainerLogs } from './container-logs.js';
import { repoRoot } from './control-plane.js';

export const RUNNER_LABEL = 'jobfleet.dev/runner';
/**
 * What a pod template needs to run on the runner `nodeName`: pinned to that
 * node, since every runner's node carries the runner label and two suites
 * running at once must not get each other's pods.
 */
export function runnerPodTemplate(nodeName: string) {
  return {
    nodeSelector: { [RUNNER_LABEL]: 'local', 'kubernetes.io/hostname': nodeName },
    tolerations: [{ key: RUNNER_LABEL, operator: 'Equal', value: 'local', effect: 'NoSchedule' }],
  };
}

export interface RunnerEvent {
  pod: string;
  revision: string | undefined;
  kind: 'seen' | 'started' | 'ready' | 'sigterm' | 'exited' | 'removed';
  at: number;
  detail?: string;
}

export interface LocalRunnerOptions {
  client: KubeClient;
  /** the namespace whose pods it runs; all namespaces when unset */
  namespace?: string;
  nodeName?: string;
  /** the command for a pod's container image: [executable, ...args] */
  command(image: string, pod: KubeObject): string[];
  /** extra env for every process (after the pod's) */
  env?: Record<string, string>;
  /** passes the processes' stderr through (debugging) */
  inheritStderr?: boolean;
  /** LOG_LEVEL for a pod whose env sets none (default JOBFLEET_TEST_LOG, else error) */
  logLevel?: string;
  /**
   * Serves the kubelet's containerLogs API (`kubectl logs`) on 127.0.0.1, over TLS with this
   * certificate, to clients whose certificate `caFile` signed: the apiserver's kubelet client.
   */
  kubelet?: { certFile: string; keyFile: string; caFile: string };
  /**
   * Runs every pod the scheduler places here (`make dev`, the README tour:
   * a cluster whose only node is this one). By default the node is tainted
   * and only pods that ask for the runner land on it.
   */
  untainted?: boolean;
}

interface Running {
  proc: ChildProcess;
  container: string;
  /** the pod IP: a loopback address of its own */
  ip: string;
  port: number;
  /** the last 2 KiB of its output: the termination message if it fails */
  tail: string;
  ready: boolean;
  restarts: number;
  exited: Promise<void>;
  terminating: boolean;
}

type Pod = KubeObject & {
  spec: {
    nodeName?: string;
    terminationGracePeriodSeconds?: number;
    containers: Array<{
      name: string;
      image: string;
      ports?: Array<{ name?: string; containerPort: number }>;
      env?: Array<{
        name: string;
        value?: string;
        valueFrom?: {
          secretKeyRef?: { name: string; key: string };
          fieldRef?: { fieldPath: string };
        };
      }>;
      readinessProbe?: { httpGet?: { port?: number | string } };
    }>;
  };
};

export class LocalRunner {
  readonly events: RunnerEvent[] = [];
  readonly nodeName: string;
  private readonly running = new Map<string, Running>();
  /** pod → its loopback address, kept across restarts */
  private readonly addresses = new Map<string, string>();
  /** pod → how its last process ended, while the next one is started */
  private readonly lastExit = new Map<string, { code: number; message: string; at: string }>();
  /** pods whose process is being started: a second event for them must not start another */
  private readonly starting = new Set<string>();
  /** pods whose process crashed and waits for its restart: only the restart timer starts it */
  private readonly backingOff = new Set<string>();
  /** pod → its container's logs: the current (or last) process's and the one before */
  private readonly logs = new Map<
    string,
    { container: string; current: ContainerLog; previous?: ContainerLog }
  >();
  private server: https.Server | undefined;
  /** the kubelet port the Node reports (0: none served) */
  private kubeletPort = 0;
  private informer: Informer | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private prober: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly o: LocalRunnerOptions) {
    this.nodeName = o.nodeName ?? 'local-runner';
  }

  async start(): Promise<void> {
    if (this.o.kubelet) await this.serveLogs(this.o.kubelet);
    await this.registerNode();
    this.heartbeat = setInterval(() => void this.renew().catch(() => undefined), 5000);
    this.informer = new Informer(this.o.client, {
      apiVersion: 'v1',
      kind: 'Pod',
      namespace: this.o.namespace,
      resyncMs: 5000,
      log: pino({ level: 'silent' }),
      onChange: (key, obj) => void this.sync(key, obj as Pod | undefined).catch(() => undefined),
    });
    await this.informer.start();
    this.prober = setInterval(() => void this.probe(), 500);
  }

  /** The kubelet port: GET /containerLogs/NS/POD/CONTAINER, for the apiserver's kubelet client. */
  private async serveLogs(tls: NonNullable<LocalRunnerOptions['kubelet']>): Promise<void> {
    const server = https.createServer(
      {
        cert: readFileSync(tls.certFile),
        key: readFileSync(tls.keyFile),
        ca: readFileSync(tls.caFile),
        requestCert: true,
        rejectUnauthorized: true,
      },
      (req, res) => serveContainerLogs(req, res, (...a) => this.logsOf(...a)),
    );
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    this.server = server;
    this.kubeletPort = (server.address() as net.AddressInfo).port;
  }

  /** A pod's container log as the kubelet finds it, or its words when there is none. */
  private logsOf(namespace: string, name: string, container: string, previous: boolean) {
    const pod = `pod "${name}" in namespace "${namespace}"`;
    const l = this.logs.get(`${namespace}/${name}`);
    if (!l) return { status: 404, message: `${pod} has no container on node ${this.nodeName}` };
    if (container !== l.container)
      return {
        status: 400,
        message: `container "${container}" of ${pod} does not run on the dev ground: its local runner runs the first container only ("${l.container}")`,
      };
    if (!previous) return l.current;
    return (
      l.previous ?? {
        status: 400,
        message: `previous terminated container "${container}" in ${pod} not found`,
      }
    );
  }

  private record(pod: Pod | undefined, name: string, kind: RunnerEvent['kind'], detail?: string) {
    this.events.push({
      pod: name,
      revision: pod?.metadata.labels?.['jobfleet.dev/revision'],
      kind,
      at: Date.now(),
      ...(detail ? { detail } : {}),
    });
  }

  private async registerNode(): Promise<void> {
    const c = this.o.client;
    await c.apply(
      {
        apiVersion: 'v1',
        kind: 'Node',
        metadata: {
          name: this.nodeName,
          labels: { [RUNNER_LABEL]: 'local', 'kubernetes.io/hostname': this.nodeName },
        },
        // Only pods that ask for the runner land here: others (kwok's) never get a process.
        spec: {
          taints: this.o.untainted
            ? []
            : [{ key: RUNNER_LABEL, value: 'local', effect: 'NoSchedule' }],
        },
      },
      'local-runner',
    );
    await this.renew();
  }

  /** Node status Ready and the node Lease: what the node lifecycle controller watches. */
  private async renew(): Promise<void> {
    const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
    const c = this.o.client;
    await c.apply(
      {
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: this.nodeName },
        status: {
          capacity: { cpu: '32', memory: '64Gi', pods: '110' },
          allocatable: { cpu: '32', memory: '64Gi', pods: '110' },
          conditions: [
            {
              type: 'Ready',
              status: 'True',
              reason: 'LocalRunnerReady',
              message: 'the local runner is running',
              lastHeartbeatTime: now,
              lastTransitionTime: now,
            },
          ],
          addresses: [{ type: 'InternalIP', address: '127.0.0.1' }],
          // where the apiserver reaches the kubelet API (logs) at the InternalIP
          ...(this.kubeletPort && {
            daemonEndpoints: { kubeletEndpoint: { Port: this.kubeletPort } },
          }),
        },
      },
      'local-runner',
      { subresource: 'status' },
    );
    await c.apply(
      {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name: this.nodeName, namespace: 'kube-node-lease' },
        spec: {
          holderIdentity: this.nodeName,
          leaseDurationSeconds: 40,
          renewTime: new Date()
            .toISOString()
            .replace('Z', '000Z')
            .replace(/(\.\d{6})\d*Z$/, '$1Z'),
        },
      },
      'local-runner',
    );
  }

  /** Maps are keyed by the informer's key, namespace/name. */
  private async sync(key: string, pod: Pod | undefined): Promise<void> {
    const name = key.split('/')[1] ?? key;
    const r = this.running.get(key);
    if (!pod) {
      if (r && !r.terminating) await this.terminate(key, undefined, r, 0);
      return;
    }
    if (pod.spec.nodeName !== this.nodeName) return;
    if (pod.metadata.deletionTimestamp) {
      if (r && !r.terminating)
        await this.terminate(key, pod, r, pod.spec.terminationGracePeriodSeconds ?? 30);
      else if (!r) await this.remove(pod);
      return;
    }
    if (!r && !this.stopped && !this.starting.has(key) && !this.backingOff.has(key)) {
      this.starting.add(key);
      this.record(pod, name, 'seen');
      const current = this.informer?.cache.get(key) as Pod | undefined;
      if (current && !current.metadata.deletionTimestamp && !this.stopped)
        await this.launch(key, current, 0);
      this.starting.delete(key);
    }
  }

  private async env(pod: Pod, ip: string): Promise<Record<string, string>> {
    const out: Record<string, string> = {};
    const fields: Record<string, string> = {
      'metadata.name': pod.metadata.name,
      'metadata.namespace': pod.metadata.namespace!,
      'status.podIP': ip,
      'spec.nodeName': this.nodeName,
    };
    for (const e of pod.spec.containers[0]?.env ?? []) {
      if (e.value !== undefined) out[e.name] = e.value;
      const field = e.valueFrom?.fieldRef?.fieldPath;
      if (field && fields[field] !== undefined) out[e.name] = fields[field];
      const ref = e.valueFrom?.secretKeyRef;
      if (ref) {
        const secret = await this.o.client.find<KubeObject & { data?: Record<string, string> }>(
          'v1',
          'Secret',
          pod.metadata.namespace,
          ref.name,
        );
        const v = secret?.data?.[ref.key];
        if (v !== undefined) out[e.name] = Buffer.from(v, 'base64').toString('utf8');
      }
    }
    return out;
  }

  private async launch(key: string, pod: Pod, restarts: number): Promise<void> {
    const name = pod.metadata.name;
    const container = pod.spec.containers[0]!;
    const [cmd, ...args] = this.o.command(container.image, pod);
    // The port the readiness probe reads (by name or number); a worker's metrics port otherwise.
    const probed = container.readinessProbe?.httpGet?.port;
    const port =
      (typeof probed === 'number'
        ? probed
        : container.ports?.find((p) => p.name === (probed ?? 'metrics'))?.containerPort) ?? 9464;
    let ip = this.addresses.get(key);
    if (!ip) {
      ip = await freeLoopback(port);
      this.addresses.set(key, ip);
    }
    const proc = spawn(cmd!, args, {
      cwd: repoRoot,
      env: {
        ...process.env,
        // errors at least: a worker that refuses to start says why in its last line
        LOG_LEVEL: this.o.logLevel ?? process.env.JOBFLEET_TEST_LOG ?? 'error',
        ...(await this.env(pod, ip)),
        ...this.o.env,
        JOBFLEET_METRICS_PORT: String(port),
        // each listens on its own pod IP, as on a pod network (a worker, or the operator)
        JOBFLEET_METRICS_HOST: ip,
        JOBFLEET_OPERATOR_HOST: ip,
        POD_NAME: name,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const log = new ContainerLog();
    const before = this.logs.get(key);
    this.logs.set(key, { container: container.name, current: log, previous: before?.current });
    const r: Running = {
      proc,
      container: container.name,
      ip,
      port,
      tail: '',
      ready: false,
      restarts,
      terminating: false,
      exited: new Promise((resolve) => proc.once('exit', () => resolve())),
    };
    const keep = (stream: 'stdout' | 'stderr') => (b: Buffer) => {
      r.tail = (r.tail + b.toString()).slice(-2048);
      log.write(stream, b);
      if (this.o.inheritStderr) process.stderr.write(b);
    };
    proc.stdout?.on('data', keep('stdout'));
    proc.stderr?.on('data', keep('stderr'));
    this.running.set(key, r);
    this.record(pod, name, 'started', `pid ${proc.pid}`);
    // after 'exit', once stdout and stderr are drained: the log ends, and so does -f
    proc.once('close', () => log.end());
    void r.exited.then(async () => {
      this.record(pod, name, 'exited', `code ${proc.exitCode ?? proc.signalCode}`);
      if (r.terminating || this.stopped) return;
      // Crashed: restart after a short backoff, as the kubelet would (restartPolicy Always).
      this.backingOff.add(key);
      this.running.delete(key);
      this.lastExit.set(key, {
        code: proc.exitCode ?? 137,
        message: r.tail,
        at: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
      });
      await this.writeStatus(key, { ...r, ready: false, restarts: restarts + 1 }, true).catch(
        () => undefined,
      );
      await new Promise((res) => setTimeout(res, Math.min(10_000, 500 * 2 ** restarts)));
      this.backingOff.delete(key);
      const current = this.informer?.cache.get(key) as Pod | undefined;
      if (current && !current.metadata.deletionTimestamp && !this.stopped)
        await this.launch(key, current, restarts + 1);
    });
    await this.writeStatus(key, r);
  }

  private async terminate(key: string, pod: Pod | undefined, r: Running, graceSeconds: number) {
    r.terminating = true;
    this.record(pod, key.split('/')[1] ?? key, 'sigterm');
    r.proc.kill('SIGTERM');
    const kill = setTimeout(() => r.proc.kill('SIGKILL'), graceSeconds * 1000);
    await r.exited;
    clearTimeout(kill);
    this.running.delete(key);
    if (pod) await this.remove(pod);
  }

  /** The kubelet's last word: the pod object goes once its containers are gone. */
  private async remove(pod: Pod): Promise<void> {
    // As the kubelet does once the containers are gone: a zero grace period ends the Terminating state.
    // (A query parameter: a DeleteOptions body on DELETE did not reach the apiserver.)
    await this.o.client
      .request(
        'DELETE',
        `/api/v1/namespaces/${pod.metadata.namespace}/pods/${pod.metadata.name}?gracePeriodSeconds=0`,
      )
      .catch(() => undefined); // already gone
    this.logs.delete(`${pod.metadata.namespace}/${pod.metadata.name}`);
    this.record(pod, pod.metadata.name, 'removed');
  }

  private async probe(): Promise<void> {
    for (const [key, r] of this.running) {
      if (r.terminating) continue;
      const ok = await fetch(`http://${r.ip}:${r.port}/readyz`, {
        signal: AbortSignal.timeout(400),
      }).then(
        (res) => res.ok,
        () => false,
      );
      if (ok !== r.ready) {
        r.ready = ok;
        if (ok)
          this.record(
            this.informer?.cache.get(key) as Pod | undefined,
            key.split('/')[1] ?? key,
            'ready',
          );
        await this.writeStatus(key, r).catch(() => undefined);
      }
    }
  }

  /** The pod's status as the kubelet writes it; `waiting`: the process exited and is being restarted. */
  private async writeStatus(key: string, r: Running, waiting = false): Promise<void> {
    const [namespace, name] = key.split('/') as [string, string];
    const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
    const ready = r.ready ? 'True' : 'False';
    const last = this.lastExit.get(key);
    await this.o.client.apply(
      {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, namespace },
        status: {
          phase: 'Running',
          hostIP: '127.0.0.1',
          podIP: r.ip,
          podIPs: [{ ip: r.ip }],
          startTime: now,
          conditions: [
            { type: 'Initialized', status: 'True', lastTransitionTime: now },
            { type: 'Ready', status: ready, lastTransitionTime: now },
            { type: 'ContainersReady', status: ready, lastTransitionTime: now },
            { type: 'PodScheduled', status: 'True', lastTransitionTime: now },
          ],
          containerStatuses: [
            {
              name: r.container,
              image: 'local',
              imageID: 'local',
              ready: r.ready,
              started: !waiting,
              restartCount: r.restarts,
              state: waiting
                ? {
                    waiting: {
                      reason: 'CrashLoopBackOff',
                      message: 'back-off restarting the failed container',
                    },
                  }
                : { running: { startedAt: now } },
              ...(last && {
                lastState: {
                  terminated: {
                    exitCode: last.code,
                    reason: 'Error',
                    message: last.message,
                    finishedAt: last.at,
                  },
                },
              }),
            },
          ],
        },
      },
      'local-runner',
      { subresource: 'status' },
    );
  }

  /** The pods whose process runs now (namespace/name), with its pid. */
  processes(): Array<{ pod: string; pid: number }> {
    return [...this.running].map(([pod, r]) => ({ pod, pid: r.proc.pid ?? 0 }));
  }

  /** Stops every process (SIGTERM, then SIGKILL after `graceMs`) and the node heartbeat. */
  async stop(graceMs = 5000): Promise<void> {
    this.stopped = true;
    clearInterval(this.heartbeat);
    clearInterval(this.prober);
    this.informer?.stop();
    await Promise.all(
      [...this.running.values()].map(async (r) => {
        r.terminating = true;
        r.proc.kill('SIGTERM');
        const t = setTimeout(() => r.proc.kill('SIGKILL'), graceMs);
        await r.exited;
        clearTimeout(t);
      }),
    );
    this.running.clear();
    // bounded: an apiserver that is going down too (Ctrl-C signals the whole group) answers nothing
    await this.o.client
      .request(
        'DELETE',
        `/api/v1/nodes/${this.nodeName}`,
        undefined,
        'application/json',
        AbortSignal.timeout(3000),
      )
      .catch(() => undefined);
    if (this.server) {
      const closed = new Promise((r) => this.server!.close(r));
      this.server.closeAllConnections();
      await closed;
    }
  }
}

/** A loopback address of its own for a pod (all of 127.0.0.0/8 is local on Linux), free on `port`. */
async function freeLoopback(port: number): Promise<string> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const ip = `127.${randomInt(1, 255)}.${randomInt(0, 256)}.${randomInt(1, 255)}`;
    const free = await new Promise<boolean>((resolve) => {
      const s = net.createServer();
      s.once('error', () => resolve(false));
      s.listen(port, ip, () => s.close(() => resolve(true)));
    });
    if (free) return ip;
  }
  throw new Error(
    `no loopback address free on port ${port} (Linux routes all of 127.0.0.0/8 to lo; is something listening on *:${port}?)`,
  );
}
