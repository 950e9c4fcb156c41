#!/usr/bin/env node
// The kubectl plugin `kubectl jobworker`. A source checkout runs src/ through tsx (never a
// stale dist/); an installed package, which ships only dist/, runs that.
import { existsSync } from 'node:fs';

const source = new URL('../src/cli/kubectl-jobworker.ts', import.meta.url);
if (existsSync(source)) {
  const { register } = await import('tsx/esm/api');
  register();
  await import(source.href);
} else {
  await import(new URL('../dist/src/cli/kubectl-jobworker.js', import.meta.url).href);
}
