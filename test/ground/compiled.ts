// The compiled code, as the images run it (`node dist/...`): the operator
// bench and the dev ground run it rather than the TypeScript sources under
// tsx, which costs CPU and memory the product does not pay. Built with the
// project's own `tsc -p tsconfig.build.json` (what `make build` and the
// Dockerfile run) whenever a source is newer than its output.
import { execFileSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { repoRoot } from './control-plane.js';

/** Outputs known to be newer than every source, in this process. */
const built = new Set<string>();

/** The directories tsconfig.build.json compiles. */
const SOURCES = ['src', 'worker', 'examples/worker'];

function newestSourceMs(dir: string): number {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) newest = Math.max(newest, newestSourceMs(p));
    else if (e.name.endsWith('.ts')) newest = Math.max(newest, statSync(p).mtimeMs);
  }
  return newest;
}

const mtimeMs = (p: string) => {
  try {
    return statSync(p).mtimeMs;
  } catch {
    return 0;
  }
};

/**
 * The path of `entry`'s compiled output (e.g. src/main.ts → dist/src/main.js),
 * building first when it is missing or older than any source.
 */
export function compiled(entry: string): string {
  const out = path.join(repoRoot, 'dist', entry.replace(/\.ts$/, '.js'));
  // checked once per process: the dev ground asks at every pod start
  if (built.has(out)) return out;
  const newest = Math.max(...SOURCES.map((d) => newestSourceMs(path.join(repoRoot, d))));
  if (mtimeMs(out) < newest) {
    const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
    execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], {
      cwd: repoRoot,
      stdio: 'inherit',
    });
  }
  built.add(out);
  return out;
}
