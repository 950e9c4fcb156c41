// The worker/operator contract, pure: the idempotency-key rule (e.g.
// "invoice:{invoiceId}:send") and the schema versions a revision consumes.
// The worker declares both in code; the operator passes the JobWorker's
// values as JOBFLEET_KEY_RULE / JOBFLEET_SCHEMA_VERSIONS; they must agree.

export interface Contract {
  keyRule: string;
  schemaVersions: readonly number[];
}

const PLACEHOLDER = /\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}/g;

/** The payload paths a key rule reads, e.g. ["invoiceId"] or ["order.id"]. */
export function keyRulePlaceholders(rule: string): string[] {
  return [...rule.matchAll(PLACEHOLDER)].map((m) => m[1] as string);
}

/** Explains what is wrong with a key rule, or returns undefined when it is usable. */
export function keyRuleProblem(rule: string): string | undefined {
  if (rule.trim() === '') return 'the key rule is empty';
  if (/[{}]/.test(rule.replace(PLACEHOLDER, ''))) {
    return `key rule "${rule}" has an unbalanced or malformed {placeholder}`;
  }
  if (keyRulePlaceholders(rule).length === 0) {
    return `key rule "${rule}" has no {placeholder}: every job would share one key`;
  }
  return undefined;
}

function lookup(payload: unknown, path: string): unknown {
  let v: unknown = payload;
  for (const part of path.split('.')) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<string, unknown>)[part];
  }
  return v;
}

export type KeyRender = { ok: true; key: string } | { ok: false; problem: string };

/** Renders the key a payload must carry under `rule`. */
export function renderKey(rule: string, payload: unknown): KeyRender {
  const missing: string[] = [];
  const key = rule.replace(PLACEHOLDER, (_, path: string) => {
    const v = lookup(payload, path);
    if (typeof v === 'string' && v !== '') return v;
    if (typeof v === 'number' && Number.isFinite(v)) return String(v);
    missing.push(path);
    return '';
  });
  if (missing.length) {
    return {
      ok: false,
      problem: `payload lacks ${missing.join(', ')} (a non-empty string or number) needed by key rule "${rule}"`,
    };
  }
  return { ok: true, key };
}

/** Parses "2,3" or "[2, 3]" into [2, 3]; throws naming the value when malformed. */
export function parseSchemaVersions(text: string): number[] {
  const parts = text
    .replace(/^\s*\[|\]\s*$/g, '')
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean);
  const versions = parts.map(Number);
  if (!versions.length || versions.some((v) => !Number.isInteger(v) || v < 1)) {
    throw new Error(
      `schema versions "${text}" must be a comma-separated list of positive integers, e.g. "2,3"`,
    );
  }
  return versions;
}

function sameVersions(a: readonly number[], b: readonly number[]): boolean {
  const x = [...new Set(a)].sort((p, q) => p - q);
  const y = [...new Set(b)].sort((p, q) => p - q);
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

/**
 * Compares the contract in code with the one the operator deployed. Returns
 * the mismatches as sentences naming both values (empty when they agree).
 */
export function contractMismatches(code: Contract, deployed: Partial<Contract>): string[] {
  const problems: string[] = [];
  if (deployed.keyRule !== undefined && deployed.keyRule !== code.keyRule) {
    problems.push(
      `idempotency key rule differs: the worker code uses "${code.keyRule}" but JOBFLEET_KEY_RULE is "${deployed.keyRule}"`,
    );
  }
  if (
    deployed.schemaVersions !== undefined &&
    !sameVersions(code.schemaVersions, deployed.schemaVersions)
  ) {
    problems.push(
      `schema versions differ: the worker code accepts [${code.schemaVersions.join(', ')}] but JOBFLEET_SCHEMA_VERSIONS is [${deployed.schemaVersions.join(', ')}]`,
    );
  }
  return problems;
}
