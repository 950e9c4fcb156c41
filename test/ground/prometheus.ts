// A real Prometheus (Debian's `prometheus` package) scraping test processes:
// static targets with the labels the chart's PodMonitor would add.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { freePort } from './control-plane.js';
import { eventually } from './eventually.js';

export interface TestPrometheus {
  url: string;
  stop(): Promise<void>;
}

export function prometheusBinary(): string {
  try {
    return execFileSync('sh', ['-c', 'command -v prometheus'], { encoding: 'utf8' }).trim();
  } catch {
    throw new Error(
      'prometheus is not installed: apt-get install prometheus (Debian package), as .ci/run does',
    );
  }
}

/**
 * Scrapes `targets` every second; with `rules` (a rule file's groups, e.g.
 * the chart's alerts) it evaluates them every second too.
 */
export async function startPrometheus(
  targets: Array<{ port: number; labels: Record<string, string> }>,
  rules?: unknown[],
): Promise<TestPrometheus> {
  const bin = prometheusBinary();
  const dir = await mkdtemp(path.join(os.tmpdir(), 'jobfleet-prom-'));
  const port = await freePort();
  if (rules) await writeFile(path.join(dir, 'rules.yml'), JSON.stringify({ groups: rules }));
  const config = {
    global: { scrape_interval: '1s', evaluation_interval: '1s' },
    ...(rules && { rule_files: [path.join(dir, 'rules.yml')] }),
    scrape_configs: [
      {
        job_name: 'workers',
        static_configs: targets.map((t) => ({
          targets: [`127.0.0.1:${t.port}`],
          labels: t.labels,
        })),
      },
    ],
  };
  await writeFile(path.join(dir, 'prometheus.yml'), JSON.stringify(config));
  const child = spawn(
    bin,
    [
      `--config.file=${path.join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${path.join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'ignore', 'ignore'] },
  );
  // Dies with the test process even on SIGKILL.
  const reaper = spawn(
    process.execPath,
    [
      path.join(path.dirname(new URL(import.meta.url).pathname), 'reaper.mjs'),
      String(process.pid),
      dir,
      String(child.pid),
    ],
    {
      detached: true,
      stdio: 'ignore',
    },
  );
  reaper.unref();
  const url = `http://127.0.0.1:${port}`;
  await eventually(
    'Prometheus to be ready',
    async () => ((await fetch(`${url}/-/ready`)).ok ? true : undefined),
    30_000,
    200,
  );
  return {
    url,
    stop: async () => {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
      reaper.kill('SIGTERM');
      await rm(dir, { recursive: true, force: true });
    },
  };
}
