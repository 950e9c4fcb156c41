// The layers of jobfleet, bottom to top; each imports only downward
// (docs/architecture.md draws them from this file: make docs-diagram).
//
//   worker/          the worker runtime, and the contract it shares with the operator
//   src/api/         the custom resources' types and schemas, the reasons catalog
//   src/reconcile/   pure decisions, no I/O: model/ below children/, scaling/,
//                    cohort/, rollout/, status/; plan.ts composes them
//   src/kube/ src/signals/ src/dlq/ src/metrics.ts
//                    the edges: Kubernetes, RabbitMQ, PostgreSQL, Prometheus
//   src/controller/  the shell: observe, plan, apply, write status
//   src/cli/ src/operator.ts src/main.ts
//                    the entry points
//   src/tools/       build tools: the CRDs and the reference pages
//
// `make lint` runs these rules; test/unit/dependency-rules.test.ts shows them refusing.
const CONCERNS = '(model|children|scaling|cohort|rollout|status)';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment:
        'An import circle: the modules in it cannot be understood (or tested) one at a time.',
      from: { path: '^(src|worker)/' },
      to: { circular: true },
    },
    {
      name: 'worker-imports-nothing-of-the-operator',
      severity: 'error',
      comment: 'worker/ is the library user images run: it cannot depend on the operator.',
      from: { path: '^worker/' },
      to: { path: '^src/' },
    },
    {
      name: 'api-imports-only-the-worker-contract',
      severity: 'error',
      comment: 'src/api/ is the types and schemas: everything else stands on it.',
      from: { path: '^src/api/' },
      to: { path: '^src/', pathNot: '^src/api/' },
    },
    {
      name: 'reconcile-imports-only-api',
      severity: 'error',
      comment:
        'src/reconcile/ decides, without I/O: it may read the API types and nothing else of the project.',
      from: { path: '^src/reconcile/' },
      to: { path: '^(src|worker)/', pathNot: '^src/(reconcile|api)/' },
    },
    {
      name: 'concerns-open-by-their-index',
      severity: 'error',
      comment: 'A concern of src/reconcile/ is entered through its index.ts, its only door.',
      from: { path: `^src/reconcile/${CONCERNS}/` },
      to: { path: `^src/reconcile/${CONCERNS}/(?!index[.]ts$)`, pathNot: '^src/reconcile/$1/' },
    },
    {
      name: 'the-rest-enters-reconcile-by-the-doors',
      severity: 'error',
      comment: 'A concern of src/reconcile/ is entered through its index.ts, its only door.',
      from: { path: '^src/', pathNot: `^src/reconcile/${CONCERNS}/` },
      to: { path: `^src/reconcile/${CONCERNS}/(?!index[.]ts$)` },
    },
    {
      name: 'model-is-below-every-concern',
      severity: 'error',
      comment:
        'Inside src/reconcile/: model/, then children/ and scaling/, cohort/, rollout/, status/; plan.ts composes them.',
      from: { path: '^src/reconcile/model/' },
      to: { path: '^src/reconcile/', pathNot: '^src/reconcile/model/' },
    },
    {
      name: 'children-and-scaling-stand-on-model-alone',
      severity: 'error',
      from: { path: '^src/reconcile/(children|scaling)/' },
      to: { path: '^src/reconcile/', pathNot: '^src/reconcile/(model|$1)/' },
    },
    {
      name: 'cohort-stands-on-scaling-and-model',
      severity: 'error',
      from: { path: '^src/reconcile/cohort/' },
      to: { path: '^src/reconcile/', pathNot: '^src/reconcile/(model|scaling|cohort)/' },
    },
    {
      name: 'rollout-below-status-and-both-below-the-plan',
      severity: 'error',
      from: { path: '^src/reconcile/(rollout|status)/' },
      to: { path: '^src/reconcile/(plan[.]ts$|status/)', pathNot: '^src/reconcile/$1/' },
    },
    {
      name: 'edges-never-import-the-shell',
      severity: 'error',
      comment:
        'The edges (kube, signals, dlq, metrics) are called by the shell, never the other way.',
      from: { path: '^src/(kube/|signals/|dlq/|metrics[.]ts)' },
      to: { path: '^src/(controller/|cli/|tools/|operator[.]ts|main[.]ts)' },
    },
    {
      name: 'controller-never-imports-entry-points',
      severity: 'error',
      from: { path: '^src/controller/' },
      to: { path: '^src/(cli/|tools/|operator[.]ts|main[.]ts)' },
    },
    {
      name: 'cli-never-imports-the-controller',
      severity: 'error',
      comment:
        'The command lines talk to the cluster like a user does, not through the operator’s internals.',
      from: { path: '^src/cli/' },
      to: { path: '^src/(controller/|tools/|operator[.]ts|main[.]ts)' },
    },
    {
      name: 'nothing-runs-on-build-tools',
      severity: 'error',
      from: { path: '^(src|worker)/', pathNot: '^src/tools/' },
      to: { path: '^src/tools/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(node_modules|dist)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};
