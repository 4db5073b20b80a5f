// `devop exec [options] -- <command> [args...]`: parses and merges the flags over devop.json, then runs the exec service.
import { Command, Option } from 'commander';
import { isUserError } from '../../shared/errors.js';
import type { Reporter } from '../reporter.js';
import { OUTPUT_MODES, type OutputMode } from '../ui/output-modes.js';
import type { ExecFlags } from '../services/exec-options.js';
import { addConnectionOptions } from './connection-flags.js';
import { addOutgoingOptions, outgoingSettingsFrom } from '../outgoing/options.js';

const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

interface ExecCommandFlags extends ExecFlags {
  config?: string;
  output: OutputMode;
}

export function registerExecCommand(program: Command, onExit: (code: number) => void): void {
  // Help groups: target and mode first (what every run names), then the rest by what it is about.
  const exec = program
    .command('exec')
    .description('run a local command as if it were the target workload: its env, and its pod\'s traffic (mirrored or stolen)')
    .usage('[options] -- <command> [args...]')
    .argument('[command...]', 'the local command and its arguments (after --)')
    .passThroughOptions()
    .optionsGroup('Target and mode:')
    .option('-t, --target <target>', 'pod/NAME, deploy/NAME, sts/NAME or rollout/NAME, optionally /container/NAME; or targetless')
    .option('-n, --namespace <namespace>', "the target's namespace (default: the context's)")
    .option('--steal', 'take the pod\'s traffic: the local command answers instead of the pod')
    .option('--mirror', 'copy the pod\'s traffic to the local command; the pod still answers (the default)')
    .option('-p, --port <REMOTE[:LOCAL]>', "pod port to steal/mirror, repeatable (default: the container's declared ports)", collect)
    .option('--all-pods', 'steal/mirror on every Ready pod of a deploy/sts target (new pods join, gone pods drop)')
    .optionsGroup('HTTP filters (steal only matching requests):')
    .option('--http-header-filter <"name: regex">', 'only HTTP requests with a matching header go to the local command')
    .option('--http-path-filter <regex>', 'only HTTP requests whose path matches go to the local command')
    .option('--http-method-filter <method>', 'only HTTP requests with this method go to the local command')
    .optionsGroup('Incoming connections:')
    .option('--no-flush', "do not close the pod's existing connections when stealing starts (or resumes)")
    .option('--steal-probes', 'also steal connections from the node (kubelet probes)')
    .optionsGroup('Environment:')
    .option('--env-include <glob>', 'pod env vars to give the local command, repeatable (default: all)', collect)
    .option('--env-exclude <glob>', 'pod env vars to leave out, repeatable', collect)
    .option('--env-file <path>', 'dotenv file applied over the pod env')
    .optionsGroup('Outgoing traffic and files:');
  addOutgoingOptions(exec).optionsGroup('Cluster and agent:');
  addConnectionOptions(exec)
    .option('--agent-image <image>', 'agent image (default: the one of this devop version)')
    .option('--agent-namespace <namespace>', "where the agent Job runs (default: the target's namespace)")
    .option('--agent-privileged', 'run the agent privileged (when capabilities are not enough on this node)')
    .option('--ephemeral', 'run the agent as an ephemeral container in the target pod instead of a Job')
    .option('--agent-ttl <seconds>', 'ttlSecondsAfterFinished of the agent Job')
    .option('--startup-timeout <seconds>', 'how long to wait for the agent, and for the local command to listen')
    .optionsGroup('Config and output:')
    .option('-f, --config <path>', 'devop.json to read (default: ./devop.json if present)')
    .addOption(new Option('--output <mode>', 'output: auto (terminal UI when interactive), plain or json').choices(OUTPUT_MODES).default('auto'))
    .option('-v, --verbose', 'more output, and stacks of internal errors')
    // (so that -h joins this group rather than a lone "Options:" at the end)
    .helpOption(true)
    .action(async (command: string[], flags: ExecCommandFlags, cmd: Command) => {
      // What the run needs (the Kubernetes client among it) is loaded only when the command runs: help stays fast.
      const [{ loadCommandConfig }, { mergeExecOptions }, { runExec }, { outgoingChildEnvHook }, { createReporter }] = await Promise.all([
        import('./config-file.js'),
        import('../services/exec-options.js'),
        import('../services/exec.js'),
        import('../outgoing/exec-hook.js'),
        import('../ui/index.js'),
      ]);
      const { config, dir } = loadCommandConfig(flags.config);
      const explicitFlush = cmd.getOptionValueSource('flush') === 'cli' ? flags.flush : undefined;
      const options = mergeExecOptions({ ...flags, flush: explicitFlush }, config, command, dir);
      options.childEnvHooks = [...(options.childEnvHooks ?? []), outgoingChildEnvHook(outgoingSettingsFrom(cmd, config))];
      const reporter = createReporter({ output: flags.output, verbose: Boolean(flags.verbose) });
      onExit(await runWithReporter(reporter, flags.output === 'json', () => runExec(options, reporter)));
    });
}

/**
 * Runs a service and closes the reporter. A failure is rethrown for the top-level handler (which prints it on stderr);
 * in JSON mode it is also an `error` event, so consumers of stdout see it.
 */
export async function runWithReporter(reporter: Reporter, json: boolean, run: () => Promise<number>): Promise<number> {
  try {
    return await run();
  } catch (err) {
    if (json) reporter.emit({ type: 'error', message: err instanceof Error ? err.message : String(err), ...(isUserError(err) ? { hint: err.hint } : {}) });
    throw err;
  } finally {
    await reporter.close();
  }
}
