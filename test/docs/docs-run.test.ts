// Every shell block a reader copies from the docs, run as written, in the
// order a reader who took the README's tour would go on (pageOrder), on the
// real node (test/ground/real-node.ts): README.md, docs/** and the chart's
// README. `sh` commands must exit 0, or with the status their comment says
// (`# exits 1 when …`); a `console` block's command must print the output the
// page shows. A block marked `_Illustration, not run: <why>._`
// is skipped and counted with its reason; `kubectl get … -w` runs until
// stopped as a reader's Ctrl-C would. A failure names the page and the line.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../ground/control-plane.js';
import { startE2eGround, type E2eGround } from '../fixtures/real-node-ground.js';
import {
  blockCommands,
  docBlocks,
  isShell,
  pageOrder,
  showsOutput,
  type DocBlock,
} from '../fixtures/doc-blocks.js';
import type { TourShell } from '../fixtures/tour.js';

let e2e: E2eGround;
let shell: TourShell;
const limits = { watchMs: 30_000, timeoutMs: 600_000 };
const ran: DocBlock[] = [];
const illustrations: DocBlock[] = [];

beforeAll(async () => {
  e2e = await startE2eGround();
  shell = e2e.shell;
}, 600_000);
afterAll(async () => {
  console.log(
    [
      `docs-run: ${ran.length} shell blocks run, ${illustrations.length} marked illustration:`,
      ...illustrations.map((b) => `  ${b.file}:${b.line}: ${b.illustration}`),
    ].join('\n'),
  );
  // the chart's README installed the operator again: leave nothing behind the node's stop misses
  await shell?.run('helm uninstall jobfleet -n jobfleet-system --wait', limits);
  await e2e?.stop();
});

/** Runs one block; a failure names the page's line and shows what the command printed. */
async function runBlock(block: DocBlock) {
  if (block.writes) return shell.write(block.writes, block.body + '\n');
  if (!isShell(block)) return;
  if (block.illustration) return illustrations.push(block);
  for (const { command, line, shown, exits } of blockCommands(block)) {
    const r = await shell.run(command, limits);
    const output = r.stdout + r.stderr;
    const where = `${block.file}:${line}: ${command}\n${output}`;
    if (shown) expect(showsOutput(shown, output), where).toBeUndefined();
    else if (!r.interrupted) expect(r.code, where).toBe(exits ?? 0);
  }
  ran.push(block);
}

describe('the docs, run as written on a real node', () => {
  for (const page of pageOrder(repoRoot))
    it(page, async () => {
      const blocks = docBlocks(page, readFileSync(path.join(repoRoot, page), 'utf8'));
      for (const block of blocks) await runBlock(block);
    });
});
