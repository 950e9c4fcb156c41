// `jobfleet`: the operator's command line for on-call work against a claims
// database and its queues. Subcommands live in their own modules; this file
// only dispatches and turns errors into exit codes (0 ok, 1 a finding, 2 the
// command could not run).
import { JOBFLEET_USAGE } from './help.js';
import { runDlq } from './dlq.js';
import { runVerify } from './verify.js';

const commands: Record<string, (argv: string[]) => Promise<number>> = {
  verify: runVerify,
  dlq: runDlq,
};

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h') {
    console.log(JOBFLEET_USAGE);
    return name ? 0 : 2;
  }
  const command = commands[name];
  if (!command) {
    console.error(`jobfleet: unknown command "${name}"\n\n${JOBFLEET_USAGE}`);
    return 2;
  }
  try {
    return await command(rest);
  } catch (err) {
    console.error(`jobfleet ${name}: ${(err as Error).message}`);
    return 2;
  }
}

process.exitCode = await main(process.argv.slice(2));
