// `jobfleet verify`: runs the claim store's invariants (worker/invariants.ts)
// and prints each with its query and result. Read-only: it never changes the
// database or the queues.
import { parseArgs } from 'node:util';
import pg from 'pg';
import {
  checkInvariants,
  effectsInvariant,
  heldInDoubt,
  terminalKeyCount,
  type InvariantResult,
} from '../../worker/invariants.js';
import { fetchQueueStats } from '../signals/rabbitmq.js';
import { VERIFY_HELP } from './help.js';

/** The URL without its password: what may be printed. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}

const verifyOptions = {
  'claims-url': { type: 'string' },
  schema: { type: 'string' },
  'max-attempts': { type: 'string' },
  'management-url': { type: 'string' },
  vhost: { type: 'string', default: '/' },
  'dead-letter-queue': { type: 'string' },
  'settle-seconds': { type: 'string', default: '6' },
  'effects-table': { type: 'string' },
  'effects-key': { type: 'string', default: 'key' },
  'effects-time-column': { type: 'string' },
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

type VerifyValues = ReturnType<typeof parseArgs<{ options: typeof verifyOptions }>>['values'];

/** The flags checked before anything connects. */
interface VerifySettings {
  claimsUrl: string;
  maxAttempts: number;
  settleSeconds: number;
}

export async function runVerify(argv: string[]): Promise<number> {
  const { values: o } = parseArgs({ args: argv, options: verifyOptions });
  if (o.help) {
    console.log(VERIFY_HELP);
    return 0;
  }
  const settings = verifySettings(o);
  const db = await connectClaims(settings.claimsUrl, o.schema);
  try {
    return await verifyClaims(db, o, settings);
  } finally {
    await db.end().catch(() => undefined);
  }
}

/** Every flag checked, each refused with what it must be. */
function verifySettings(o: VerifyValues): VerifySettings {
  const claimsUrl = o['claims-url'] ?? process.env.JOBFLEET_CLAIMS_URL;
  if (!claimsUrl) throw new Error('--claims-url is required (or set JOBFLEET_CLAIMS_URL)');
  const maxAttempts = Number(o['max-attempts'] ?? process.env.JOBFLEET_MAX_ATTEMPTS ?? 5);
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1)
    throw new Error(`--max-attempts must be a positive integer, got "${o['max-attempts']}"`);
  const settleSeconds = Number(o['settle-seconds']);
  if (!Number.isFinite(settleSeconds) || settleSeconds < 0)
    throw new Error(
      `--settle-seconds must be a number of seconds (0 or more), got "${o['settle-seconds']}"`,
    );
  if (o.schema !== undefined && !/^[A-Za-z_][A-Za-z0-9_$]*$/.test(o.schema))
    throw new Error(`--schema must be a plain identifier, got "${o.schema}"`);
  return { claimsUrl, maxAttempts, settleSeconds };
}

