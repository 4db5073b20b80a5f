// `devop ls [-n NS] [--output json]`: the targets of a namespace (deployments, statefulsets, pods) with ready counts.
import { Command, Option } from 'commander';
import { addConnectionOptions, type ConnectionFlags } from './connection-flags.js';

export function registerLsCommand(program: Command): void {
  addConnectionOptions(program.command('ls'))
    .description('list what can be targeted: deployments, statefulsets and pods, with ready counts and ports')
    .option('-n, --namespace <namespace>', "namespace (default: the context's)")
    .addOption(new Option('--output <mode>', 'table (plain) or json').choices(['auto', 'plain', 'json']).default('auto'))
    .action(async (flags: ConnectionFlags & { namespace?: string; output: string }) => {
      // The service (and the Kubernetes client it loads) only when the command runs: help stays fast.
      const { formatLsTable, listTargets } = await import('../services/ls.js');
      const result = await listTargets({ namespace: flags.namespace, context: flags.context, kubeconfig: flags.kubeconfig, requestTimeout: flags.requestTimeout });
      process.stdout.write(flags.output === 'json' ? `${JSON.stringify(result, null, 2)}\n` : formatLsTable(result));
    });
}
