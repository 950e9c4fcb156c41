// The Helm chart: lint, render with several value sets, the alert rules
// through promtool, an install into the real kube-apiserver (server-side
// validation), and the operator — run from source, authenticated as the
// chart's ServiceAccount — reconciling the example with exactly the RBAC the
// chart grants: nothing missing (no 403), nothing unused.
import { execFile } from 'node:child_process';
import { copyFileSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { CHART, GROUND_KUBE, helm, IMAGE, render, renderFor, type Doc } from '../fixtures/helm.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { KubeClient } from '../../src/kube/client.js';
import { KubeAccess } from '../../src/kube/kubeconfig.js';
import type { Operator } from '../../src/operator.js';
import { testOperator, urlSecrets } from '../fixtures/operator.js';
import { assetsDir, repoRoot, startControlPlane } from '../ground/control-plane.js';
import { eventually } from '../ground/eventually.js';
import { useKube } from '../ground/index.js';
import { loadKubeConfig } from '../ground/kube.js';
import {
  compareRbac,
  triplesOfCall,
  triplesOfRules,
  type Rule,
  type Triple,
} from '../ground/rbac.js';

const run = promisify(execFile);
const KUBE_VERSIONS = ['1.30.0', GROUND_KUBE] as const;

/** A ClusterRole the chart folds into the built-in view/edit/admin roles (for people). */
const aggregated = (d: Doc) =>
  Object.keys(d.metadata?.labels ?? {}).some((l) =>
    l.startsWith('rbac.authorization.k8s.io/aggregate-to-'),
  );

const kinds = (docs: Doc[]) =>
  docs.map((d) => `${d.kind}/${d.metadata.namespace ?? ''}/${d.metadata.name}`).sort();

const ALL_ON = [
  'alerts.enabled=true',
  'dashboard.enabled=true',
  'metrics.podMonitor.enabled=true',
  'metrics.serviceMonitor.enabled=true',
];

describe('the Helm chart, rendered', () => {
  it('passes helm lint with the defaults, with every option on, and in namespaced mode', async () => {
    for (const kube of KUBE_VERSIONS)
      for (const set of [[], ALL_ON, ['watchNamespaces={team-a,team-b}']]) {
        const { stdout } = await helm(
          'lint',
          CHART,
          '--strict',
          '--kube-version',
          kube,
          ...[IMAGE, ...set].flatMap((s) => ['--set', s]),
        );
        expect(stdout).toContain('1 chart(s) linted, 0 chart(s) failed');
      }
  });

  it(`renders the same objects for Kubernetes 1.30 and ${GROUND_KUBE}, every option on`, async () => {
    const [oldest, newest] = await Promise.all(KUBE_VERSIONS.map((k) => renderFor(k, ...ALL_ON)));
    expect(kinds(oldest!)).toEqual(kinds(newest!));
    expect(kinds(newest!)).toContain('ValidatingAdmissionPolicy//jf-jobfleet-replay-initiator');
  });

  it('without image.repository, refuses to render and says which value to set', async () => {
    const failure = await helm('template', 'jf', CHART, '--kube-version', GROUND_KUBE).then(
      () => '',
      (err: Error & { stderr?: string }) => err.stderr ?? err.message,
    );
    expect(failure).toContain('image.repository is not set: no operator image is published yet');
    expect(failure).toContain('make images REGISTRY=<yours>');
  });

  it('by default: the CRDs (kept on uninstall), the operator (2 replicas, probes, restricted), a ClusterRole, the leader-election Role, a PDB', async () => {
    const docs = await render();
    expect(kinds(docs)).toEqual([
      'ClusterRole//jf-jobfleet',
      'ClusterRole//jf-jobfleet-edit',
      'ClusterRole//jf-jobfleet-view',
      'ClusterRoleBinding//jf-jobfleet',
      'CustomResourceDefinition//jobreplays.jobfleet.dev',
      'CustomResourceDefinition//jobworkers.jobfleet.dev',
      'Deployment/jobfleet-system/jf-jobfleet',
      'PodDisruptionBudget/jobfleet-system/jf-jobfleet',
      'Role/jobfleet-system/jf-jobfleet-leader-election',
      'RoleBinding/jobfleet-system/jf-jobfleet-leader-election',
      'Service/jobfleet-system/jf-jobfleet-metrics',
      'ServiceAccount/jobfleet-system/jf-jobfleet',
      'ValidatingAdmissionPolicy//jf-jobfleet-replay-initiator',
      'ValidatingAdmissionPolicyBinding//jf-jobfleet-replay-initiator',
    ]);
    // The CRDs are crds/ as generated, with the chart's labels and, by default, kept on uninstall.
    for (const file of ['jobfleet.dev_jobworkers.yaml', 'jobfleet.dev_jobreplays.yaml']) {
      const generated = parse(readFileSync(path.join(repoRoot, 'crds', file), 'utf8')) as Doc;
      const rendered = docs.find((d) => d.metadata.name === generated.metadata.name)!;
      expect(rendered.spec).toEqual(generated.spec);
      expect(rendered.metadata.annotations).toEqual({ 'helm.sh/resource-policy': 'keep' });
      expect(rendered.metadata.labels).toMatchObject({ 'app.kubernetes.io/managed-by': 'Helm' });
    }
    expect(
      (await render('crds.keep=false')).find((d) => d.kind === 'CustomResourceDefinition')!.metadata
        .annotations,
    ).toBeUndefined();
    expect(
      (await render('crds.install=false')).filter((d) => d.kind === 'CustomResourceDefinition'),
    ).toEqual([]);
    const dep = docs.find((d) => d.kind === 'Deployment')!;
    expect(dep.spec.replicas).toBe(2);
    const c = dep.spec.template.spec.containers[0];
    expect(c.image).toBe('registry.example/jobfleet-operator:0.1.0');
    expect(c.readinessProbe.httpGet.path).toBe('/readyz');
    expect(c.livenessProbe.httpGet.path).toBe('/healthz');
    expect(c.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      runAsNonRoot: true,
      capabilities: { drop: ['ALL'] },
    });
    expect(c.resources.limits.memory).toBe('512Mi');
    expect(c.env).toEqual(
      expect.arrayContaining([
        { name: 'JOBFLEET_WATCH_NAMESPACES', value: '' },
        { name: 'JOBFLEET_LEASE_NAME', value: 'jobfleet-operator' },
        { name: 'JOBFLEET_CONCURRENCY', value: '16' },
        { name: 'LOG_LEVEL', value: 'info' },
        { name: 'NODE_OPTIONS', value: '--max-old-space-size=256 --max-semi-space-size=16' },
      ]),
    );
  });

  it('in namespaced mode: a Role and RoleBinding per watched namespace, nothing cluster-wide', async () => {
    const docs = await render(
      'watchNamespaces={team-a,team-b}',
      'logLevel=debug',
      'image.tag=1.2.3',
    );
    expect(kinds(docs).filter((k) => /Role/.test(k))).toEqual([
      'ClusterRole//jf-jobfleet-edit',
      'ClusterRole//jf-jobfleet-view',
      'Role/jobfleet-system/jf-jobfleet-leader-election',
      'Role/team-a/jf-jobfleet',
      'Role/team-b/jf-jobfleet',
      'RoleBinding/jobfleet-system/jf-jobfleet-leader-election',
      'RoleBinding/team-a/jf-jobfleet',
      'RoleBinding/team-b/jf-jobfleet',
    ]);
    // A JobReplay's initiator is bound to its creator in the watched namespaces only.
    expect(
      docs.find((d) => d.kind === 'ValidatingAdmissionPolicyBinding')!.spec.matchResources,
    ).toEqual({
      namespaceSelector: {
        matchExpressions: [
          { key: 'kubernetes.io/metadata.name', operator: 'In', values: ['team-a', 'team-b'] },
        ],
      },
    });
    const c = docs.find((d) => d.kind === 'Deployment')!.spec.template.spec.containers[0];
    expect(c.image).toBe('registry.example/jobfleet-operator:1.2.3');
    expect(c.env).toEqual(
      expect.arrayContaining([
        { name: 'JOBFLEET_WATCH_NAMESPACES', value: 'team-a,team-b' },
        { name: 'LOG_LEVEL', value: 'debug' },
      ]),
    );
  });

  it('takes the scheduling, labelling, security, pull-secret and volume values clusters usually need, and extra objects', async () => {
    const docs = await render(
      'podLabels.team=payments',
      'priorityClassName=system-cluster-critical',
      'extraEnv[0].name=HTTPS_PROXY',
      'extraEnv[0].value=http://proxy:3128',
      'json:topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway","labelSelector":{"matchLabels":{"app.kubernetes.io/name":"jobfleet"}}}]',
      'json:podSecurityContext={"runAsNonRoot":true,"runAsUser":10001,"seccompProfile":{"type":"RuntimeDefault"}}',
      'json:extraObjects=[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"{{ .Release.Name }}-extra"},"data":{"k":"v"}}]',
      'json:extraVolumes=[{"name":"ca","configMap":{"name":"corp-ca"}}]',
      'json:extraVolumeMounts=[{"name":"ca","mountPath":"/etc/corp-ca","readOnly":true}]',
      'json:imagePullSecrets=[{"name":"registry-creds"}]',
    );
    const pod = docs.find((d) => d.kind === 'Deployment')!.spec.template;
    expect(pod.metadata.labels).toMatchObject({ team: 'payments' });
    expect(pod.spec.priorityClassName).toBe('system-cluster-critical');
    expect(pod.spec.topologySpreadConstraints[0].topologyKey).toBe('topology.kubernetes.io/zone');
    expect(pod.spec.securityContext).toEqual({
      runAsNonRoot: true,
      runAsUser: 10001,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(pod.spec.imagePullSecrets).toEqual([{ name: 'registry-creds' }]);
    expect(pod.spec.volumes).toEqual([{ name: 'ca', configMap: { name: 'corp-ca' } }]);
    const c = pod.spec.containers[0];
    expect(c.volumeMounts).toEqual([{ name: 'ca', mountPath: '/etc/corp-ca', readOnly: true }]);
    expect(c.env).toContainEqual({ name: 'HTTPS_PROXY', value: 'http://proxy:3128' });
    // the container's own context stays restricted unless overridden
    expect(c.securityContext).toMatchObject({ readOnlyRootFilesystem: true, runAsNonRoot: true });
    expect(docs.find((d) => d.kind === 'ConfigMap')?.metadata.name).toBe('jf-extra');
  });

  it('with monitoring on: ServiceMonitor, worker PodMonitor, PrometheusRule with runbook links, the dashboard for the sidecar', async () => {
    const docs = await render(...ALL_ON, 'alerts.queueAge.for=20m');
    const by = (kind: string) => docs.find((d) => d.kind === kind)!;
    expect(by('ServiceMonitor').spec.endpoints[0].port).toBe('http-metrics');
    expect(by('PodMonitor').spec.podMetricsEndpoints[0].relabelings).toContainEqual({
      sourceLabels: ['__meta_kubernetes_pod_label_jobfleet_dev_jobworker'],
      targetLabel: 'jobworker',
    });
    const rules = by('PrometheusRule').spec.groups[0].rules as Array<Record<string, any>>;
    expect(rules.map((r) => r.alert)).toEqual([
      'JobfleetQueueAgeOverObjective',
      'JobfleetDeadLetterOverdue',
      'JobfleetRetryRateHigh',
      'JobfleetRolloutBlocked',
      'JobfleetCappedByDownstream',
      'JobfleetBrokerSettingsUnsafe',
      'JobfleetInDoubtHeld',
      'JobfleetOutboxStalled',
      'JobfleetReconcileErrors',
    ]);
    expect(rules[0]!.for).toBe('20m');
    for (const r of rules) expect(r.annotations.runbook_url).toMatch(/docs\/runbook\.md#[a-z-]+$/);
    // Every runbook anchor exists in docs/runbook.md.
    const runbook = readFileSync(path.join(repoRoot, 'docs/runbook.md'), 'utf8');
    const anchors = new Set(
      [...runbook.matchAll(/^#+ (.+)$/gm)].map((m) =>
        m[1]!
          .toLowerCase()
          .replace(/[^a-z0-9 -]/g, '')
          .trim()
          .replace(/ /g, '-'),
      ),
    );
    for (const r of rules)
      expect(anchors).toContain(String(r.annotations.runbook_url).split('#')[1]);
    const dash = by('ConfigMap');
    expect(dash.metadata.labels?.grafana_dashboard).toBe('1');
    const json = JSON.parse(dash.data['jobfleet.json'] as string) as {
      panels: Array<{ title: string }>;
    };
    expect(json.panels.map((p) => p.title)).toEqual(
      expect.arrayContaining([
        'Oldest waiting message vs objective',
        'Replicas: desired and ready',
        'What limits the replica count',
        'Jobs per second by outcome',
        'Handler latency',
        'Duplicate suppressions and claim conflicts',
      ]),
    );
  });

  it('the dashboard draws every series in its own unit: seconds, per-second rates and counts never share an axis', () => {
    type Panel = {
      title: string;
      fieldConfig: {
        defaults: { unit?: string };
        overrides: Array<{
          matcher: { id: string; options: string };
          properties: Array<{ id: string; value: unknown }>;
        }>;
      };
      targets: Array<{ refId: string; expr: string }>;
    };
    const dashboard = JSON.parse(
      readFileSync(path.join(CHART, 'files/dashboard.json'), 'utf8'),
    ) as { panels: Panel[] };
    /** the unit a PromQL expression's values are in, from the metric and the function */
    const unitOf = (expr: string) =>
      /_seconds(_bucket)?\b/.test(expr) && (/histogram_quantile/.test(expr) || !/rate\(/.test(expr))
        ? 's'
        : /\brate\(/.test(expr)
          ? 'ops'
          : 'short';
    const drawn = dashboard.panels.flatMap((p) =>
      p.targets.map((t) => {
        const override = p.fieldConfig.overrides.find(
          (o) => o.matcher.id === 'byFrameRefID' && o.matcher.options === t.refId,
        );
        const unit = override?.properties.find((x) => x.id === 'unit')?.value as string | undefined;
        return `${p.title} / ${t.refId}: ${unit ?? p.fieldConfig.defaults.unit}`;
      }),
    );
    const expected = dashboard.panels.flatMap((p) =>
      p.targets.map((t) => `${p.title} / ${t.refId}: ${unitOf(t.expr)}`),
    );
    expect(drawn).toEqual(expected);
    // The ready line needs kube-state-metrics: the panel says so, as do values.yaml and the README.
    expect(
      (
        dashboard.panels.find((p) => p.title === 'Replicas: desired and ready') as {
          description?: string;
        }
      ).description,
    ).toMatch(/kube-state-metrics/);
    for (const file of ['charts/jobfleet/values.yaml', 'README.md'])
      expect(readFileSync(path.join(repoRoot, file), 'utf8')).toMatch(/kube-state-metrics/);
  });

  it("its README is helm-docs' output for values.yaml as it is (make chart-docs), every value described", async () => {
    const { stdout } = await run(
      path.join(assetsDir(), 'helm-docs'),
      ['--chart-search-root', 'jobfleet', '--sort-values-order', 'file', '--dry-run'],
      { cwd: path.dirname(CHART) },
    );
    expect(stdout, 'charts/jobfleet/README.md is stale: run `make chart-docs`').toBe(
      readFileSync(path.join(CHART, 'README.md'), 'utf8'),
    );
    const rows = stdout
      .split('\n')
      .filter((l) => /^\| [a-zA-Z]/.test(l) && !l.startsWith('| Key '));
    expect(rows.length).toBeGreaterThan(40);
    expect(rows.filter((r) => r.endsWith('|  |'))).toEqual([]);
  });

  it('its alert rules pass promtool check rules and their unit tests on synthetic series', async () => {
    const docs = await render('alerts.enabled=true');
    const dir = mkdtempSync(path.join(os.tmpdir(), 'jobfleet-rules-'));
    writeFileSync(
      path.join(dir, 'rules.yaml'),
      stringify({ groups: docs.find((d) => d.kind === 'PrometheusRule')!.spec.groups }),
    );
    copyFileSync(
      path.join(repoRoot, 'test/fixtures/alerts_test.yaml'),
      path.join(dir, 'alerts_test.yaml'),
    );
    const check = await run('promtool', ['check', 'rules', path.join(dir, 'rules.yaml')]);
    expect(check.stdout).toContain('SUCCESS: 9 rules found');
    const test = await run('promtool', ['test', 'rules', path.join(dir, 'alerts_test.yaml')]);
    expect(test.stdout).toContain('SUCCESS');
  });
});

describe('the Helm chart, installed', () => {
  let ns: Awaited<ReturnType<typeof useKube>>;
  let admin: KubeClient;
  let op: Operator | undefined;
  beforeEach(async () => {
    ns = await useKube();
    admin = new KubeClient(ns.kc);
  });
  afterEach(async () => {
    await op?.stop();
    op = undefined;
    await ns?.cleanup();
  });
  /**
   * helm install into the test namespace, watching only it; the release's name. The shared
   * ground installed the CRDs itself (and a cluster's CRDs belong to one release at most), so
   * crds.install=false, as for CRDs managed elsewhere.
   */
  const install = async () => {
    const release = `jf-${ns.namespace.slice(-8)}`;
    await helm(
      'install',
      release,
      CHART,
      '--namespace',
      ns.namespace,
      '--kubeconfig',
      ns.kubeconfigPath,
      '--set',
      `watchNamespaces={${ns.namespace}}`,
      '--set',
      'crds.install=false',
      '--set',
      IMAGE,
    );
    return release;
  };
  const uninstall = (release: string) =>
    helm('uninstall', release, '--namespace', ns.namespace, '--kubeconfig', ns.kubeconfigPath);

  it('installs (server-side validation); the operator as its ServiceAccount reconciles the example with exactly the RBAC granted', async () => {
    const release = await install();
    const fullname = `${release}-jobfleet`;
    const installed = await admin.get<Doc>('apps/v1', 'Deployment', ns.namespace, fullname);
    expect(installed.spec.replicas).toBe(2);

    // The chart's ServiceAccount, through a TokenRequest: the operator gets what the chart grants.
    const tr = await admin.request<{ status: { token: string } }>(
      'POST',
      `/api/v1/namespaces/${ns.namespace}/serviceaccounts/${fullname}/token`,
      {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenRequest',
        spec: { expirationSeconds: 3600 },
      },
    );
    const cluster = ns.kc.getCurrentCluster()!;
    const kc = new k8s.KubeConfig();
    kc.loadFromOptions({
      clusters: [cluster],
      users: [{ name: 'sa', token: tr.status.token }],
      contexts: [{ name: 'sa', cluster: cluster.name, user: 'sa' }],
      currentContext: 'sa',
    });
    const client = new KubeClient(kc);
    const used = new Set<Triple>();
    const denied: string[] = [];
    client.observe({
      request: (method, p, status) => {
        for (const t of triplesOfCall(method, p, status)) used.add(t);
        if (status === 403) denied.push(`${method} ${p}`);
      },
    });

    await urlSecrets(admin, ns.namespace, {
      rabbitmq: 'amqp://user:pw@127.0.0.1:1/',
      'claims-db': 'postgres://user:pw@127.0.0.1:1/claims',
      'rabbitmq-management': 'http://user:pw@127.0.0.1:1/',
    });
    op = await testOperator(client, ns.namespace, { identity: 'chart-op', pollMs: 1000 });
    const example = parse(
      readFileSync(path.join(repoRoot, 'examples/jobworker.yaml'), 'utf8'),
    ) as Doc;
    const applyJw = (
      image: string,
      rollout?: Record<string, unknown>,
      scaling?: Record<string, unknown>,
      more?: Record<string, unknown>,
    ) =>
      admin.apply(
        {
          ...example,
          metadata: { name: 'order-shipper', namespace: ns.namespace },
          spec: {
            ...example.spec,
            image,
            ...(rollout && { rollout }),
            ...(scaling && { scaling: { ...example.spec.scaling, ...scaling } }),
            ...more,
          },
        },
        'test-user',
      );
    const jw = () =>
      admin.get<Doc>('jobfleet.dev/v1alpha1', 'JobWorker', ns.namespace, 'order-shipper');
    // A revision record left by an earlier JobWorker of the same name: read, replaced.
    await admin.create({
      apiVersion: 'apps/v1',
      kind: 'ControllerRevision',
      metadata: { name: 'order-shipper-1', namespace: ns.namespace },
      revision: 1,
      data: { spec: { image: 'left-behind' } },
    });
    await applyJw(example.spec.image);
    await eventually('revision 1 rolled out', async () =>
      (await jw()).status?.currentRevision === '1' ? true : undefined,
    );
    const record1 = await admin.get<Doc>(
      'apps/v1',
      'ControllerRevision',
      ns.namespace,
      'order-shipper-1',
    );
    expect(record1.metadata.ownerReferences).toMatchObject([{ uid: (await jw()).metadata.uid }]);
    // A new revision: the operator watches its pods for automatic rollback.
    await applyJw(`${example.spec.image}-hotfix`);
    await eventually('revision 2 rolled out', async () =>
      (await jw()).status?.currentRevision === '2' ? true : undefined,
    );
    // A third, keeping one revision in history: revision 1's recorded spec is pruned.
    await applyJw(`${example.spec.image}-hotfix2`, { historyLimit: 1 });
    await eventually('revision 3 rolled out', async () =>
      (await jw()).status?.currentRevision === '3' ? true : undefined,
    );
    const records = async () =>
      (
        await admin.list<Doc>('apps/v1', 'ControllerRevision', ns.namespace, {
          labelSelector: 'jobfleet.dev/jobworker=order-shipper',
        })
      ).items.map((r) => r.metadata.name);
    await eventually('revision 1 pruned', async () =>
      !(await records()).includes('order-shipper-1') ? true : undefined,
    );
    expect(await records()).toContain('order-shipper-3');
    // A scale-down (a lower maxReplicas applies even with the queue unreadable): the pods
    // chosen for removal are marked first (patch).
    const hotfix2 = `${example.spec.image}-hotfix2`;
    await applyJw(hotfix2, { historyLimit: 1 }, { minReplicas: 2, maxReplicas: 2 });
    const deploymentReplicas = async () =>
      (await admin.get<Doc>('apps/v1', 'Deployment', ns.namespace, 'order-shipper')).status
        ?.readyReplicas;
    await eventually('two ready replicas', async () =>
      (await deploymentReplicas()) === 2 ? true : undefined,
    );
    await applyJw(hotfix2, { historyLimit: 1 }, { minReplicas: 1, maxReplicas: 1 });
    await eventually('the pod chosen for removal marked', () =>
      Promise.resolve(used.has('|pods|patch') || undefined),
    );
    // A Cohort rollout, aborted by hand: the cohort's Deployment is created, then deleted.
    await applyJw(
      `${example.spec.image}-hotfix3`,
      { historyLimit: 1, strategy: 'Cohort', steps: [{ cohort: { replicas: 1 } }] },
      { minReplicas: 1, maxReplicas: 1 },
      // the abort's drain ends within the 15 s margin
      { shutdown: { drainDeadlineSeconds: 0 } },
    );
    const cohort = await eventually('a cohort', async () => (await jw()).status?.cohort);
    await admin.request(
      'PATCH',
      `/apis/jobfleet.dev/v1alpha1/namespaces/${ns.namespace}/jobworkers/order-shipper`,
      {
        metadata: {
          annotations: {
            'jobfleet.dev/cohort-command': JSON.stringify({
              action: 'abort',
              revision: (cohort as { revision: string }).revision,
              by: 'ops',
              reason: 'rbac test',
            }),
          },
        },
      },
      'application/merge-patch+json',
    );
    await eventually('the aborted cohort’s Deployment deleted', () =>
      Promise.resolve(used.has('apps|deployments|delete') || undefined),
    );
    await admin.apply(
      {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobReplay',
        metadata: { name: 'replay', namespace: ns.namespace },
        spec: {
          jobWorker: 'order-shipper',
          selector: { failureClass: 'permanent' },
          initiator: 'admin', // the test ground's admin user: the chart's policy wants the creator
          reason: 'rbac test',
        },
      },
      'test-user',
    );
    await eventually('the JobReplay to report', async () => {
      const r = await admin.get<Doc>('jobfleet.dev/v1alpha1', 'JobReplay', ns.namespace, 'replay');
      return r.status?.message ? true : undefined;
    });
    // Leader election renews (an update) within a couple of retry periods.
    await eventually('a lease renewal', () =>
      Promise.resolve(used.has('coordination.k8s.io|leases|update') || undefined),
    );
    await op.stop();
    op = undefined;

    const manifest = parseAllDocuments(
      (
        await helm(
          'get',
          'manifest',
          release,
          '--namespace',
          ns.namespace,
          '--kubeconfig',
          ns.kubeconfigPath,
        )
      ).stdout,
    )
      .map((d) => d.toJSON() as Doc)
      .filter(Boolean);
    const granted = triplesOfRules(
      manifest
        // the operator's own roles, not the ones folded into view/edit/admin for people
        .filter((d) => d.kind === 'Role' || (d.kind === 'ClusterRole' && !aggregated(d)))
        .flatMap((d) => d.rules as Rule[]),
    );
    expect(denied).toEqual([]);
    expect(compareRbac(granted, used)).toEqual({ missing: [], unused: [] });

    // The comparison bites both ways: a verb taken away, or one granted for nothing.
    const without = new Set([...granted].filter((t) => t !== 'apps|deployments|patch'));
    expect(compareRbac(without, used).missing).toEqual(['apps|deployments|patch']);
    const extra = new Set<Triple>([...granted, '|secrets|list']);
    expect(compareRbac(extra, used).unused).toEqual(['|secrets|list']);

    await uninstall(release);
  }, 150_000);

  it("a namespace's editors may change its JobWorkers and JobReplays, its viewers only read them (aggregated roles)", async () => {
    const release = await install();
    try {
      // alice edits this namespace, bob views it: the built-in roles, bound as an admin would
      for (const [user, role] of [
        ['alice', 'edit'],
        ['bob', 'view'],
      ] as const)
        await admin.request(
          'POST',
          `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns.namespace}/rolebindings`,
          {
            apiVersion: 'rbac.authorization.k8s.io/v1',
            kind: 'RoleBinding',
            metadata: { name: `${user}-${role}`, namespace: ns.namespace },
            roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role },
            subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
          },
        );
      // What the apiserver's authorizer answers for that user (a SubjectAccessReview).
      const allowed = async (user: string, verb: string, resource: string) => {
        const r = await admin.request<{ status?: { allowed?: boolean } }>(
          'POST',
          '/apis/authorization.k8s.io/v1/subjectaccessreviews',
          {
            apiVersion: 'authorization.k8s.io/v1',
            kind: 'SubjectAccessReview',
            spec: {
              user,
              resourceAttributes: {
                namespace: ns.namespace,
                verb,
                group: 'jobfleet.dev',
                resource,
              },
            },
          },
        );
        return r.status?.allowed === true;
      };
      // The controller manager folds the chart's roles into view/edit/admin shortly after install.
      await eventually('aggregation into edit and view', async () =>
        (await allowed('alice', 'create', 'jobworkers')) &&
        (await allowed('bob', 'list', 'jobworkers'))
          ? true
          : undefined,
      );
      for (const verb of ['get', 'list', 'watch', 'create', 'patch', 'delete'])
        for (const resource of ['jobworkers', 'jobreplays'])
          expect([verb, resource, await allowed('alice', verb, resource)]).toEqual([
            verb,
            resource,
            true,
          ]);
      for (const verb of ['get', 'list', 'watch'])
        expect(await allowed('bob', verb, 'jobworkers')).toBe(true);
      for (const verb of ['create', 'patch', 'delete'])
        expect([verb, await allowed('bob', verb, 'jobworkers')]).toEqual([verb, false]);
      // and nobody else in the namespace gains anything
      expect(await allowed('mallory', 'get', 'jobworkers')).toBe(false);

      // The same through real requests, impersonating each (what kubectl --as does).
      const as = (user: string) =>
        new KubeClient(KubeAccess.fromFile(ns.kubeconfigPath).impersonate(user));
      const example = parse(
        readFileSync(path.join(repoRoot, 'examples/jobworker.yaml'), 'utf8'),
      ) as Doc;
      const jw = { ...example, metadata: { name: 'by-alice', namespace: ns.namespace } };
      await as('alice').apply(jw, 'alice');
      const read = await as('bob').get<Doc>(
        'jobfleet.dev/v1alpha1',
        'JobWorker',
        ns.namespace,
        'by-alice',
      );
      expect(read.metadata.name).toBe('by-alice');
      await expect(
        as('bob').apply({ ...jw, metadata: { ...jw.metadata, name: 'by-bob' } }, 'bob'),
      ).rejects.toThrow(/forbidden/);
      await expect(
        as('mallory').get('jobfleet.dev/v1alpha1', 'JobWorker', ns.namespace, 'by-alice'),
      ).rejects.toThrow(/forbidden/);

      // A JobReplay names who asked for it: alice may not say bob did (the chart's
      // ValidatingAdmissionPolicy), and may say she did.
      const replay = (name: string, initiator: string) => ({
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobReplay',
        metadata: { name, namespace: ns.namespace },
        spec: {
          jobWorker: 'by-alice',
          selector: { failureClass: 'permanent' },
          initiator,
          reason: 'INC-7',
        },
      });
      const refusal = await eventually('the policy in force', () =>
        as('alice')
          .apply(replay('as-bob', 'bob'), 'alice')
          .then(
            async () => {
              await admin.request(
                'DELETE',
                `/apis/jobfleet.dev/v1alpha1/namespaces/${ns.namespace}/jobreplays/as-bob`,
              );
              return undefined;
            },
            (err: Error) => err.message,
          ),
      );
      expect(refusal).toContain(
        'spec.initiator must name you, the user creating this JobReplay: set it to "alice" (it names "bob")',
      );
      await as('alice').apply(replay('as-alice', 'alice'), 'alice');
      const kept = await admin.get<Doc>(
        'jobfleet.dev/v1alpha1',
        'JobReplay',
        ns.namespace,
        'as-alice',
      );
      expect(kept.spec.initiator).toBe('alice');
      // nor may anyone change it afterwards (the CRD keeps a JobReplay's spec as created)
      await expect(
        admin.request(
          'PATCH',
          `/apis/jobfleet.dev/v1alpha1/namespaces/${ns.namespace}/jobreplays/as-alice`,
          { spec: { initiator: 'admin' } },
          'application/merge-patch+json',
        ),
      ).rejects.toThrow(/a JobReplay cannot be changed/);
    } finally {
      await uninstall(release);
    }
  });
});

describe('the Helm chart, upgraded', () => {
  it('helm upgrade from a release whose CRD is older updates the CRD (a field refused before is kept after); uninstall keeps the CRDs and JobWorkers', async () => {
    // A cluster of its own: the CRDs are cluster-wide, and this one installs and changes them.
    const plane = await startControlPlane({ workloads: false });
    try {
      const kube = ['--namespace', 'jobfleet-system', '--kubeconfig', plane.kubeconfigPath];
      const client = new KubeClient(loadKubeConfig(plane.kubeconfigPath));
      // The older release: this chart, its JobWorker CRD without a field added since.
      const old = path.join(mkdtempSync(path.join(os.tmpdir(), 'jobfleet-old-chart-')), 'jobfleet');
      cpSync(CHART, old, { recursive: true });
      // files/crds links to crds/: a copy of its own (cpSync keeps nested links)
      rmSync(path.join(old, 'files/crds'));
      cpSync(path.join(repoRoot, 'crds'), path.join(old, 'files/crds'), { recursive: true });
      const crdFile = path.join(old, 'files/crds/jobfleet.dev_jobworkers.yaml');
      const crd = parse(readFileSync(crdFile, 'utf8')) as Doc;
      const scaling =
        crd.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.scaling;
      expect(scaling.properties.removeIdleFirst).toBeDefined();
      delete scaling.properties.removeIdleFirst;
      delete scaling.default.removeIdleFirst;
      writeFileSync(crdFile, stringify(crd));
      await helm('install', 'jobfleet', old, '--create-namespace', '--set', IMAGE, ...kube);

      await client.apply(
        { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'shipping' } },
        'jobfleet-test',
      );
      const example = parse(
        readFileSync(path.join(repoRoot, 'examples/jobworker.yaml'), 'utf8'),
      ) as Doc;
      /** applies the example with scaling.removeIdleFirst: false: what the apiserver kept, or its refusal */
      const applyWithNewField = async () => {
        try {
          await client.apply(
            {
              ...example,
              metadata: { name: 'order-shipper', namespace: 'shipping' },
              spec: { ...example.spec, scaling: { removeIdleFirst: false } },
            },
            'jobfleet-test',
          );
        } catch (err) {
          return String(err);
        }
        const jw = await client.get<Doc>(
          'jobfleet.dev/v1alpha1',
          'JobWorker',
          'shipping',
          'order-shipper',
        );
        return jw.spec.scaling?.removeIdleFirst as unknown;
      };
      // The stale CRD does not know the field (a non-strict client would see it pruned).
      expect(
        await eventually('the old CRD established', async () => {
          const r = await applyWithNewField();
          // until the CRD is served: a 404 (the bigger the schema, the longer it takes)
          return typeof r === 'string' && /not found|could not find|HTTP 404/.test(r)
            ? undefined
            : r;
        }),
      ).toMatch(/removeIdleFirst: field not declared in schema/);

      await helm('upgrade', 'jobfleet', CHART, '--reuse-values', ...kube);
      const upgraded = await client.get<Doc>(
        'apiextensions.k8s.io/v1',
        'CustomResourceDefinition',
        undefined,
        'jobworkers.jobfleet.dev',
      );
      expect(
        upgraded.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.scaling
          .properties.removeIdleFirst,
      ).toMatchObject({ type: 'boolean' });
      await eventually('the field kept', async () =>
        (await applyWithNewField()) === false ? true : undefined,
      );

      await helm('uninstall', 'jobfleet', ...kube);
      for (const name of ['jobworkers.jobfleet.dev', 'jobreplays.jobfleet.dev'])
        expect(
          (
            await client.get<Doc>(
              'apiextensions.k8s.io/v1',
              'CustomResourceDefinition',
              undefined,
              name,
            )
          ).metadata.name,
        ).toBe(name);
      expect(
        (await client.get<Doc>('jobfleet.dev/v1alpha1', 'JobWorker', 'shipping', 'order-shipper'))
          .spec.scaling,
      ).toMatchObject({ removeIdleFirst: false });
    } finally {
      await plane.stop();
    }
  }, 180_000);
});
