// The code stays readable as steps: no function in src/ or worker/ grows past
// 80 lines (a rule that is broken by adding one more branch to a step instead
// of a step of its own). Declaration tables are the one exception, each named
// here. Fails naming each function and its length.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../ground/control-plane.js';

const MAX_LINES = 80;

/** Tables of declarations, one entry after another, no logic: the metrics each process exports. */
const TABLES = [
  { file: 'src/metrics.ts', name: 'operatorMetrics' },
  { file: 'worker/metrics.ts', name: 'workerMetrics' },
];

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

describe('src/ and worker/', () => {
  it(`have no function over ${MAX_LINES} lines (the declaration tables aside)`, () => {
    const long = ['src', 'worker'].flatMap((dir) =>
      readdirSync(path.join(repoRoot, dir), { recursive: true, encoding: 'utf8' })
        .filter((f) => f.endsWith('.ts') && !f.split(path.sep).includes('node_modules'))
        .flatMap((f) => {
          const file = `${dir}/${f.split(path.sep).join('/')}`;
          return longFunctions(file, readFileSync(path.join(repoRoot, file), 'utf8'), MAX_LINES);
        }),
    );
    const tables = long.filter((l) =>
      TABLES.some((t) => l.startsWith(`${t.file}:`) && l.includes(` ${t.name} (`)),
    );
    expect(long.filter((l) => !tables.includes(l))).toEqual([]);
    // each exception still is one: a table that shrank below the limit leaves the list
    expect(tables).toHaveLength(TABLES.length);
  });

  it('the check finds a long function', () => {
    const body = Array.from({ length: MAX_LINES }, (_, i) => `  const x${i} = ${i};`).join('\n');
    expect(longFunctions('x.ts', `function phase() {\n${body}\n}\n`, MAX_LINES)).toEqual([
      `x.ts:1 phase (${MAX_LINES + 2} lines)`,
    ]);
  });
});
