// RBAC as data: the rules a chart grants and the calls a process made, both
// as (apiGroup, resource, verb) triples, and the difference between them.
import { requestKind } from '../../src/kube/request-kind.js';

export interface Rule {
  apiGroups?: string[];
  resources?: string[];
  verbs?: string[];
}

export type Triple = `${string}|${string}|${string}`; // group|resource|verb

export function triplesOfRules(rules: Rule[]): Set<Triple> {
  const out = new Set<Triple>();
  for (const r of rules)
    for (const g of r.apiGroups ?? [])
      for (const res of r.resources ?? [])
        for (const v of r.verbs ?? []) out.add(`${g}|${res}|${v}`);
  return out;
}

/** The RBAC verbs one HTTP call needs (src/kube/request-kind.ts). */
export function triplesOfCall(method: string, path: string, status: number): Triple[] {
  const k = requestKind(method, path, status);
  return (k?.verbs ?? []).map((v): Triple => `${k!.group}|${k!.resource}|${v}`);
}

export function compareRbac(
  granted: Set<Triple>,
  used: Set<Triple>,
): { missing: Triple[]; unused: Triple[] } {
  return {
    missing: [...used].filter((t) => !granted.has(t)).sort(),
    unused: [...granted].filter((t) => !used.has(t)).sort(),
  };
}
