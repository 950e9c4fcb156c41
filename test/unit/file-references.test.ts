// Comments that point at a file (`src/reconcile/plan.ts`, `docs/scaling.md`,
// or one relative to the comment's own file) point at one that exists: a file
// that moves takes its references with it, or this fails naming each stale one.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../ground/control-plane.js';

const REF =
  /(?<![\w/.-])((?:\.\.?\/)+[\w./-]+\.(?:ts|sh|md|yaml)|(?:src|worker|test|bench|docs|examples|charts|crds)\/[\w./-]+\.(?:ts|sh|md|yaml|mjs|svg))/g;

/** Comment lines only: imports are the compiler's to check. */
const isComment = (line: string) => /^\s*(\/\/|\*|\/\*\*?)/.test(line) || / \/\/ /.test(line);

describe('file references in comments', () => {
  it('name files that exist', () => {
    const files = execFileSync('git', ['ls-files', 'src', 'worker', 'test', 'bench', 'examples'], {
      cwd: repoRoot,
      encoding: 'utf8',
    })
      .split('\n')
      .filter((f) => f.endsWith('.ts'));
    const stale: string[] = [];
    for (const f of files) {
      const lines = readFileSync(path.join(repoRoot, f), 'utf8').split('\n');
      lines.forEach((line, n) => {
        if (!isComment(line)) return;
        for (const [, ref] of line.matchAll(REF)) {
          // another repository's path, said as such
          if (/ in [\w-]+\/[\w.-]+\)/.test(line)) continue;
          const target = ref!.startsWith('.')
            ? path.join(path.dirname(f), ref!)
            : ref!.replace(/\.js$/, '.ts');
          if (!existsSync(path.join(repoRoot, target))) stale.push(`${f}:${n + 1}: ${ref}`);
        }
      });
    }
    expect(stale).toEqual([]);
  });
});
