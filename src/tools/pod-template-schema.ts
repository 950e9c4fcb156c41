// The core/v1 PodTemplateSpec as a CRD's structural schema, made from the
// Kubernetes release's own OpenAPI v3 document (api/openapi-spec/v3 of
// k8s.io/kubernetes at the pinned version), as Argo Rollouts does for its
// spec.template. Pure: `make pod-template-schema` feeds it the document and
// writes the result into ./pod-template-spec.json, which src/tools/crd.ts reads.
//
// What changes on the way, and why:
// - `$ref`s are inlined: a CRD schema has no references.
// - descriptions and defaults are dropped: the CRD must stay well under
//   etcd's object limit, and a default would be written into the user's spec
//   (the Deployment's own defaulting applies them to the pods anyway).
// - list-type/map-type markers are dropped: their map keys must be required
//   or defaulted, which the dropped defaults no longer are; the JobWorker's
//   template is then one atomic value to server-side apply, as any CRD field.
// - Quantity and IntOrString become `x-kubernetes-int-or-string`.
// - `metadata` keeps labels and annotations (what a pod template's may
//   carry); an embedded volume claim template's is kept whole.
// - `spec.containers` is not required: a template that only adds, say,
//   imagePullSecrets needs no container; the operator adds the worker.
// - `ephemeralContainers` is left out: a pod cannot be created with one.

export type Schema = Record<string, unknown>;
interface OpenApiDocument {
  components: { schemas: Record<string, Schema> };
}

const CORE = 'io.k8s.api.core.v1.';
const META = 'io.k8s.apimachinery.pkg.apis.meta.v1.';
const DROPPED = new Set([
  'description',
  'default',
  'x-kubernetes-list-type',
  'x-kubernetes-list-map-keys',
  'x-kubernetes-map-type',
  'x-kubernetes-patch-merge-key',
  'x-kubernetes-patch-strategy',
  'x-kubernetes-unions',
]);

const INT_OR_STRING: Schema = {
  anyOf: [{ type: 'integer' }, { type: 'string' }],
  'x-kubernetes-int-or-string': true,
};

const SPECIAL: Record<string, Schema> = {
  'io.k8s.apimachinery.pkg.api.resource.Quantity': INT_OR_STRING,
  'io.k8s.apimachinery.pkg.util.intstr.IntOrString': INT_OR_STRING,
  [`${META}ObjectMeta`]: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true },
  [`${META}Time`]: { type: 'string', format: 'date-time' },
};

const stringMap: Schema = { type: 'object', additionalProperties: { type: 'string' } };

export function podTemplateSpecSchema(doc: OpenApiDocument): Schema {
  const schemas = doc.components.schemas;
  const resolve = (ref: string, depth: number): Schema => {
    const name = ref.replace('#/components/schemas/', '');
    if (SPECIAL[name]) return SPECIAL[name];
    const s = schemas[name];
    if (!s) throw new Error(`the OpenAPI document has no schema ${name}`);
    return convert(s, depth + 1);
  };
  const convert = (s: Schema, depth: number): Schema => {
    // core/v1 has no recursive type under a pod; a cycle would be a new one
    if (depth > 40) throw new Error('the pod schema is deeper than 40: a recursive type?');
    if (typeof s.$ref === 'string') return resolve(s.$ref, depth);
    const [only, ...others] = (s.allOf as Schema[] | undefined) ?? [];
    if (only && others.length === 0 && typeof only.$ref === 'string') {
      const rest = Object.fromEntries(Object.entries(s).filter(([k]) => k !== 'allOf'));
      return { ...convert(rest, depth), ...resolve(only.$ref, depth) };
    }
    const out: Schema = {};
    for (const [k, v] of Object.entries(s)) {
      if (DROPPED.has(k)) continue;
      if (k === 'properties') {
        out.properties = Object.fromEntries(
          Object.entries(v as Record<string, Schema>).map(([p, ps]) => [p, convert(ps, depth)]),
        );
      } else if (k === 'items' || k === 'additionalProperties') {
        out[k] = typeof v === 'object' ? convert(v as Schema, depth) : v;
      } else {
        out[k] = v;
      }
    }
    return out;
  };

  const { required: podRequired, ...podSpec } = resolve(`${CORE}PodSpec`, -1);
  const properties = { ...(podSpec.properties as Record<string, Schema>) };
  delete properties.ephemeralContainers;
  const required = ((podRequired as string[] | undefined) ?? []).filter((r) => r !== 'containers');
  return {
    type: 'object',
    properties: {
      metadata: {
        type: 'object',
        properties: { labels: stringMap, annotations: stringMap },
      },
      spec: {
        ...podSpec,
        properties,
        ...(required.length ? { required } : {}),
      },
    },
  };
}
