// Any Kubernetes object as JSON: what the planner computes and compares, and
// what the client (src/kube/client.ts) sends and receives. Only the metadata
// the operator reads is typed; the rest passes through untouched.
export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    generation?: number;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: Array<Record<string, unknown>>;
    deletionTimestamp?: string;
    creationTimestamp?: string;
    [k: string]: unknown;
  };
  [k: string]: unknown;
}
