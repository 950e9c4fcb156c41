// `make crds`: writes the generated CRDs into crds/.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { jobWorkerCrdYaml } from './crd.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const file = path.join(root, 'crds', 'jobfleet.dev_jobworkers.yaml');
writeFileSync(file, jobWorkerCrdYaml());
console.log(`wrote ${path.relative(root, file)}`);
