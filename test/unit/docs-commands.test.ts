// The docs' shell blocks name commands and flags that exist: every `make`
// target in the Makefile, every `kubectl jobworker` and `jobfleet` command
// and flag in that command's own help (src/cli/help.ts), in seconds. The
// blocks are also run, on a real node (test/docs/docs-run.test.ts); this
// catches the illustrations and CONTRIBUTING's too.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { DLQ_HELP, KUBECTL_JOBWORKER_USAGE, VERIFY_HELP } from '../../src/cli/help.js';
import { repoRoot } from '../ground/control-plane.js';

/** The markdown pages users read: README, CONTRIBUTING, docs/ (the generated reference aside). */
function pages(): string[] {
  const walk = (dir: string): string[] =>
    readdirSync(path.join(repoRoot, dir), { withFileTypes: true }).flatMap((e) =>
      e.isDirectory()
        ? e.name === 'reference'
          ? []
          : walk(path.join(dir, e.name))
        : e.name.endsWith('.md')
          ? [path.join(dir, e.name)]
          : [],
    );
  return ['README.md', 'CONTRIBUTING.md', ...walk('docs')];
}

/** Each command line of the page's sh/bash blocks: continuations joined, quotes and comments dropped. */
function commandLines(page: string): string[] {
  const text = readFileSync(path.join(repoRoot, page), 'utf8');
  return [...text.matchAll(/^ *```(?:sh|bash|shell)[^\n]*\n([\s\S]*?)^ *```/gm)].flatMap((m) =>
    m[1]!
      .replace(/\\\n\s*/g, ' ')
      .split('\n')
      .map((l) =>
        l
          .replace(/'[^']*'|"[^"]*"/g, 'Q')
          .replace(/\s+#.*$/, '')
          .trim(),
      )
      .filter((l) => l && !l.startsWith('#')),
  );
}

const flagsOf = (line: string) =>
  line
    .split(/\s+/)
    .filter((t) => /^--?[a-z]/i.test(t))
    .map((t) => t.replace(/=.*$/, ''));

/** The flags a help text names. */
const helpFlags = (help: string) => new Set(help.match(/--?[a-z][\w-]*/gi) ?? []);
const KUBECTL_GLOBALS = ['-n', '--namespace', '--context', '--kubeconfig', '--as', '--as-group'];
const PLUGIN_COMMANDS = new Set(
  [...KUBECTL_JOBWORKER_USAGE.matchAll(/^ {2}([a-z]+)\b/gm)].map((m) => m[1]!),
);
const MAKE_TARGETS = new Set(
  [...readFileSync(path.join(repoRoot, 'Makefile'), 'utf8').matchAll(/^([a-z][\w-]*):/gm)].map(
    (m) => m[1]!,
  ),
);

/** What is wrong with one command line, or undefined when it checks out (or is not ours). */
function problem(line: string): string | undefined {
  const words = line.split(/\s+/);
  if (words[0] === 'make') {
    const target = words.find((w, i) => i > 0 && !w.includes('=') && !w.startsWith('-'));
    return target && !MAKE_TARGETS.has(target) ? `no make target "${target}"` : undefined;
  }
  let known: Set<string>;
  if (words[0] === 'kubectl' && words[1] === 'jobworker') {
    const sub = words[2]!;
    if (!PLUGIN_COMMANDS.has(sub)) return `no kubectl jobworker command "${sub}"`;
    known = helpFlags(sub === 'dlq' ? DLQ_HELP : KUBECTL_JOBWORKER_USAGE);
    for (const g of KUBECTL_GLOBALS) known.add(g);
  } else if (words[0] === 'jobfleet' && (words[1] === 'verify' || words[1] === 'dlq')) {
    known = helpFlags(words[1] === 'verify' ? VERIFY_HELP : DLQ_HELP);
  } else return undefined;
  const unknown = flagsOf(line).filter((f) => !known.has(f));
  return unknown.length ? `unknown flag ${unknown.join(', ')}` : undefined;
}

describe("the docs' shell commands", () => {
  it('name make targets, commands and flags that exist', () => {
    const checked: string[] = [];
    const wrong: string[] = [];
    for (const page of pages())
      for (const line of commandLines(page)) {
        const p = problem(line);
        if (/^(make|kubectl jobworker|jobfleet) /.test(line)) checked.push(line);
        if (p) wrong.push(`${page}: ${line} — ${p}`);
      }
    expect(wrong).toEqual([]);
    expect(checked.length).toBeGreaterThan(30);
  });

  it('would catch a flag or a command that does not exist', () => {
    expect(problem('kubectl jobworker dlq replay x --reason Q --rate-limit 5')).toBe(
      'unknown flag --rate-limit',
    );
    expect(problem('kubectl jobworker rollback x')).toBe('no kubectl jobworker command "rollback"');
    expect(problem('jobfleet verify --claims-url Q --dry-run')).toBe('unknown flag --dry-run');
    expect(problem('make deploy')).toBe('no make target "deploy"');
    expect(problem('kubectl jobworker undo x --to-revision 3 -n ns')).toBeUndefined();
  });
});
