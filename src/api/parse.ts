// A custom resource's spec checked against its schema, each problem naming
// the field it is about (spec.<path>): what status, events and the CLI say.
import type { z } from 'zod';

export type Parsed<T> = { ok: true; spec: T } | { ok: false; problems: string[] };

export function parseWith<S extends z.ZodType>(schema: S, raw: unknown): Parsed<z.output<S>> {
  const r = schema.safeParse(raw);
  if (r.success) return { ok: true, spec: r.data };
  return {
    ok: false,
    problems: r.error.issues.map((i) => `spec.${i.path.join('.')}: ${i.message}`),
  };
}
