// Claim-store micro-benchmarks, split out of the worker benchmark (which now
// compares whole systems): one claim() round trip against 10k and 1M
// existing claim rows, and claim + record as named vs unnamed statements.
//
//   node --import tsx bench/claim-latency.ts [--quick]
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { ClaimStore } from '../worker/claim-store.js';
import { SQL } from '../worker/claims-sql.js';
import { createSchema } from '../test/ground/postgres.js';
import { configuredUrls } from '../test/ground/services.js';

async function claimLatency(pgUrl: string, existing: number, samples: number) {
  const db = await createSchema(pgUrl);
  try {
    const store = new ClaimStore(db.pool);
    await store.migrate();
    await db.pool.query(
      `insert into jobfleet_claims (key, state, attempts, completed_at, result)
       select 'existing:' || g, 'completed', 1, now() - (g % 1000) * interval '1 minute', '{"ok":true}'
       from generate_series(1, $1) g`,
      [existing],
    );
    await db.pool.query('analyze jobfleet_claims');
    const times: number[] = [];
    for (let i = 0; i < samples; i++) {
      const t0 = performance.now();
      // Half new keys, half duplicates of existing ones: both paths of the claim.
      const key = i % 2 ? `new:${i}` : `existing:${1 + Math.floor(Math.random() * existing)}`;
      await store.claim(key, 60, `j${i}`, 'noop');
      times.push(performance.now() - t0);
    }
    times.sort((a, b) => a - b);
    const pct = (p: number) =>
      times[Math.min(times.length - 1, Math.floor(p * times.length))] ?? NaN;
    return { p50: pct(0.5), p99: pct(0.99) };
  } finally {
    await db.cleanup();
  }
}

/**
 * claim + record with 16 concurrent callers, as unnamed statements (planned on
 * every call) and as the named ones ClaimStore uses: side by side, one schema.
 */
async function namedVsUnnamed(
  pgUrl: string,
  n: number,
): Promise<{ unnamed: number; named: number }> {
  const db = await createSchema(pgUrl);
  const pool = new pg.Pool({ connectionString: db.url, max: 18 });
  try {
    await new ClaimStore(pool).migrate();
    const run = async (named: boolean) => {
      let i = 0;
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: 16 }, async () => {
          while (i < n) {
            const key = `${named}:${i++}`;
            const owner = crypto.randomUUID();
            const q = (name: 'commit' | 'complete', values: unknown[]) =>
              pool.query(
                named
                  ? { name: `bench_${name}`, text: SQL[name], values }
                  : { text: SQL[name], values },
              );
            // one claim; no completions, no journal rows
            await q('commit', [
              [key],
              [owner],
              ['j'],
              ['t'],
              60,
              ...Array.from({ length: 9 }, () => []),
            ]);
            await q('complete', [key, owner, 'null']);
          }
        }),
      );
      return (n / (performance.now() - t0)) * 1000;
    };
    return { unnamed: await run(false), named: await run(true) };
  } finally {
    await pool.end();
    await db.cleanup();
  }
}

export interface ClaimBench {
  samples: number;
  claims: Array<{ existing: number; p50: number; p99: number }>;
  statements: { callers: number; jobs: number; unnamed: number; named: number };
}

export async function runClaimBench(opts: { quick: boolean }): Promise<ClaimBench> {
  const { pgUrl } = configuredUrls();
  const samples = 2000;
  const claims = [];
  for (const existing of opts.quick ? [10_000] : [10_000, 1_000_000]) {
    const r = await claimLatency(pgUrl, existing, samples);
    claims.push({ existing, ...r });
    console.error(
      `claim latency with ${existing} rows: p50 ${r.p50.toFixed(2)} ms, p99 ${r.p99.toFixed(2)} ms`,
    );
  }
  const jobs = opts.quick ? 500 : 4000;
  const statements = await namedVsUnnamed(pgUrl, jobs);
  console.error(
    `claim+record, 16 concurrent: unnamed ${statements.unnamed.toFixed(0)}/s, named ${statements.named.toFixed(0)}/s`,
  );
  return { samples, claims, statements: { callers: 16, jobs, ...statements } };
}

export function renderClaimSection(r: ClaimBench): string {
  const f = (n: number, d = 0) => n.toFixed(d);
  return `Claim latency (one \`claim()\` round trip; half new keys, half existing ones), ${r.samples} samples:

| existing claim rows | p50 (ms) | p99 (ms) |
|---:|---:|---:|
${r.claims.map((c) => `| ${c.existing.toLocaleString('en')} | ${f(c.p50, 2)} | ${f(c.p99, 2)} |`).join('\n')}

Named prepared statements, which ClaimStore uses, against unnamed ones for the same claim + record with
${r.statements.callers} concurrent callers, ${r.statements.jobs} jobs in all (same script, same schema): ${f(r.statements.unnamed)} vs ${f(r.statements.named)} jobs/s.
`;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  console.log(renderClaimSection(await runClaimBench({ quick: process.argv.includes('--quick') })));
}
