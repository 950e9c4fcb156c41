// What the operator uses when nothing says otherwise, said once: the
// Prometheus a JobWorker's signals come from (its own before the operator's,
// for throttling and for the gate's schema versions alike), and the
// reconcile concurrency the chart and the operator share.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { DEFAULT_CONCURRENCY } from '../../src/operator.js';
import { prometheusFor } from '../../src/signals/prometheus.js';
import { repoRoot } from '../ground/control-plane.js';

describe('the operator’s defaults', () => {
  it('reads the Prometheus the JobWorker names before the operator’s own', () => {
    const own = 'http://prometheus.team:9090';
    const operator = 'http://prometheus.monitoring:9090';
    expect(prometheusFor({ scaling: { prometheusUrl: own } }, operator)).toBe(own);
    expect(prometheusFor({ scaling: {} }, operator)).toBe(operator);
    expect(prometheusFor({ scaling: {} }, undefined)).toBeUndefined();
  });

  it('reconciles as many JobWorkers at once as the chart’s default says', () => {
    const values = parse(
      readFileSync(path.join(repoRoot, 'charts/jobfleet/values.yaml'), 'utf8'),
    ) as { concurrency: number };
    expect(DEFAULT_CONCURRENCY).toBe(values.concurrency);
  });
});
