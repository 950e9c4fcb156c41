// Telling "the claim store is down" from "this message cannot be stored".
// The first pauses consumption and returns deliveries unacked until
// PostgreSQL answers; the second is the message's own fault and ends as a
// dead letter. Mistaking one for the other loops a message forever or marks
// a healthy worker unready.

const sqlstate = (err: unknown): string | undefined => {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
};

/**
 * A value PostgreSQL refuses: SQLSTATE class 22 (data exception: NUL, an
 * invalid byte sequence, a number out of range), class 23 integrity
 * violations (the expected conflicts are absorbed by ON CONFLICT in the SQL,
 * so one that reaches here is the row's content), and 54 (a value over a
 * program limit, such as an index row too large).
 */
export function isMessageDataError(err: unknown): boolean {
  const code = sqlstate(err);
  return code !== undefined && /^(22|23|54)/.test(code);
}

/**
 * The connection or the server failed (SQLSTATE 08, 53, 57, XX, or the plain
 * Errors pg's pool raises): true whoever made the call, a handler included.
 */
export function isConnectionError(err: unknown): boolean {
  const code = sqlstate(err);
  if (code !== undefined) return /^(08|57|53|XX)/.test(code);
  const message = (err as { message?: unknown } | undefined)?.message;
  return (
    typeof message === 'string' &&
    /(ECONNREFUSED|ECONNRESET|EHOSTUNREACH|ENOTFOUND|terminat|not queryable|Connection terminated|timeout exceeded when trying to connect|connect ETIMEDOUT)/i.test(
      message,
    )
  );
}

/**
 * A statement of the worker's own failed for a reason other than its data
 * (the connection, a missing table, a permission): the store cannot take
 * records now.
 */
export function isStoreError(err: unknown): boolean {
  return isConnectionError(err) || (sqlstate(err) !== undefined && !isMessageDataError(err));
}
