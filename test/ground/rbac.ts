// RBAC as data: the rules a chart grants and the calls a process made, both
// as (apiGroup, resource, verb) triples, and the difference between them.
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

/**
 * The RBAC verbs one HTTP call needs. A server-side apply that answers 201
 * created the object: that takes `create` as well as `patch`.
 */
export function triplesOfCall(method: string, path: string, status: number): Triple[] {
  const [p, query = ''] = path.split('?');
  const parts = (p ?? '').split('/').filter(Boolean);
  let group: string;
  let rest: string[];
  if (parts[0] === 'api') {
    group = '';
    rest = parts.slice(2);
  } else if (parts[0] === 'apis') {
    group = parts[1] ?? '';
    rest = parts.slice(3);
  } else return [];
  if (rest[0] === 'namespaces' && rest.length >= 3) rest = rest.slice(2);
  const [resource, name, sub] = rest;
  if (!resource) return [];
  const res = sub ? `${resource}/${sub}` : resource;
  const watch = method === 'WATCH' || /(^|&)watch=(1|true)/.test(query);
  const verbs =
    method === 'GET' || method === 'WATCH'
      ? [watch ? 'watch' : name ? 'get' : 'list']
      : method === 'POST'
        ? ['create']
        : method === 'PATCH'
          ? status === 201
            ? ['patch', 'create']
            : ['patch']
          : method === 'PUT'
            ? ['update']
            : method === 'DELETE'
              ? [name ? 'delete' : 'deletecollection']
              : [];
  return verbs.map((v): Triple => `${group}|${res}|${v}`);
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
