// What the kubelet says about a worker pod it cannot start or keeps killing,
// as the JobWorker passes it on: a pull that fails names the image and the
// kubelet's words, an OOM kill names the limit; a new revision stuck on a
// pull is noticed while the old one still serves; each fix names its runbook
// section, and the section exists. Pure (the pods are objects; nothing is
// fetched for these reasons).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CONTAINER_REASONS, TERMINATED_REASONS } from '../../src/api/reasons.js';
import {
  workersNeedChecking,
  workersReadyCondition,
  WORKERS_CHECK_AFTER_MS,
} from '../../src/reconcile/status/workers.js';
import { readWorkerReports, slimPod } from '../../src/signals/worker-readiness.js';
import { repoRoot } from '../ground/control-plane.js';

const pod = (container: Record<string, unknown>, limits?: Record<string, string>) =>
  slimPod({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'w-1', namespace: 'shipping' },
    spec: {
      containers: [
        {
          name: 'worker',
          image: 'localhost:5000/order-worker:nope',
          ports: [{ name: 'metrics', containerPort: 9464 }],
          env: [{ name: 'NOT_KEPT', value: 'x' }],
          ...(limits && { resources: { limits, requests: limits } }),
        },
      ],
    },
    status: {
      podIP: '10.88.0.9',
      conditions: [{ type: 'Ready', status: 'False' }],
      containerStatuses: [{ name: 'worker', ready: false, ...container }],
    },
  });

describe("the kubelet's reasons", () => {
  it('a pull that fails: the reason, the image and the kubelet’s words, and the fix', async () => {
    const [r] = await readWorkerReports([
      pod({
        restartCount: 0,
        state: {
          waiting: {
            reason: 'ImagePullBackOff',
            message: 'Back-off pulling image "localhost:5000/order-worker:nope": not found',
          },
        },
      }),
    ]);
    expect(r).toMatchObject({ pod: 'w-1', reason: 'ImagePullBackOff' });
    expect(r!.message).toBe(
      'the worker image cannot be pulled: localhost:5000/order-worker:nope (the kubelet: Back-off pulling image "localhost:5000/order-worker:nope": not found)',
    );
    expect(r!.fix).toContain('spec.template.spec.imagePullSecrets');
  });

  it('an OOM kill: the reason, the limit and the restarts, whatever the worker last logged', async () => {
    const [r] = await readWorkerReports([
      pod(
        {
          restartCount: 3,
          state: { waiting: { reason: 'CrashLoopBackOff' } },
          lastState: { terminated: { exitCode: 137, reason: 'OOMKilled', message: '' } },
        },
        { memory: '48Mi' },
      ),
    ]);
    expect(r).toMatchObject({ pod: 'w-1', reason: 'OOMKilled' });
    expect(r!.message).toContain('limit 48Mi; 3 restarts');
    expect(r!.fix).toContain('resources.limits.memory');
  });

  it('the pod cache keeps the image and the memory limit, not the rest of the container', () => {
    const c = (pod({}, { memory: '48Mi' }).spec as { containers: Array<Record<string, unknown>> })
      .containers[0]!;
    expect(c).toEqual({
      name: 'worker',
      image: 'localhost:5000/order-worker:nope',
      ports: [{ name: 'metrics', containerPort: 9464 }],
      resources: { limits: { memory: '48Mi' } },
    });
  });

  it('a rollout stuck with pods unavailable is asked about once it has made no progress for a while', () => {
    const now = new Date('2026-12-04T12:00:00Z');
    const ago = (ms: number) => new Date(now.getTime() - ms).toISOString();
    const stuck = (sinceProgress: number, unavailable = 1) => ({
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'w' },
      spec: { replicas: 1 },
      status: {
        replicas: 2,
        readyReplicas: 1,
        updatedReplicas: 1,
        unavailableReplicas: unavailable,
        conditions: [
          { type: 'Available', status: 'True', lastTransitionTime: ago(600_000) },
          { type: 'Progressing', status: 'True', lastUpdateTime: ago(sinceProgress) },
        ],
      },
    });
    expect(workersNeedChecking(stuck(WORKERS_CHECK_AFTER_MS - 1000), now)).toBe(false);
    expect(workersNeedChecking(stuck(WORKERS_CHECK_AFTER_MS + 1000), now)).toBe(true);
    expect(workersNeedChecking(stuck(WORKERS_CHECK_AFTER_MS + 1000, 0), now)).toBe(false);
  });

  it('a fault is said even while enough replicas are ready (the old revision serving)', () => {
    const c = workersReadyCondition(
      {
        revision: '2',
        generation: 2,
        observedGeneration: 2,
        replicas: 1,
        podReplicas: 2,
        readyReplicas: 1,
        updatedReplicas: 1,
        availableReplicas: 1,
      },
      1,
      [{ pod: 'w-2', reason: 'ErrImagePull', message: 'the worker image cannot be pulled: x:y' }],
    );
    expect(c).toMatchObject({ status: 'False', reason: 'ErrImagePull' });
    expect(c.message).toContain('pod w-2: the worker image cannot be pulled: x:y');
  });

  it("each fix names a section of docs/runbook.md that exists (GitHub's anchors)", () => {
    const runbook = readFileSync(path.join(repoRoot, 'docs/runbook.md'), 'utf8');
    const anchors = new Set(
      [...runbook.matchAll(/^#{2,4} (.+)$/gm)].map((m) =>
        m[1]!
          .toLowerCase()
          .replace(/[^\p{L}\p{N} -]/gu, '')
          .replace(/ /g, '-'),
      ),
    );
    const fixes = Object.values({ ...CONTAINER_REASONS, ...TERMINATED_REASONS }).map((r) => r.fix);
    for (const fix of fixes) {
      const anchor = /docs\/runbook\.md#([\w-]+)/.exec(fix)?.[1];
      expect(anchor, fix).toBeDefined();
      expect(anchors.has(anchor!), anchor).toBe(true);
    }
  });
});
