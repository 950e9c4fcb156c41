// Kills the test control plane when the process that started it dies, even by
// SIGKILL (no teardown hook runs then): orphaned etcd and apiservers would
// hold ports and disk until the machine restarts.
//
//   node reaper.mjs <ownerPid> <dir> <pid>...
import { rmSync } from 'node:fs';

const [ownerArg, dir, ...pidArgs] = process.argv.slice(2);
const owner = Number(ownerArg);
const pids = pidArgs.map(Number);

const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

const signal = (sig) => {
  for (const pid of pids) {
    try {
      process.kill(pid, sig);
    } catch {
      // already gone
    }
  }
};

const timer = setInterval(() => {
  if (alive(owner)) return;
  clearInterval(timer);
  signal('SIGTERM');
  setTimeout(() => {
    signal('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  }, 3000);
}, 500);

// The owner stops us with SIGTERM after its own orderly teardown.
process.on('SIGTERM', () => process.exit(0));
