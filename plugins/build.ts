// `make release`: the kubectl plugin as one file, nothing to install beside it
// (esbuild bundles src/cli/kubectl-jobworker.ts with its dependencies), its
// krew archive with the sha256, and plugins/jobworker.yaml rendered for them.
//
//   node --import tsx plugins/build.ts [--out DIR]     (default dist/release)
//
// Writes DIR/kubectl-jobworker, DIR/kubectl-jobworker_v<version>.tar.gz (the
// file and LICENSE; byte-for-byte the same for the same sources), its .sha256,
// and DIR/jobworker.yaml. Prints the archive's path.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';

/** The plugin's archive, in memory on its way to gzip. */
const ARCHIVE_MAX_BYTES = 64 * 1024 * 1024;

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export interface Release {
  plugin: string;
  archive: string;
  sha256: string;
  manifest: string;
  version: string;
}

export async function buildRelease(out: string): Promise<Release> {
  const { version } = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as {
    version: string;
  };
  const tag = `v${version}`;
  const stage = path.join(out, 'stage');
  rmSync(stage, { recursive: true, force: true });
  mkdirSync(stage, { recursive: true });
  const plugin = path.join(stage, 'kubectl-jobworker');
  await build({
    entryPoints: [path.join(root, 'src/cli/kubectl-jobworker.ts')],
    outfile: plugin,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node22',
    minify: true,
    legalComments: 'none',
    define: { JOBFLEET_VERSION: JSON.stringify(version) },
    // Bundled CommonJS dependencies still call require() for Node's own modules.
    banner: {
      js: "#!/usr/bin/env node\nimport{createRequire as __cr}from'node:module';const require=__cr(import.meta.url);",
    },
    logLevel: 'warning',
  });
  chmodSync(plugin, 0o755);
  copyFileSync(path.join(root, 'LICENSE'), path.join(stage, 'LICENSE'));

  // (execFileSync's default 1 MiB output buffer is smaller than the plugin, a 1 MB bundle.)
  // The same bytes for the same sources: sorted names, fixed times and owners, no gzip name/time.
  const archive = path.join(out, `kubectl-jobworker_${tag}.tar.gz`);
  const tar = execFileSync(
    'tar',
    [
      '--create',
      '--sort=name',
      '--mtime=@0',
      '--owner=0',
      '--group=0',
      '--numeric-owner',
      '--directory',
      stage,
      'kubectl-jobworker',
      'LICENSE',
    ],
    { maxBuffer: ARCHIVE_MAX_BYTES },
  );
  writeFileSync(
    archive,
    execFileSync('gzip', ['-n', '-9'], { input: tar, maxBuffer: ARCHIVE_MAX_BYTES }),
  );
  const sha256 = createHash('sha256').update(readFileSync(archive)).digest('hex');
  writeFileSync(`${archive}.sha256`, `${sha256}  ${path.basename(archive)}\n`);
  copyFileSync(plugin, path.join(out, 'kubectl-jobworker'));
  chmodSync(path.join(out, 'kubectl-jobworker'), 0o755);
  rmSync(stage, { recursive: true });

  // krew-release-bot's template, filled in as it would be for this tag.
  const manifest = path.join(out, 'jobworker.yaml');
  const template = readFileSync(path.join(root, 'plugins/jobworker.yaml'), 'utf8');
  writeFileSync(
    manifest,
    template
      .replace(/\{\{addURIAndSha "([^"]+)" \.TagName \}\}/, (_, uri: string) => {
        const indent = /\n( *)\{\{addURIAndSha/.exec(template)![1]!;
        return `uri: ${uri.replaceAll('{{ .TagName }}', tag)}\n${indent}sha256: ${sha256}`;
      })
      .replaceAll('{{ .TagName }}', tag),
  );
  return { plugin: path.join(out, 'kubectl-jobworker'), archive, sha256, manifest, version };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { out: { type: 'string' } } });
  const r = await buildRelease(path.resolve(values.out ?? path.join(root, 'dist/release')));
  console.log(r.archive);
}
