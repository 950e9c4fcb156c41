// How the docs-run project reads a page: the blocks it runs, the ones marked
// as illustrations and why, the commands and the output a console block shows.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../ground/control-plane.js';
import {
  blockCommands,
  docBlocks,
  isShell,
  pageOrder,
  showsOutput,
} from '../fixtures/doc-blocks.js';

const page = [
  '# A page',
  '',
  '```sh',
  'kubectl get jw -n shipping   # the row',
  'kubectl patch jw x --type merge -p \'{"a":"#b"}\' \\',
  '  -n shipping',
  '```',
  '',
  '_Illustration, not run: it needs a second cluster._',
  '',
  '```sh',
  'kubectl --context other get jw',
  '```',
  '',
  '1. A step',
  '   ```console',
  '   $ kubectl apply -f jw.yaml',
  '   The JobWorker "x" is invalid: …',
  '   ```',
  '',
  '```yaml',
  '# jw.yaml',
  'kind: JobWorker',
  '```',
].join('\n');

describe('docBlocks', () => {
  const blocks = docBlocks('docs/page.md', page);

  it('finds each block with its line, language and indentation removed', () => {
    expect(blocks.map((b) => [b.line, b.lang])).toEqual([
      [3, 'sh'],
      [11, 'sh'],
      [16, 'console'],
      [21, 'yaml'],
    ]);
    expect(blocks[2]!.body).toBe('$ kubectl apply -f jw.yaml\nThe JobWorker "x" is invalid: …');
    expect(blocks.filter(isShell)).toHaveLength(3);
  });

  it('reads the illustration marker above a fence, with its reason', () => {
    expect(blocks.map((b) => b.illustration)).toEqual([
      undefined,
      'it needs a second cluster',
      undefined,
      undefined,
    ]);
  });

  it('reads a marker prettier wrapped over lines, and none from prose that merely precedes a block', () => {
    const page =
      '_Illustration, not run: `-w` never ends;\nthe test watches it._\n\n```console\n$ ls\n```\n\nText.\n```sh\nls\n```';
    expect(docBlocks('a.md', page).map((b) => b.illustration)).toEqual([
      '`-w` never ends; the test watches it',
      undefined,
    ]);
  });

  it('refuses a marker without its reason, naming the line', () => {
    expect(
      docBlocks('a.md', '*Illustration, not run: typed.*\n```sh\nls\n```')[0]!.illustration,
    ).toBe('typed');
    expect(() => docBlocks('a.md', '*Illustration*\n```sh\nls\n```')).toThrow(
      /^a\.md:1: an illustration marker reads/,
    );
    expect(() => docBlocks('a.md', '```sh\nls\n')).toThrow('a.md:1: a fence that never closes');
  });

  it('names the file a yaml block is written to', () => {
    expect(blocks[3]!.writes).toBe('jw.yaml');
    expect(docBlocks('a.md', '```yaml\nkind: X\n```')[0]!.writes).toBeUndefined();
  });

  it('splits commands: continuations joined, comments dropped but not a # inside quotes', () => {
    expect(blockCommands(blocks[0]!)).toEqual([
      { command: 'kubectl get jw -n shipping', line: 4 },
      { command: 'kubectl patch jw x --type merge -p \'{"a":"#b"}\' -n shipping', line: 5 },
    ]);
    expect(blockCommands(blocks[2]!)).toEqual([
      {
        command: 'kubectl apply -f jw.yaml',
        line: 17,
        shown: ['The JobWorker "x" is invalid: …'],
      },
    ]);
  });

  it("reads the exit status a command's comment promises, on its last continuation line", () => {
    const [block] = docBlocks(
      'a.md',
      '```sh\nkubectl jobworker dlq replay x \\\n  --wait   # exits 1 when any fails again\nkubectl get jw   # exits happily\n```',
    );
    expect(blockCommands(block!)).toEqual([
      { command: 'kubectl jobworker dlq replay x --wait', line: 2, exits: 1 },
      { command: 'kubectl get jw', line: 4 },
    ]);
  });
});

describe('showsOutput', () => {
  it('finds the shown lines in order, spaces collapsed, … for anything', () => {
    const printed = 'NAME   DESIRED\norder-shipper    3\nThe JobWorker "x" is invalid: spec.image';
    expect(showsOutput(['NAME DESIRED', 'order-shipper 3'], printed)).toBeUndefined();
    expect(showsOutput(['The JobWorker "x" is invalid: …'], printed)).toBeUndefined();
    expect(showsOutput(['order-shipper 4'], printed)).toBe('order-shipper 4');
    expect(showsOutput(['order-shipper 3', 'NAME DESIRED'], printed)).toBe('NAME DESIRED');
  });
});

describe('the pages', () => {
  it('every page with a shell block is in the run order, the README first and the uninstall after the guides', () => {
    const order = pageOrder(repoRoot);
    const walk = (dir: string): string[] =>
      readdirSync(path.join(repoRoot, dir), { withFileTypes: true }).flatMap((e) =>
        e.isDirectory()
          ? walk(path.join(dir, e.name))
          : e.name.endsWith('.md')
            ? [path.join(dir, e.name)]
            : [],
      );
    const withShell = ['README.md', 'charts/jobfleet/README.md', ...walk('docs')].filter((p) =>
      docBlocks(p, readFileSync(path.join(repoRoot, p), 'utf8')).some(isShell),
    );
    expect(withShell.filter((p) => !order.includes(p))).toEqual([]);
    expect(order[0]).toBe('README.md');
    expect(order.indexOf('docs/uninstall.md')).toBeGreaterThan(
      order.indexOf('docs/how-to/pause.md'),
    );
    expect(order.at(-1)).toBe('charts/jobfleet/README.md');
  });
});
