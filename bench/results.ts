// bench/RESULTS.md: each benchmark owns a marked section, rewritten in place,
// headed with the command, date and machine that produced it.
import { execSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const resultsFile = path.join(here, 'RESULTS.md');

export function machine(): string {
  const sh = (cmd: string) => {
    try {
      return execSync(cmd, { stdio: ['ignore', 'pipe', 'ignore'] })
        .toString()
        .trim();
    } catch {
      return 'unknown';
    }
  };
  return [
    `${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB`,
    `Node ${process.version}`,
    `RabbitMQ ${sh('rabbitmqctl version')}`,
    `PostgreSQL ${sh("psql -h 127.0.0.1 -U postgres -d test -Atc 'show server_version'")}`,
  ].join('; ');
}

export function writeSection(name: string, body: string): void {
  let text: string;
  try {
    text = readFileSync(resultsFile, 'utf8');
  } catch {
    text =
      '# Benchmark results\n\nWritten by `make bench` (bench/run.ts). Each section says how it was produced.\n';
  }
  const start = `<!-- bench:${name} -->`;
  const end = `<!-- /bench:${name} -->`;
  const block = `${start}\n${body.trim()}\n${end}`;
  const re = new RegExp(`${start}[\\s\\S]*?${end}`);
  text = re.test(text) ? text.replace(re, block) : `${text.trimEnd()}\n\n${block}\n`;
  writeFileSync(resultsFile, text);
}

export const header = (title: string, cmd: string) =>
  `## ${title}\n\n- command: \`${cmd}\`\n- date: ${new Date().toISOString()}\n- machine: ${machine()}\n`;
