// `devop ls [-n NS] [--output json]`: the targets of a namespace (deployments, statefulsets, pods) with ready counts.
import type { Command } from 'commander';
import { addOptions } from '../config/commander.js';
import { CONNECTION_OPTIONS, type FlagValues } from '../config/options.js';

type LsFlags = FlagValues<(typeof CONNECTION_OPTIONS)[number] | 'namespace'> & { output: string };

export function registerLsCommand(program: Command): void {
  addOptions(program.command('ls'), [
    ...CONNECTION_OPTIONS,
    ['namespace', "namespace (default: the context's)"],
    ['output', 'table (plain) or json'],
  ])
    .description('list what can be targeted: deployments, statefulsets and pods, with ready counts and ports')
    .action(async (flags: LsFlags) => {
      // The service (and the Kubernetes client it loads) only when the command runs: help stays fast.
      const { formatLsTable, listTargets } = await import('../services/ls.js');
      const result = await listTargets({
        namespace: flags.namespace,
        context: flags.context,
        kubeconfig: flags.kubeconfig,
        requestTimeout: flags.requestTimeout,
      });
      process.stdout.write(flags.output === 'json' ? `${JSON.stringify(result, null, 2)}\n` : formatLsTable(result));
    });
}
