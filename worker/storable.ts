// What PostgreSQL can store exactly, pure. `text` and `jsonb` cannot hold NUL;
// a lone UTF-16 surrogate is written as U+FFFD (so two different strings
// could be stored as one); `integer` columns hold 32 bits.

/** The largest value PostgreSQL's `integer` holds: schema versions and attempts are stored as one. */
export const MAX_INT32 = 2 ** 31 - 1;

export const isInt32 = (v: unknown): v is number =>
  typeof v === 'number' && Number.isInteger(v) && v >= -MAX_INT32 - 1 && v <= MAX_INT32;

/** True when PostgreSQL stores `s` as it is. */
export const isStorableText = (s: string): boolean => !s.includes('\0') && s.isWellFormed();

/**
 * Any string made fit for a text column and a log line: NUL shown as the
 * escape `\u0000`, lone surrogates replaced, cut to `max` characters.
 */
export function storable(text: string, max = Infinity): string {
  const s = isStorableText(text) ? text : text.replaceAll('\0', '\\u0000').toWellFormed();
  return s.length > max ? s.slice(0, max) : s;
}

/**
 * A handler's result as JSON that jsonb accepts: strings (and keys) made
 * storable, bigints as strings; a result that cannot be serialized at all
 * (a cycle) is replaced by a note saying why. The side effect has happened:
 * the completion must be recorded whatever the result looks like.
 */
export function storableJson(value: unknown): string {
  try {
    const text = JSON.stringify(value ?? null, (_key, v: unknown) => {
      if (typeof v === 'string') return storable(v);
      if (typeof v === 'bigint') return v.toString();
      if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
        const keys = Object.keys(v);
        if (keys.some((k) => !isStorableText(k))) {
          return Object.fromEntries(Object.entries(v).map(([k, x]) => [storable(k), x]));
        }
      }
      return v;
    }) as string | undefined;
    return text ?? 'null';
  } catch (err) {
    return JSON.stringify({ unstorableResult: storable(String((err as Error).message), 300) });
  }
}
