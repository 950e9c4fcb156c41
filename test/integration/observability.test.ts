// What SREs read from both processes: /metrics that `promtool check metrics`
// passes (process_* and nodejs_* included, reconcile totals by result), and
// log lines with string levels, ISO times, and — for a reconcile that failed
// on the real apiserver — its controller, namespace, name, reconcile id and
// the error's stack.
import { spawnSync } from 'node:child_process';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { KubeClient } from '../../src/kube/client.js';
import type { Operator } from '../../src/operator.js';
import { testOperator, urlSecrets } from '../fixtures/operator.js';
import { eventually } from '../ground/eventually.js';
import { useKube } from '../ground/index.js';
import { createLogger } from '../../worker/log.js';
import { harness, type Harness } from './worker-harness.js';

let h: Harness;
let ns: Awaited<ReturnType<typeof useKube>>;
let client: KubeClient;
let op: Operator | undefined;
beforeEach(async () => {
  h = await harness();
  ns = await useKube();
  client = new KubeClient(ns.kc);
});
afterEach(async () => {
  await op?.stop();
  op = undefined;
  await ns?.cleanup();
  await h?.cleanup();
});

/** promtool's verdict on an exposition: its exit code and what it said. */
function promtoolCheck(text: string) {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (r.error) throw new Error(`promtool: ${r.error.message} (Debian's prometheus package has it)`);
  return { code: r.status, output: `${r.stdout}${r.stderr}` };
}

/** The operator's own logger, its JSON lines landing in `lines`. */
function capture(lines: Array<Record<string, unknown>>) {
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split('\n').filter(Boolean))
        lines.push(JSON.parse(l) as Record<string, unknown>);
      done();
    },
  });
  return createLogger({ level: 'info' }, sink);
}

const spec = {
  image: 'registry.example.com/shipping/worker:1',
  broker: { urlSecretRef: { name: 'rabbitmq', key: 'url' }, queue: 'orders.ship' },
  claims: { urlSecretRef: { name: 'claims-db', key: 'url' } },
  contract: { idempotencyKey: 'order:{orderId}:ship', schemaVersions: [1] },
  deadLetter: { owner: 'team-shipping' },
};

describe('metrics and logs', () => {
  it('both /metrics pass promtool check metrics, with process, reconcile and work-queue series', async () => {
    await urlSecrets(client, ns.namespace, {
      rabbitmq: 'amqp://u:p@127.0.0.1:1',
      'claims-db': 'postgres://u:p@127.0.0.1:1/x',
    });
    op = await testOperator(client, ns.namespace, { pollMs: 1000 });
    await client.apply(
      {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobWorker',
        metadata: { name: 'order-shipper', namespace: ns.namespace },
        spec,
      },
      'test',
    );
    const operatorText = await eventually('a reconcile counted', async () => {
      const t = await (await fetch(`http://127.0.0.1:${op!.port}/metrics`)).text();
      return /jobfleet_reconcile_total\{controller="jobworker",result="(success|requeue)"\} [1-9]/.test(
        t,
      )
        ? t
        : undefined;
    });
    expect(operatorText).toMatch(/^process_resident_memory_bytes /m);
    // every call counted by verb, resource and code: the first reconcile's applies included
    expect(operatorText).toMatch(
      /^jobfleet_api_requests_total\{verb="patch",resource="deployments\.apps",code="20[01]"\} [1-9]/m,
    );
    expect(operatorText).toMatch(/^nodejs_eventloop_lag_seconds /m);
    // the work queue, as controller-runtime shows it: keys added, how long they waited, what waits now
    expect(operatorText).toMatch(/^jobfleet_workqueue_adds_total\{name="jobworker"\} [1-9]/m);
    expect(operatorText).toMatch(
      /^jobfleet_workqueue_queue_duration_seconds_count\{name="jobworker"\} [1-9]/m,
    );
    expect(operatorText).toMatch(/^jobfleet_workqueue_depth\{name="jobworker"\} \d+$/m);
    expect(operatorText).toMatch(/^jobfleet_creations\{state="waiting"\} 0$/m);

    const w = await h.startWorker();
    await w.start();
    const workerText = await (await fetch(`http://127.0.0.1:${w.port}/metrics`)).text();
    expect(workerText).toMatch(/^process_cpu_seconds_total /m);
    await w.stop();

    for (const [who, text] of [
      ['operator', operatorText],
      ['worker', workerText],
    ] as const) {
      const r = promtoolCheck(text);
      expect(r.output, who).toBe('');
      expect(r.code, who).toBe(0);
    }
  });

  it('a reconcile the apiserver fails is logged with controller, namespace, name, reconcile id, a string level and the stack', async () => {
    await urlSecrets(client, ns.namespace, {
      rabbitmq: 'amqp://u:p@127.0.0.1:1',
      'claims-db': 'postgres://u:p@127.0.0.1:1/x',
    });
    const lines: Array<Record<string, unknown>> = [];
    op = await testOperator(client, ns.namespace, { log: capture(lines) });
    // The apiserver refuses the Deployment: a CPU limit that is not a quantity.
    await client.apply(
      {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobWorker',
        metadata: { name: 'bad-limits', namespace: ns.namespace },
        spec: { ...spec, podTemplate: { resources: { limits: { cpu: 'lots' } } } },
      },
      'test',
    );
    const failed = await eventually('the failed reconcile logged', async () =>
      Promise.resolve(
        lines.find((l) => l.msg === 'reconcile did not finish; retrying with backoff'),
      ),
    );
    expect(failed).toMatchObject({
      level: 'warn',
      controller: 'jobworker',
      namespace: ns.namespace,
      name: 'bad-limits',
      reconcileID: expect.stringMatching(/^[0-9a-f-]{36}$/),
    });
    expect(failed.time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    const err = failed.err as { message: string; stack: string; type: string };
    expect(err.message).toMatch(/Deployment|quantities|cpu/i);
    expect(err.stack).toMatch(/\n\s+at /);
  });
});
