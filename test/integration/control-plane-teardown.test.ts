// The harness must never leave an etcd or apiserver behind, even when the
// process that started them is killed without a chance to clean up.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../ground/control-plane.js';

// A zombie (killed, not yet reaped by whoever adopted it) counts as gone.
const alive = (pid: number) => {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
};

describe('control plane teardown', () => {
  it('kills etcd and kube-apiserver and removes the temp dir when the owner is SIGKILLed', async () => {
    const owner = spawn(
      process.execPath,
      ['--import', 'tsx', 'test/ground/start-control-plane.ts', '--no-workloads'],
      { cwd: repoRoot, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const line = await new Promise<string>((resolve, reject) => {
      const rl = createInterface({ input: owner.stdout });
      rl.once('line', resolve);
      owner.once('exit', (code) => reject(new Error(`control plane process exited with ${code}`)));
    });
    const { dir, pids } = JSON.parse(line) as { dir: string; pids: number[] };
    expect(pids).toHaveLength(2);
    expect(pids.every(alive)).toBe(true);
    expect(existsSync(dir)).toBe(true);

    owner.kill('SIGKILL');

    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && (pids.some(alive) || existsSync(dir))) {
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(pids.filter(alive)).toEqual([]);
    expect(existsSync(dir)).toBe(false);
  });
});