/** A connected client (on --schema's search path), or an error naming the redacted URL. */
async function connectClaims(claimsUrl: string, schema: string | undefined): Promise<pg.Client> {
  const db = new pg.Client({
    connectionString: claimsUrl,
    connectionTimeoutMillis: 5000,
    ...(schema ? { options: `-c search_path=${schema}` } : {}),
  });
  try {
    await db.connect();
  } catch (err) {
    throw new Error(`cannot reach ${redactUrl(claimsUrl)}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  return db;
}

/** The invariants (and the DLQs' with --management-url), printed; 1 when any is violated. */
async function verifyClaims(db: pg.Client, o: VerifyValues, s: VerifySettings): Promise<number> {
  const { rows } = await db.query<{ t: string | null }>(
    `select to_regclass('jobfleet_claims')::text as t`,
  );
  if (!rows[0]?.t)
    throw new Error(
      `no jobfleet_claims table in ${redactUrl(s.claimsUrl)}${o.schema ? ` schema ${o.schema}` : ''}: pass --schema, or point --claims-url at the workers' JOBFLEET_CLAIMS_URL`,
    );
  const effects = o['effects-table']
    ? effectsInvariant({
        table: o['effects-table'],
        keyColumn: o['effects-key'],
        timeColumn: o['effects-time-column'],
      })
    : undefined;
  const results = await checkInvariants(db, {
    maxAttempts: s.maxAttempts,
    extra: effects && [effects],
  });
  if (o['management-url'])
    results.push(
      await checkDeadLetterQueues(
        db,
        o['management-url'],
        o.vhost,
        o['dead-letter-queue'],
        s.settleSeconds * 1000,
      ),
    );
  const terminal = await terminalKeyCount(db);
  const held = await heldInDoubt(db);
  const failed = results.filter((r) => r.violations > 0);
  if (o.json)
    console.log(JSON.stringify({ terminalKeys: terminal, results, heldInDoubt: held }, null, 2));
  else {
    print(redactUrl(s.claimsUrl), o.schema, terminal, results);
    printHeld(held);
  }
  return failed.length ? 1 : 0;
}

/**
 * Quarantined entries whose message is no longer in the DLQ cannot be
 * replayed. The management API's counts are sampled, so right after a
 * replay they can lag the table: a shortfall counts only when a second
 * reading, `settleMs` later, shows it too.
 */
async function checkDeadLetterQueues(
  db: pg.Client,
  managementUrl: string,
  vhost: string,
  dlqOverride: string | undefined,
  settleMs: number,
): Promise<InvariantResult> {
  const sql = `select queue, count(*)::int as quarantined
from jobfleet_dead_letters where status = 'quarantined' group by queue`;
  const shortfalls = async () => {
    const { rows } = await db.query<{ queue: string; quarantined: number }>(sql);
    const out = new Map<string, Record<string, unknown>>();
    for (const r of rows) {
      const dlq = dlqOverride ?? `${r.queue}.dlq`;
      const s = await fetchQueueStats(managementUrl, vhost, dlq);
      const held = s.messagesReady + s.messagesUnacked;
      if (held < r.quarantined)
        out.set(r.queue, {
          queue: r.queue,
          dead_letter_queue: dlq,
          quarantined: r.quarantined,
          held,
        });
    }
    return out;
  };
  let found = await shortfalls();
  if (found.size && settleMs > 0) {
    await new Promise((r) => setTimeout(r, settleMs));
    const again = await shortfalls();
    found = new Map([...again].filter(([queue]) => found.has(queue)));
  }
  const sample = [...found.values()];
  return {
    name: 'dead-letters-held',
    claim: `each dead-letter queue holds at least as many messages as it has quarantined entries (a shortfall confirmed by a second reading ${settleMs / 1000} s later: the management API samples its counts)`,
    sql,
    fix: 'messages were removed from the DLQ by hand (purge, shovel, consumer): their payloads are gone; mark those entries discarded with a reason',
    violations: sample.length,
    sample,
  };
}

function print(
  where: string,
  schema: string | undefined,
  terminal: number,
  results: InvariantResult[],
): void {
  console.log(`jobfleet verify: ${where}${schema ? ` (schema ${schema})` : ''}`);
  console.log(`${terminal} keys hold a terminal result\n`);
  for (const r of results) {
    const ok = r.violations === 0;
    console.log(`${ok ? 'ok  ' : 'FAIL'} ${r.name}: ${r.claim}`);
    console.log(indent(r.sql, '       '));
    console.log(`     → ${r.violations} violating row${r.violations === 1 ? '' : 's'}`);
    for (const row of r.sample) console.log(`       ${JSON.stringify(row)}`);
    if (r.violations > r.sample.length)
      console.log(`       … and ${r.violations - r.sample.length} more`);
    if (!ok) console.log(`     fix: ${r.fix}`);
    console.log('');
  }
  const failed = results.filter((r) => r.violations > 0).length;
  console.log(
    failed
      ? `${failed} of ${results.length} invariants violated`
      : `all ${results.length} invariants hold`,
  );
}

/** Held in-doubt jobs: no invariant is broken, but each waits for a person's decision. */
function printHeld(held: { count: number; sample: Record<string, unknown>[] }): void {
  if (!held.count) return;
  console.log(
    `\n${held.count} in-doubt job${held.count === 1 ? '' : 's'} held for a person (docs/in-doubt.md#a-held-job: replay, or jobfleet dlq discard --id ID --mark-done):`,
  );
  for (const r of held.sample)
    console.log(`  #${String(r.id)} ${String(r.key)}: ${String(r.reason)}`);
  if (held.count > held.sample.length)
    console.log(`  … and ${held.count - held.sample.length} more`);
}

function indent(text: string, pad: string): string {
  return text
    .split('\n')
    .map((l) => pad + l)
    .join('\n');
}
