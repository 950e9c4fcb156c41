// The two npm packages as users get them: `npm pack` of the worker library
// (@jobfleet/worker, the worker/ workspace) and of the operator with its CLIs
// (jobfleet), each built by its own prepack from this checkout; the tarballs
// installed into scratch projects (their dependencies from the npm registry or
// its local cache); the worker API imported on the pinned Node; every
// TypeScript example of the docs (one file per page) type-checked against the
// installed types under `strict` and `skipLibCheck: false`, with NodeNext and
// node10 resolution.
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { docBlocks } from '../fixtures/doc-blocks.js';
import { npmInstall, pack, run, tsc, type Packed } from '../fixtures/npm.js';
import { repoRoot } from '../ground/control-plane.js';

/** A scratch project with these tarballs installed, as `npm install <tarball>` does it. */
async function scratch(work: string, name: string, tarballs: string[]): Promise<string> {
  const dir = path.join(work, name);
  mkdirSync(dir);
  writeFileSync(
    path.join(dir, 'package.json'),
    JSON.stringify({ name, private: true, type: 'module' }),
  );
  await npmInstall(tarballs, dir);
  return dir;
}

/**
 * Every TypeScript block a reader copies (README, docs/, the worker's and the
 * template's READMEs): one file per page, its blocks in order, named after it.
 */
function docsSnippets(): Array<{ file: string; page: string; source: string }> {
  const pages = ['README.md', 'worker/README.md', 'examples/worker-template/README.md'];
  const walk = (dir: string): string[] =>
    readdirSync(path.join(repoRoot, dir), { withFileTypes: true }).flatMap((e) =>
      e.isDirectory()
        ? walk(path.join(dir, e.name))
        : e.name.endsWith('.md')
          ? [path.join(dir, e.name)]
          : [],
    );
  return [...pages, ...walk('docs')].flatMap((page) => {
    const blocks = docBlocks(page, readFileSync(path.join(repoRoot, page), 'utf8')).filter((b) =>
      ['ts', 'typescript'].includes(b.lang),
    );
    if (!blocks.length) return [];
    const file = `${page.replace(/\.md$/, '').replace(/[^\w]+/g, '-')}.ts`;
    return [{ file, page, source: `${blocks.map((b) => b.body).join('\n')}\nexport {};\n` }];
  });
}

const tsconfig = (resolution: 'nodenext' | 'node10', files: string[]) => ({
  compilerOptions: {
    strict: true,
    skipLibCheck: false,
    noEmit: true,
    target: 'es2022',
    ...(resolution === 'nodenext'
      ? { module: 'nodenext', moduleResolution: 'nodenext' }
      : // node10 projects set esModuleInterop (as `tsc --init` does): zod's and pino's own types need it
        { module: 'es2022', moduleResolution: 'node10', esModuleInterop: true }),
  },
  files,
});

