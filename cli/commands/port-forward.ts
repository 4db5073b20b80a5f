// `devop port-forward -L [LOCAL:]HOST:PORT ... -R [REMOTE:]HOST:PORT ...`: forwards local ports to cluster names or IPs
// through an agent (targetless, or the target's with -t), and steals (or mirrors) the target pod's ports to local
// addresses; prints what goes where on stdout and runs until Ctrl-C.
import type { Command } from 'commander';
import { addOptions, givenFlags, type NamesOf } from '../config/commander.js';
import { CONNECTION_OPTIONS, type FlagValues } from '../config/options.js';
import { info, type Reporter } from '../reporter.js';
import type { OutputMode } from '../ui/output-modes.js';

const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

const PORT_FORWARD_OPTIONS = [
  ...CONNECTION_OPTIONS,
  'local',
  'remote',
  [
    'target',
    "connect from this workload's pod (pod/NAME, deploy/NAME, …), whose ports -R takes; default: a targetless agent " +
      "(with -R: devop.json's target)",
  ],
  ['steal', "-R takes the pod's traffic: the local address answers instead of the pod (the default)"],
  ['mirror', "-R copies the pod's traffic to the local address; the pod still answers"],
  ['httpHeaderFilter', '-R takes only HTTP requests with a matching header; the pod answers the rest'],
  ['httpPathFilter', '-R takes only HTTP requests whose path matches; the pod answers the rest'],
  ['httpMethodFilter', '-R takes only HTTP requests with this method; the pod answers the rest'],
  [
    'httpBodyFilter',
    "-R takes only HTTP requests whose JSON body's value at the path matches; the pod answers the rest",
  ],
  ['flush', "do not close the pod's existing connections when -R starts stealing"],
  ['stealProbes', '-R also takes connections from the node (kubelet probes)'],
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
      "forward local ports to cluster names or IPs, connected from a pod (a targetless agent, or the target's) " +
        "(-L), and steal or mirror the target pod's ports to local addresses (-R)",
    )
    .action(async (_flags: PortForwardFlags, cmd: Command) => {
      const flags = givenFlags<PortForwardFlags>(cmd);
      // What the run needs (the Kubernetes client among it) is loaded only when the command runs: help stays fast.
      const [
        { runPortForward },
        { localAddress },
        { SESSION_DEFAULTS },
        { withFlags },
        { createReporter },
        { loadCommandConfig },
        { UserError },
        { httpFilterOf },
      ] = await Promise.all([
        import('../services/port-forward.js'),
        import('../services/port-forward-remote.js'),
        import('../session/connect.js'),
        import('../config/flags.js'),
        import('../ui/index.js'),
        import('./config-file.js'),
        import('../../shared/errors.js'),
        import('../services/exec-options.js'),
      ]);
      if (flags.steal && flags.mirror)
        throw new UserError('--steal and --mirror were both given', 'pass one of them (the default is --steal)');
      const file = loadCommandConfig(flags.config, undefined, undefined, { flags, trust: flags.trustConfig });
      // The flags over devop.json; -t from the flag (devop.json's target is exec's): targetless unless asked, but -R
      // takes a pod's port, so it falls back to the file's target, the project's workload.
      const config = withFlags({ ...file.config, target: undefined }, flags);
      const remote = config.portForward.remote;
      const target = config.target ?? (remote.length > 0 ? file.config.target : undefined);
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
            forwards: config.portForward.local,
            remote: {
              specs: remote,
              where: flags.remote ? '-R' : `${file.path ?? 'devop.json'}: portForward.remote`,
              traffic: {
                // Steal unless --mirror: port-forward -R exists to answer the pod's port from here.
                mode: flags.mirror ? 'mirror' : 'steal',
                httpFilter: httpFilterOf(config),
                flush: config.incoming.flush,
                stealProbes: config.incoming.stealProbes,
              },
            },
            target,
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
            onTaken: (taken) => {
              const mode = flags.mirror ? 'mirror' : 'steal';
              for (const { pod, forward } of taken) {
                const to = localAddress(forward);
                info(
                  reporter,
                  `${mode === 'steal' ? 'stealing' : 'mirroring'} port ${forward.remotePort} of pod ${pod} to ${to}`,
                );
                if (flags.output !== 'json')
                  process.stdout.write(`pod/${pod}:${forward.remotePort} -> ${to} (${mode})\n`);
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
