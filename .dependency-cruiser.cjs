// The layers of jobfleet, bottom to top; each imports only downward
// (docs/architecture.md draws them from this file: make docs-diagram).
//
//   worker/          the worker runtime, and the contract it shares with the operator;
//                    worker/in-doubt/ (in-doubt runs) and worker/outbox/ (the transactional
//                    outbox) below the delivery, each entered by its index
//   src/api/         the custom resources' types and schemas, the reasons catalog
//   src/reconcile/   pure decisions, no I/O: model/ below children/, scaling/,
//                    cohort/, rollout/, status/, broker/; plan.ts composes them
//   src/kube/ src/signals/ src/dlq/ src/metrics.ts
//                    the edges: Kubernetes, RabbitMQ, PostgreSQL, Prometheus
//   src/controller/  the shell: observe, plan, apply, write status
//   src/cli/ src/operator.ts src/main.ts
//                    the entry points
//   src/tools/       build tools: the CRDs and the reference pages
//
// `make lint` runs these rules; test/unit/dependency-rules.test.ts shows them refusing.
const CONCERNS = '(model|children|scaling|cohort|rollout|status|broker)';
/** Each concern of src/reconcile/, and the concerns it may import (docs/architecture.md). */
const CONCERN_ORDER = {
  model: [],
  children: ['model'],
  scaling: ['model'],
  cohort: ['model', 'scaling'],
  rollout: ['model', 'children', 'scaling', 'cohort'],
  status: ['model', 'children', 'scaling', 'rollout'],
  broker: ['model'],
};

/** A rule: imports from `from` to `to` are refused, with why. */
const forbid = (name, comment, from, to) => ({ name, comment, severity: 'error', from, to });
const ENTRY_POINTS = '^src/(cli/|tools/|operator[.]ts|main[.]ts)';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    forbid(
      'no-circular',
      'An import circle: the modules in it cannot be understood (or tested) one at a time.',
      { path: '^(src|worker)/' },
      { circular: true },
    ),
    forbid(
      'worker-imports-nothing-of-the-operator',
      'worker/ is the library user images run: it cannot depend on the operator.',
      { path: '^worker/' },
      { path: '^src/' },
    ),
    forbid(
      'worker-rooms-open-by-their-index',
      'A room of worker/ (worker/in-doubt/, worker/outbox/) is entered through its index.ts, its only door.',
      { path: '^(src/|worker/(?!(in-doubt|outbox)/))' },
      { path: '^worker/(in-doubt|outbox)/(?!index[.]ts$)' },
    ),
    forbid(
      'outbox-stands-below-the-delivery',
      'worker/outbox/ enqueues and relays: the delivery, the worker and the claim store call it, never the other way (it may use the envelope rendering, the migrations runner, backoff and broker addresses).',
      { path: '^worker/outbox/' },
      {
        path: '^(src/|worker/)',
        pathNot:
          '^worker/(outbox/|producer[.]ts$|migrate[.]ts$|backoff[.]ts$|broker-urls[.]ts$|envelope[.]ts$)',
      },
    ),
    forbid(
      'in-doubt-stands-below-the-delivery',
      'worker/in-doubt/ decides and records in-doubt runs: the delivery, the worker and the claim store call it, never the other way (it may read worker/storable.ts).',
      { path: '^worker/in-doubt/' },
      { path: '^(src/|worker/(?!in-doubt/|storable[.]ts$))' },
    ),
    forbid(
      'api-imports-only-the-worker-contract',
      'src/api/ is the types and schemas: everything else stands on it.',
      { path: '^src/api/' },
      { path: '^src/', pathNot: '^src/api/' },
    ),
    forbid(
      'reconcile-imports-only-api',
      'src/reconcile/ decides, without I/O: it may read the API types and nothing else of the project.',
      { path: '^src/reconcile/' },
      { path: '^(src|worker)/', pathNot: '^src/(reconcile|api)/' },
    ),
    forbid(
      'concerns-open-by-their-index',
      'A concern of src/reconcile/ is entered through its index.ts, its only door.',
      { path: `^src/reconcile/${CONCERNS}/` },
      { path: `^src/reconcile/${CONCERNS}/(?!index[.]ts$)`, pathNot: '^src/reconcile/$1/' },
    ),
    forbid(
      'the-rest-enters-reconcile-by-the-doors',
      'A concern of src/reconcile/ is entered through its index.ts, its only door.',
      { path: '^src/', pathNot: `^src/reconcile/${CONCERNS}/` },
      { path: `^src/reconcile/${CONCERNS}/(?!index[.]ts$)` },
    ),
    ...Object.entries(CONCERN_ORDER).map(([concern, below]) =>
      forbid(
        `${concern}-imports-only-concerns-below-it`,
        'Inside src/reconcile/, each concern imports only those below it; plan.ts composes them.',
        { path: `^src/reconcile/${concern}/` },
        { path: '^src/reconcile/', pathNot: `^src/reconcile/(${[concern, ...below].join('|')})/` },
      ),
    ),
    forbid(
      'edges-never-import-the-shell',
      'The edges (kube, signals, dlq, metrics) are called by the shell, never the other way.',
      { path: '^src/(kube/|signals/|dlq/|metrics[.]ts)' },
      { path: `${ENTRY_POINTS}|^src/controller/` },
    ),
    forbid(
      'controller-never-imports-entry-points',
      'The controller is started by the operator process, never the other way.',
      { path: '^src/controller/' },
      { path: ENTRY_POINTS },
    ),
    forbid(
      'cli-never-imports-the-controller',
      'The command lines talk to the cluster as a user does, not through the operator’s internals.',
      { path: '^src/cli/' },
      { path: `${ENTRY_POINTS}|^src/controller/`, pathNot: '^src/cli/' },
    ),
    forbid(
      'nothing-runs-on-build-tools',
      'src/tools/ builds the CRDs and the docs; the operator and the worker never run it.',
      { path: '^(src|worker)/', pathNot: '^src/tools/' },
      { path: '^src/tools/' },
    ),
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(node_modules|dist)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};
