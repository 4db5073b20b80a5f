// `devop clean [--dry-run] [-n NS | -A] [--force]`: removes devop agents, Jobs and steal Leases left in the cluster.
import { Command, Option } from 'commander';
import { addConnectionOptions, type ConnectionFlags } from './connection-flags.js';
import { UserError } from '../../shared/errors.js';

interface CleanFlags extends ConnectionFlags {
  namespace?: string;
  allNamespaces?: boolean;
  dryRun?: boolean;
  force?: boolean;
  output: string;
}

export function registerCleanCommand(program: Command, onExit: (code: number) => void): void {
  addConnectionOptions(program.command('clean'))
    .description('remove what devop left in the cluster: finished or orphaned agent Jobs and pods, expired steal Leases; lists running ephemeral agents')
    .option('-n, --namespace <namespace>', "namespace (default: the context's)")
    .option('-A, --all-namespaces', 'look in every namespace')
    .option('--dry-run', 'only list what would be removed')
    .option('--force', 'also remove agents that still run beside a live target pod (they may serve a session)')
    .addOption(new Option('--output <mode>', 'lines (plain) or json').choices(['auto', 'plain', 'json']).default('auto'))
    .action(async (flags: CleanFlags) => {
      if (flags.namespace && flags.allNamespaces) throw new UserError('-n and -A were both given', 'pass one of them');
      const { formatCleanReport, runClean } = await import('../services/clean.js');
      const report = await runClean(flags);
      process.stdout.write(flags.output === 'json' ? `${JSON.stringify(report, null, 2)}\n` : formatCleanReport(report));
      onExit(report.items.some((i) => i.removed === false) ? 1 : 0);
    });
}
