// `devop port-forward -L [LOCAL:]HOST:PORT ...`: forwards local ports to cluster names or IPs through an agent (targetless,
// or the target's with -t); prints the local addresses on stdout and runs until Ctrl-C.
import { Command, Option } from 'commander';
import type { Reporter } from '../reporter.js';
import { OUTPUT_MODES, type OutputMode } from '../ui/output-modes.js';
import { addConnectionOptions, type ConnectionFlags } from './connection-flags.js';

const collect = (value: string, previous: string[] = []): string[] => [...previous, value];
const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

interface PortForwardFlags extends ConnectionFlags {
  local?: string[];
  target?: string;
  namespace?: string;
  address: string;
  agentImage?: string;
  agentNamespace?: string;
  startupTimeout?: string;
  config?: string;
  output: OutputMode;
  verbose?: boolean;
}

export function registerPortForwardCommand(program: Command): void {
  addConnectionOptions(program.command('port-forward'))
    .description('forward local ports to cluster names or IPs, connected from a pod (a targetless agent, or the target\'s)')
    .option('-L, --local <[LOCAL:]HOST:PORT>', 'forward 127.0.0.1:LOCAL (default: PORT) to HOST:PORT as the pod reaches it, repeatable', collect)
    .option('-t, --target <target>', 'connect from this workload\'s pod (pod/NAME, deploy/NAME, …); default: a targetless agent')
    .option('-n, --namespace <namespace>', "namespace of the target / of the targetless agent (default: the context's)")
    .option('--address <address>', 'local address to listen on', '127.0.0.1')
    .option('--agent-image <image>', 'agent image (default: the one of this devop version)')
    .option('--agent-namespace <namespace>', 'where the agent runs (default: the namespace)')
    .option('--startup-timeout <seconds>', 'how long to wait for the agent')
    .option('-f, --config <path>', 'devop.json to read (default: ./devop.json if present)')
    .addOption(new Option('--output <mode>', 'output: auto, plain or json').choices(OUTPUT_MODES).default('auto'))
    .option('-v, --verbose', 'more output, and stacks of internal errors')
    .action(async (flags: PortForwardFlags) => {
      // What the run needs (the Kubernetes client among it) is loaded only when the command runs: help stays fast.
      const [{ runPortForward }, { SESSION_DEFAULTS }, { parseDuration }, { createReporter }, { loadCommandConfig }] = await Promise.all([
        import('../services/port-forward.js'),
        import('../session/connect.js'),
        import('../services/exec-options.js'),
        import('../ui/index.js'),
        import('./config-file.js'),
      ]);
      const { config } = loadCommandConfig(flags.config);
      // Port-forward has no traffic table to show: plain lines (addresses to copy) unless JSON is asked for.
      const reporter: Reporter = createReporter({ output: flags.output === 'json' ? 'json' : 'plain', verbose: Boolean(flags.verbose) });
      const abort = new AbortController();
      const onSignal = (): void => abort.abort();
      for (const signal of STOP_SIGNALS) process.on(signal, onSignal);
      try {
        await runPortForward(
          {
            forwards: flags.local ?? [],
            // Only -t: devop.json's target is exec's; port-forward is targetless unless asked.
            target: flags.target,
            namespace: flags.namespace ?? config.namespace,
            context: flags.context ?? config.context,
            kubeconfig: flags.kubeconfig ?? config.kubeconfig,
            requestTimeout: flags.requestTimeout ?? config.requestTimeout,
            address: flags.address,
            agentImage: flags.agentImage ?? config.agent.image ?? SESSION_DEFAULTS.agentImage,
            agentNamespace: flags.agentNamespace ?? config.agent.namespace,
            startupTimeoutMs: flags.startupTimeout !== undefined ? parseDuration(flags.startupTimeout, '--startup-timeout') : config.agent.startupTimeoutSeconds * 1000,
            verbose: Boolean(flags.verbose),
            signal: abort.signal,
            onListening: (listening) => {
              for (const { local, forward } of listening) {
                reporter.emit({ type: 'log', level: 'info', message: `forwarding ${local} -> ${forward.host}:${forward.port}` });
                // The addresses are this command's result: on stdout, unless stdout is the NDJSON stream.
                if (flags.output !== 'json') process.stdout.write(`${local} -> ${forward.host}:${forward.port}\n`);
              }
            },
          },
          reporter,
        );
      } finally {
        for (const signal of STOP_SIGNALS) process.off(signal, onSignal);
        await reporter.close();
      }
    });
}
