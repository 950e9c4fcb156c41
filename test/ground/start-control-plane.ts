// Starts a control plane and prints where it is, then waits to be stopped:
// `node --import tsx test/ground/start-control-plane.ts [--no-workloads]`.
// Used by the teardown test (it SIGKILLs this process) and by people who want
// a throwaway apiserver: export KUBECONFIG=<printed kubeconfigPath>.
import { startControlPlane } from './control-plane.js';

const plane = await startControlPlane({ workloads: !process.argv.includes('--no-workloads') });
console.log(
  JSON.stringify({ kubeconfigPath: plane.kubeconfigPath, dir: plane.dir, pids: plane.pids }),
);
const stop = () => {
  plane.stop().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
