// What an API call is, in Kubernetes' terms: the API group, the resource
// (with its subresource) and the RBAC verbs it needs — from its method, path
// and status alone. The operator's request metrics and the RBAC
// least-privilege test both read calls this way.
export interface RequestKind {
  group: string;
  /** resource, or resource/subresource */
  resource: string;
  /** what RBAC checks; a server-side apply that answered 201 created the object: create as well as patch */
  verbs: string[];
}

export function requestKind(method: string, path: string, status: number): RequestKind | undefined {
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
  } else return undefined;
  if (rest[0] === 'namespaces' && rest.length >= 3) rest = rest.slice(2);
  const [resource, name, sub] = rest;
  if (!resource) return undefined;
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
  return { group, resource: sub ? `${resource}/${sub}` : resource, verbs };
}
