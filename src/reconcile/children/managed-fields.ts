// Who set a field: the field manager that owns it in metadata.managedFields.
// The apiserver records it on every write, so events can name a person's
// tool (kubectl, the plugin, Argo CD) without trusting an annotation.
import type { KubeObject } from '../../api/kube-object.js';

/** The manager owning the field at `path` (e.g. ['metadata', 'annotations', 'x']), if any. */
export function managerOf(raw: KubeObject, path: readonly string[]): string | undefined {
  const fields = raw.metadata.managedFields as
    Array<{ manager?: string; fieldsV1?: Record<string, unknown> }> | undefined;
  return fields?.find((f) => {
    let node: unknown = f.fieldsV1;
    for (const p of path) node = (node as Record<string, unknown> | undefined)?.[`f:${p}`];
    return node !== undefined;
  })?.manager;
}
