// PostgreSQL array literals for the group-commit statements' parameters,
// built in one pass. pg's own encoder appends element by element to one
// string; for a statement's dozen arrays of a few dozen elements that was
// the largest allocation of the worker's hot path (about 3 KB per job in
// V8's sampling heap profile of a prefetch-64 drain). The literal is the one
// pg would send, so PostgreSQL reads the same values.

const NEEDS_ESCAPE = /[\\"]/;

/** `"…"` with backslashes and double quotes escaped: an element PostgreSQL reads back exactly. */
function quote(s: string): string {
  return NEEDS_ESCAPE.test(s) ? `"${s.replace(/[\\"]/g, '\\$&')}"` : `"${s}"`;
}

/** A text (or uuid, jsonb) array literal; null elements are SQL NULL. */
export function textArray(values: ReadonlyArray<string | null>): string {
  if (values.length === 0) return '{}';
  // Keys, owner tokens, types and outcomes seldom hold a quote or a
  // backslash: then one join makes the literal, with no string per element.
  // (JSON object results do hold quotes: they take the loop below.)
  if (values.every((v) => v !== null && v !== undefined && !NEEDS_ESCAPE.test(v)))
    return `{"${values.join('","')}"}`;
  const parts = new Array<string>(values.length);
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    parts[i] = v === null || v === undefined ? 'NULL' : quote(v);
  }
  return `{${parts.join(',')}}`;
}

/** An integer or float8 array literal (finite numbers only: the worker writes no others). */
export function numberArray(values: readonly number[]): string {
  return `{${values.join(',')}}`;
}
