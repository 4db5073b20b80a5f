// `devop clean [--dry-run] [-n NS | -A] [--force]`: removes devop agents, Jobs and steal Leases left in the cluster.
import type { Command } from 'commander';
import { addOptions } from '../config/commander.js';
import { CONNECTION_OPTIONS, type FlagValues } from '../config/options.js';
import { UserError } from '../../shared/errors.js';

type CleanFlags = FlagValues<
  (typeof CONNECTION_OPTIONS)[number] | 'namespace' | 'allNamespaces' | 'dryRun' | 'force'
> & { output: string };

export function registerCleanCommand(program: Command, onExit: (code: number) => void): void {
  addOptions(program.command('clean'), [
    ...CONNECTION_OPTIONS,
    ['namespace', "namespace (default: the context's)"],
    'allNamespaces',
    'dryRun',
    'force',
    ['output', 'lines (plain) or json'],
  ])
    .description(
      'remove what devop left in the cluster: finished or orphaned agent Jobs and pods, expired steal Leases; lists ' +
        'running ephemeral agents',
    )
    .action(async (flags: CleanFlags) => {
      if (flags.namespace && flags.allNamespaces) throw new UserError('-n and -A were both given', 'pass one of them');
      const { formatCleanReport, runClean } = await import('../services/clean.js');
      const report = await runClean(flags);
      process.stdout.write(
        flags.output === 'json' ? `${JSON.stringify(report, null, 2)}\n` : formatCleanReport(report),
      );
      onExit(report.items.some((i) => i.removed === false) ? 1 : 0);
    });
}
