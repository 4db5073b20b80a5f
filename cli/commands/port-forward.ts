// `devop port-forward -L [LOCAL:]HOST:PORT ...`: forwards local ports to cluster names or IPs through an agent
// (targetless, or the target's with -t); prints the local addresses on stdout and runs until Ctrl-C.
import type { Command } from 'commander';
import { addOptions, givenFlags, type NamesOf } from '../config/commander.js';
import { CONNECTION_OPTIONS, type FlagValues } from '../config/options.js';
import { info, type Reporter } from '../reporter.js';
import type { OutputMode } from '../ui/output-modes.js';

const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

const PORT_FORWARD_OPTIONS = [
  ...CONNECTION_OPTIONS,
  'local',
  ['target', "connect from this workload's pod (pod/NAME, deploy/NAME, …); default: a targetless agent"],
  ['namespace', "namespace of the target / of the targetless agent (default: the context's)"],
  'address',
  'agentImage',
  ['agentNamespace', 'where the agent runs (default: the namespace)'],
  ['startupTimeout', 'how long to wait for the agent'],
  ['allowHostNetwork', "connect from a pod on its node's network (hostNetwork: true)"],
  'config',
  'trustConfig',
  ['output', 'output: auto, plain or json'],
  'verbose',
] as const;

type PortForwardFlags = Omit<FlagValues<NamesOf<typeof PORT_FORWARD_OPTIONS>>, 'address' | 'output'> & {
  address: string;
  output: OutputMode;
};

export function registerPortForwardCommand(program: Command): void {
  addOptions(program.command('port-forward'), PORT_FORWARD_OPTIONS)
    .description(
      "forward local ports to cluster names or IPs, connected from a pod (a targetless agent, or the target's)",
    )
    .action(async (_flags: PortForwardFlags, cmd: Command) => {
      const flags = givenFlags<PortForwardFlags>(cmd);
      // What the run needs (the Kubernetes client among it) is loaded only when the command runs: help stays fast.
      const [{ runPortForward }, { SESSION_DEFAULTS }, { withFlags }, { createReporter }, { loadCommandConfig }] =
        await Promise.all([
          import('../services/port-forward.js'),
          import('../session/connect.js'),
          import('../config/flags.js'),
          import('../ui/index.js'),
          import('./config-file.js'),
        ]);
      const file = loadCommandConfig(flags.config, undefined, undefined, { flags, trust: flags.trustConfig });
      // The flags over devop.json; -t only from the flag (devop.json's target is exec's): targetless unless asked.
      const config = withFlags({ ...file.config, target: undefined }, flags);
      // Port-forward has no traffic table to show: plain lines (addresses to copy) unless JSON is asked for.
      const reporter: Reporter = createReporter({
        output: flags.output === 'json' ? 'json' : 'plain',
        verbose: Boolean(flags.verbose),
      });
      const abort = new AbortController();
      const onSignal = (): void => abort.abort();
      for (const signal of STOP_SIGNALS) process.on(signal, onSignal);
      try {
        await runPortForward(
          {
            forwards: flags.local ?? [],
            target: config.target,
            namespace: config.namespace,
            context: config.context,
            kubeconfig: config.kubeconfig,
            requestTimeout: config.requestTimeout,
            address: flags.address,
            agentImage: config.agent.image ?? SESSION_DEFAULTS.agentImage,
            agentNamespace: config.agent.namespace,
            allowHostNetwork: config.allowHostNetwork,
            startupTimeoutMs: Math.round(config.agent.startupTimeoutSeconds * 1000),
            verbose: Boolean(flags.verbose),
            signal: abort.signal,
            onListening: (listening) => {
              for (const { local, forward } of listening) {
                info(reporter, `forwarding ${local} -> ${forward.host}:${forward.port}`);
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
