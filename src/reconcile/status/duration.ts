// Durations in words, pure.

/** Seconds as kubectl prints ages: 37s, 4m10s, 2h5m, 3d4h. */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const [d, h, m] = [Math.floor(s / 86_400), Math.floor(s / 3600) % 24, Math.floor(s / 60) % 60];
  if (d) return `${d}d${h ? `${h}h` : ''}`;
  if (h) return `${h}h${m ? `${m}m` : ''}`;
  if (m) return `${m}m${s % 60 ? `${s % 60}s` : ''}`;
  return `${s}s`;
}
