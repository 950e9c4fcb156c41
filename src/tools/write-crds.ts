// `make crds`: writes the generated CRDs into crds/.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { allCrds } from './crd.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
for (const [name, yaml] of Object.entries(allCrds())) {
  const file = path.join(root, 'crds', name);
  writeFileSync(file, yaml);
  console.log(`wrote ${path.relative(root, file)}`);
}
