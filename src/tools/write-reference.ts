// `make docs-ref`: writes the generated reference pages into docs/reference/.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { referencePages } from './reference.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
for (const [name, text] of Object.entries(referencePages())) {
  const file = path.join(root, name);
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, text);
  console.log(`wrote ${name}`);
}
