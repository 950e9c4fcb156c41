#!/usr/bin/env node
// The `jobfleet` command. A source checkout runs src/ through tsx (never a
// stale dist/); an installed package, which ships only dist/, runs that.
import { existsSync } from 'node:fs';

const source = new URL('../src/cli/jobfleet.ts', import.meta.url);
if (existsSync(source)) {
  const { register } = await import('tsx/esm/api');
  register();
  await import(source.href);
} else {
  await import(new URL('../dist/src/cli/jobfleet.js', import.meta.url).href);
}