// An install may fetch from the registry (a fresh machine's npm cache lacks
// the tarballs' dependencies): a test may take as long as its commands in a
// row may (each has 240 s).
describe('the npm packages, packed and installed', { timeout: 600_000 }, () => {
  let work: string;
  let worker: Packed;
  let operator: Packed;
  beforeAll(async () => {
    work = mkdtempSync(path.join(os.tmpdir(), 'jobfleet-packages-'));
    worker = await pack(['--workspace', 'worker'], work);
    operator = await pack([], work);
  }, 480_000);

  it('each tarball holds its built code, its types (the library), LICENSE and README — no sources, no tests', () => {
    const names = (p: Packed) => p.files.map((f) => f.path);
    expect(names(worker)).toEqual(
      expect.arrayContaining([
        'LICENSE',
        'README.md',
        'package.json',
        'dist/index.js',
        'dist/index.d.ts',
        'dist/worker.js',
      ]),
    );
    expect(names(operator)).toEqual(
      expect.arrayContaining([
        'LICENSE',
        'README.md',
        'bin/jobfleet.mjs',
        'bin/kubectl-jobworker.mjs',
        'dist/src/main.js',
        'dist/src/cli/kubectl-jobworker.js',
        'crds/jobfleet.dev_jobworkers.yaml',
      ]),
    );
    for (const p of [worker, operator])
      expect(
        names(p).filter((f) => /(^|\/)test\/|(?<!\.d)\.ts$|\.map$|^dist\/release/.test(f)),
      ).toEqual([]);
  });

  it('the worker library installs alone (no Kubernetes client, no operator), imports on the pinned Node, and every TypeScript example of the docs type-checks against its types under strict with NodeNext and node10', async () => {
    const dir = await scratch(work, 'team-worker', [worker.filename]);
    expect(existsSync(path.join(dir, 'node_modules/@kubernetes'))).toBe(false);
    expect(existsSync(path.join(dir, 'node_modules/jobfleet'))).toBe(false);

    const imported = await run(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        "const w = await import('@jobfleet/worker'); console.log(JSON.stringify(Object.fromEntries(Object.entries(w).map(([k, v]) => [k, typeof v]))))",
      ],
      dir,
    );
    expect(imported.code, imported.stderr).toBe(0);
    expect(JSON.parse(imported.stdout)).toMatchObject({
      createWorker: 'function',
      publish: 'function',
      Permanent: 'function',
      Throttled: 'function',
      loadConfig: 'function',
    });

    // Each page's examples, and the transactional client typed (not `any`, as missing @types/pg made it).
    const snippets = docsSnippets();
    expect(snippets.map((x) => x.page)).toEqual(
      expect.arrayContaining([
        'docs/worker.md',
        'docs/how-to/write-a-worker.md',
        'worker/README.md',
      ]),
    );
    for (const x of snippets) writeFileSync(path.join(dir, x.file), x.source);
    writeFileSync(
      path.join(dir, 'example.ts'),
      `import type { HandlerContext } from '@jobfleet/worker';
type IsAny<T> = 0 extends 1 & T ? true : false;
export const txIsTyped: IsAny<NonNullable<HandlerContext['tx']>> = false;
`,
    );
    // A mistake the types must catch: proof that they were read, not skipped.
    writeFileSync(
      path.join(dir, 'mistake.ts'),
      `import { createWorker } from '@jobfleet/worker';
createWorker({ contract: { keyRule: 42, schemaVersions: [1] }, handlers: {} });
`,
    );
    for (const resolution of ['nodenext', 'node10'] as const) {
      writeFileSync(
        path.join(dir, `tsconfig.${resolution}.json`),
        JSON.stringify(tsconfig(resolution, ['example.ts', ...snippets.map((x) => x.file)])),
      );
      const ok = await tsc(`tsconfig.${resolution}.json`, dir);
      expect([resolution, ok.stdout]).toEqual([resolution, '']);
      expect(ok.code).toBe(0);
      writeFileSync(
        path.join(dir, `tsconfig.mistake.${resolution}.json`),
        JSON.stringify(tsconfig(resolution, ['mistake.ts'])),
      );
      const caught = await tsc(`tsconfig.mistake.${resolution}.json`, dir);
      expect(caught.stdout).toMatch(
        /mistake\.ts.*error TS2322: Type 'number' is not assignable to type 'string'/,
      );
    }
  });

  it('the operator package installs with its two commands on PATH, both runnable from the tarball alone', async () => {
    const dir = await scratch(work, 'platform-team', [operator.filename]);
    const bin = (name: string) => path.join(dir, 'node_modules/.bin', name);
    const version = await run(bin('kubectl-jobworker'), ['version'], dir);
    const pkg = JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as {
      version: string;
    };
    expect(version).toMatchObject({ code: 0, stdout: `kubectl-jobworker ${pkg.version}\n` });
    const help = await run(bin('jobfleet'), ['--help'], dir);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/verify .*\n\s+dlq /);
  });
});
