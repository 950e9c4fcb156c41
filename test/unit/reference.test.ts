// The reference pages are what the code declares today: the custom
// resources' fields and the metrics, generated (src/tools/reference.ts).
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { referencePages } from '../../src/tools/reference.js';
import { CONDITIONS, EVENTS } from '../../src/api/reasons.js';
import { repoRoot } from '../ground/control-plane.js';

describe('docs/reference/', () => {
  it('matches the code (run `make docs-ref` after changing a field or a metric)', () => {
    for (const [name, text] of Object.entries(referencePages()))
      expect(
        readFileSync(path.join(repoRoot, name), 'utf8'),
        `${name} is stale: run make docs-ref`,
      ).toBe(text);
  });

  it('lists every metric with its help, and every spec field with its description', () => {
    const metrics = referencePages()['docs/reference/metrics.md']!;
    for (const name of [
      'jobfleet_queue_oldest_message_age_seconds',
      'jobfleet_last_delivery_age_seconds',
    ])
      expect(metrics).toMatch(new RegExp(`\\| \`${name}\` \\| gauge \\| [^|]* \\| \\w`));
    const fields = referencePages()['docs/reference/jobworker.md']!;
    expect(fields).toMatch(
      /\| `spec\.broker\.queueType` \| classic \\\| quorum \| `"quorum"` \| \w/,
    );
  });

  it('declares no reason the code never sets (the types refuse one it has not declared)', () => {
    const dirs = ['src/reconcile', 'src/controller', 'src/signals'];
    const code = dirs
      .flatMap((d) =>
        readdirSync(path.join(repoRoot, d), { recursive: true, encoding: 'utf8' })
          .filter((f) => f.endsWith('.ts'))
          .map((f) => readFileSync(path.join(repoRoot, d, f), 'utf8')),
      )
      .join('\n');
    const declared = new Set([
      ...Object.values(CONDITIONS).flatMap((c) => Object.keys(c.reasons)),
      ...Object.keys(EVENTS),
    ]);
    const unused = [...declared].filter((r) => !code.includes(`'${r}'`));
    expect(unused).toEqual([]);
  });
});
