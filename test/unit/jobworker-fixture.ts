// The smallest valid JobWorker as observe reads it, for the unit tests of
// what is done with one.
import type { KubeObject } from '../../src/kube/client.js';

export function jobWorkerObject(metadata: Partial<KubeObject['metadata']> = {}): KubeObject {
  return {
    apiVersion: 'jobfleet.dev/v1alpha1',
    kind: 'JobWorker',
    metadata: { name: 'w', namespace: 'ns', generation: 1, ...metadata },
    spec: {
      image: 'r/w:1',
      broker: { urlSecretRef: { name: 'rabbitmq', key: 'url' }, queue: 'q' },
      claims: { urlSecretRef: { name: 'claims-db', key: 'url' } },
      contract: { idempotencyKey: 'k:{id}', schemaVersions: [1] },
      deadLetter: { owner: 'team' },
    },
  };
}
