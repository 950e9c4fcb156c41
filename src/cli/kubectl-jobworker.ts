// `kubectl jobworker …`: the kubectl plugin (kubectl finds the
// `kubectl-jobworker` executable on PATH). It resolves a JobWorker by name —
// its queues, and the URLs in the Secrets it names — and runs the matching
// `jobfleet` command against them, so on-call never copies a credential.
import { KubeClient } from '../kube/client.js';
import { resolveJobWorker } from '../kube/jobworker-target.js';
import { runDlq } from './dlq.js';

const USAGE = `usage: kubectl jobworker <command> NAME [-n NAMESPACE] [options]

commands:
  dlq list|show|replay|discard NAME [ID]   the JobWorker's dead letters (options as for "jobfleet dlq")

The JobWorker's queue and the URLs in its Secrets are read from the cluster
with your kubeconfig (KUBECONFIG, or ~/.kube/config).`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (!command || command === '--help' || command === '-h') {
    console.log(USAGE);
    return command ? 0 : 2;
  }
  if (command !== 'dlq') {
    console.error(`kubectl jobworker: unknown command "${command}"\n\n${USAGE}`);
    return 2;
  }
  // `dlq SUB NAME [options]`: the namespace and the name are ours, the rest goes to `jobfleet dlq`.
  let namespace: string | undefined;
  const args: string[] = [];
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i]!;
    if (a === '-n' || a === '--namespace') namespace = rest[++i];
    else if (a.startsWith('--namespace=')) namespace = a.slice('--namespace='.length);
    else args.push(a);
  }
  const [sub, name, ...passOn] = args;
  if (!sub || !name || name.startsWith('-')) {
    console.error(
      'usage: kubectl jobworker dlq list|show|replay|discard NAME [-n NAMESPACE] [options]',
    );
    return 2;
  }
  const client = KubeClient.fromDefault();
  namespace ??= client.kc.getContextObject(client.kc.getCurrentContext())?.namespace ?? 'default';
  const target = await resolveJobWorker(client, namespace, name);
  if ('problem' in target) {
    console.error(`kubectl jobworker: ${target.problem}`);
    return 2;
  }
  return runDlq([
    sub,
    ...passOn,
    '--queue',
    target.queue,
    '--dead-letter-queue',
    target.deadLetterQueue,
    '--claims-url',
    target.claimsUrl,
    '--amqp-url',
    target.amqpUrl,
  ]);
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (err) {
  console.error(`kubectl jobworker: ${(err as Error).message}`);
  process.exitCode = 2;
}
