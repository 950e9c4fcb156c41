// Is every field we would apply already live? Used to skip no-op server-side
// applies, so a steady-state resync makes no API writes. Live objects carry
// defaulted fields we never set; those are ignored.
export function isSubset(desired: unknown, live: unknown): boolean {
  if (desired === null || typeof desired !== 'object') {
    // Scalars: equal, or equal as text (the server may echo "1" for 1 in some fields).
    return (
      desired === live || (isScalar(desired) && isScalar(live) && String(desired) === String(live))
    );
  }
  if (Array.isArray(desired)) {
    return (
      Array.isArray(live) &&
      live.length === desired.length &&
      desired.every((d, i) => isSubset(d, live[i]))
    );
  }
  if (live === null || typeof live !== 'object' || Array.isArray(live)) return false;
  return Object.entries(desired as Record<string, unknown>).every(([k, v]) =>
    v === undefined ? true : isSubset(v, (live as Record<string, unknown>)[k]),
  );
}

function isScalar(v: unknown): v is string | number | boolean {
  return typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean';
}
