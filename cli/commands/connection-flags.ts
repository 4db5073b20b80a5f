// The flags that say how to reach the cluster, shared by every command that talks to it: --context, --kubeconfig and
// --request-timeout (kubectl's names and syntax).
import type { Command } from 'commander';

export interface ConnectionFlags {
  context?: string;
  kubeconfig?: string;
  requestTimeout?: string;
}

export function addConnectionOptions(command: Command): Command {
  return command
    .option('--context <context>', 'kubeconfig context (default: the current one)')
    .option('--kubeconfig <path>', 'kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)')
    .option(
      '--request-timeout <duration>',
      'how long to wait for the API server to answer one request: 10s, 1m, seconds; 0 = no limit (default: 30s)',
    );
}
