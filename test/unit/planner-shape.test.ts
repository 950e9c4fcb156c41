// The planner stays readable as phases: no function in src/reconcile/ grows
// past 80 lines (a rule that is broken by adding one more branch to a phase
// instead of a phase of its own). Fails naming each function and its length.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../ground/control-plane.js';

const MAX_LINES = 80;

/** Every function, method and arrow function with a body longer than `max` lines, as file:line name (n lines). */
export function longFunctions(file: string, text: string, max: number): string[] {
  const src = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const long: string[] = [];
  const visit = (n: ts.Node) => {
    if (ts.isFunctionLike(n) && 'body' in n && n.body) {
      const from = src.getLineAndCharacterOfPosition(n.getStart()).line;
      const lines = src.getLineAndCharacterOfPosition(n.end).line - from + 1;
      const name = n.name?.getText(src) ?? '(anonymous)';
      if (lines > max) long.push(`${file}:${from + 1} ${name} (${lines} lines)`);
    }
    ts.forEachChild(n, visit);
  };
  visit(src);
  return long;
}

describe('src/reconcile/', () => {
  it(`has no function over ${MAX_LINES} lines`, () => {
    const dir = path.join(repoRoot, 'src/reconcile');
    const long = readdirSync(dir)
      .filter((f) => f.endsWith('.ts'))
      .flatMap((f) =>
        longFunctions(`src/reconcile/${f}`, readFileSync(path.join(dir, f), 'utf8'), MAX_LINES),
      );
    expect(long).toEqual([]);
  });

  it('the check finds a long function', () => {
    const body = Array.from({ length: MAX_LINES }, (_, i) => `  const x${i} = ${i};`).join('\n');
    expect(longFunctions('x.ts', `function phase() {\n${body}\n}\n`, MAX_LINES)).toEqual([
      `x.ts:1 phase (${MAX_LINES + 2} lines)`,
    ]);
  });
});
