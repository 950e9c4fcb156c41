// `make pod-template-schema`: src/tools/pod-template-spec.json from the pinned
// Kubernetes release's OpenAPI document (its path is the one argument).
import { readFileSync, writeFileSync } from 'node:fs';
import { podTemplateSpecSchema } from './pod-template-schema.js';

const [path, version] = process.argv.slice(2);
if (!path || !version)
  throw new Error('usage: write-pod-template-schema.ts OPENAPI_JSON KUBE_VERSION');
const schema = podTemplateSpecSchema(
  JSON.parse(readFileSync(path, 'utf8')) as Parameters<typeof podTemplateSpecSchema>[0],
);
const out = new URL('./pod-template-spec.json', import.meta.url);
writeFileSync(out, `${JSON.stringify({ kubernetesVersion: version, schema })}\n`);
console.log(`wrote ${out.pathname} (Kubernetes ${version})`);
