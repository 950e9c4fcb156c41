// The layers (.dependency-cruiser.cjs, run by `make lint`) hold in the tree,
// and the rules refuse what they say they refuse: a scratch tree with an
// import circle, an upward import and a side door into a concern of
// src/reconcile/ is cruised with the project's own rules. The picture of the
// layers (docs/layers.svg) is drawn from docs/layers.dot, which
// must be what the imports are today.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../ground/control-plane.js';

const RULES = path.join(repoRoot, '.dependency-cruiser.cjs');
const DEPCRUISE = path.join(repoRoot, 'node_modules/dependency-cruiser/bin/dependency-cruiser.mjs');

interface Violation {
  rule: { name: string };
  from: string;
  to: string;
  cycle?: Array<{ name: string }>;
}

/** The rules' violations in `dir` (its src/ and worker/), as dependency-cruiser reports them. */
function cruise(dir: string, ...extra: string[]): Violation[] {
  let out: string;
  try {
    out = execFileSync(
      process.execPath,
      [DEPCRUISE, 'src', 'worker', '--config', RULES, '--output-type', 'json', ...extra],
      { cwd: dir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
    );
  } catch (e) {
    // it exits non-zero when a rule is broken, the report still on stdout
    out = (e as { stdout: string }).stdout;
  }
  return (JSON.parse(out) as { summary: { violations: Violation[] } }).summary.violations;
}

/** The layers' picture source, as `make docs-architecture` writes it. */
export function architectureDot(): string {
  return execFileSync(
    process.execPath,
    [
      DEPCRUISE,
      'src',
      'worker',
      '--config',
      RULES,
      '--include-only',
      '^(src|worker)/',
      '--collapse',
      '^(src/reconcile/[^/]+/|src/(?!reconcile/)[^/]+/|worker/)',
      '--output-type',
      'dot',
    ],
    { cwd: repoRoot, encoding: 'utf8' },
  );
}

describe('the layers', () => {
  const scratch = mkdtempSync(path.join(tmpdir(), 'jobfleet-layers-'));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));
  const write = (file: string, text: string) => {
    mkdirSync(path.dirname(path.join(scratch, file)), { recursive: true });
    writeFileSync(path.join(scratch, file), text);
  };

  // Each cruise reads the whole tree (seconds; ten on a loaded machine): a minute's allowance.
  it('hold in the tree: no circle, no upward import, every concern entered by its index', () => {
    expect(cruise(repoRoot).map((v) => `${v.rule.name}: ${v.from} → ${v.to}`)).toEqual([]);
  }, 60_000);

  it('refuse an import circle, an upward import and a side door into a concern', () => {
    write(
      'tsconfig.json',
      JSON.stringify({ compilerOptions: { module: 'nodenext', moduleResolution: 'nodenext' } }),
    );
    write('src/reconcile/model/a.ts', "import { b } from './b.js';\nexport const a = () => b;\n");
    write('src/reconcile/model/b.ts', "import { a } from './a.js';\nexport const b = () => a;\n");
    write(
      'src/api/types.ts',
      "import { run } from '../controller/run.js';\nexport const t = run;\n",
    );
    write(
      'src/controller/run.ts',
      "import { a } from '../reconcile/model/a.js';\nexport const run = a;\n",
    );
    write(
      'src/reconcile/status/s.ts',
      "import { b } from '../model/b.js';\nimport { k } from '../../kube/k.js';\nexport const s = [b, k];\n",
    );
    write('src/kube/k.ts', 'export const k = 1;\n');
    write('worker/index.ts', 'export const w = 1;\n');
    write('worker/in-doubt/index.ts', "export { d } from './decide.js';\n");
    write(
      'worker/in-doubt/decide.ts',
      "import { w } from '../delivery.js';\nexport const d = w;\n",
    );
    write(
      'worker/delivery.ts',
      "import { d } from './in-doubt/decide.js';\nimport { r } from './outbox/relay.js';\nexport const w = [d, r];\n",
    );
    write('worker/outbox/index.ts', "export { r } from './relay.js';\n");
    write('worker/outbox/relay.ts', "import { w } from '../worker.js';\nexport const r = w;\n");
    write('worker/worker.ts', 'export const w = 1;\n');
    const found = cruise(scratch).map((v) => `${v.rule.name}: ${v.from} → ${v.to}`);
    expect(found).toEqual(
      expect.arrayContaining([
        'no-circular: src/reconcile/model/a.ts → src/reconcile/model/b.ts',
        'api-imports-only-the-worker-contract: src/api/types.ts → src/controller/run.ts',
        'the-rest-enters-reconcile-by-the-doors: src/controller/run.ts → src/reconcile/model/a.ts',
        'concerns-open-by-their-index: src/reconcile/status/s.ts → src/reconcile/model/b.ts',
        'reconcile-imports-only-api: src/reconcile/status/s.ts → src/kube/k.ts',
        'worker-rooms-open-by-their-index: worker/delivery.ts → worker/in-doubt/decide.ts',
        'in-doubt-stands-below-the-delivery: worker/in-doubt/decide.ts → worker/delivery.ts',
        'worker-rooms-open-by-their-index: worker/delivery.ts → worker/outbox/relay.ts',
        'outbox-stands-below-the-delivery: worker/outbox/relay.ts → worker/worker.ts',
      ]),
    );
  }, 60_000);

  it('are drawn as they are: docs/layers.dot is the imports of today (make docs-architecture)', () => {
    expect(readFileSync(path.join(repoRoot, 'docs/layers.dot'), 'utf8')).toBe(architectureDot());
  }, 60_000);
});
