// Polls until `fn` returns a value (not undefined) or the generous deadline
// passes. Tests wait for observable state this way, never with bare sleeps.
export async function eventually<T>(
  what: string,
  fn: () => Promise<T | undefined>,
  timeoutMs = 60_000,
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: Error | undefined;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch (err) {
      last = err as Error;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(
    `timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${last.message}` : ''}`,
  );
}
