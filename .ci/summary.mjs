// Prints "N passed, N failed" from vitest's JSON report (and `make lint`: its
// outcome, passed or failed, as the second argument, counted as one check). A test that did not
// run because its suite failed (a beforeAll naming a missing service, an
// import error) counts as failed: vitest reports it as skipped, and a missing
// RabbitMQ must never look like a green run.
import { readFileSync } from 'node:fs';

const report = JSON.parse(readFileSync(process.argv[2] ?? 'test-results/vitest.json', 'utf8'));
let passed = 0;
let failed = 0;
for (const file of report.testResults) {
  const tests = file.assertionResults;
  passed += tests.filter((t) => t.status === 'passed').length;
  failed += tests.filter((t) => t.status === 'failed').length;
  if (file.status === 'failed') {
    const notRun = tests.filter((t) => t.status !== 'passed' && t.status !== 'failed').length;
    failed += notRun || (tests.some((t) => t.status === 'failed') ? 0 : 1);
  }
}
// `make lint` (style, and the layers' import rules) counts as one check more
const lint = process.argv[3];
if (lint === 'passed') passed += 1;
else if (lint !== undefined) failed += 1;
console.log(`${passed} passed, ${failed} failed`);
process.exitCode = failed > 0 ? 1 : 0;
