// `devop exec [options] -- <command> [args...]`: reads devop.json with the flags over it, then runs the exec service.
import type { Command } from 'commander';
import { addExecOptions, givenFlags } from '../config/commander.js';
import { error, info, type Reporter } from '../reporter.js';
import type { OutputMode } from '../ui/output-modes.js';
import type { ExecFlags } from '../services/exec-options.js';

type ExecCommandFlags = Omit<ExecFlags, 'output'> & { output: OutputMode };

export function registerExecCommand(program: Command, onExit: (code: number) => void): void {
  const exec = program
    .command('exec')
    .description(
      "run a local command as if it were the target workload: its env, and its pod's traffic (mirrored or stolen)",
    )
    .usage('[options] -- <command> [args...]')
    .argument('[command...]', 'the local command and its arguments (after --)')
    .passThroughOptions();
  // Help groups: target and mode first (what every run names), then the rest by what it is about.
  addExecOptions(exec)
    // (so that -h joins this group rather than a lone "Options:" at the end)
    .helpOption(true)
    .action(async (command: string[], flags: ExecCommandFlags, cmd: Command) => {
      // What the run needs (the Kubernetes client among it) is loaded only when the command runs: help stays fast.
      const [
        { loadCommandConfig },
        { execOptionsFrom, requireLocalCommand, resolveExecConfig },
        { runExec },
        { outgoingChildEnvHook },
        { outgoingSettings },
        { createReporter },
        { sweepSessionDirs },
      ] = await Promise.all([
        import('./config-file.js'),
        import('../services/exec-options.js'),
        import('../services/exec.js'),
        import('../outgoing/exec-hook.js'),
        import('../outgoing/options.js'),
        import('../ui/index.js'),
        import('../process/session-dirs.js'),
      ]);
      const { config, dir } = loadCommandConfig(flags.config, undefined, undefined, {
        flags,
        trust: flags.trustConfig,
      });
      requireLocalCommand(command);
      const given = givenFlags<ExecCommandFlags>(cmd);
      const resolved = resolveExecConfig(given, config, dir);
      const options = execOptionsFrom(given, resolved, command);
      options.childEnvHooks = [
        ...(options.childEnvHooks ?? []),
        outgoingChildEnvHook(outgoingSettings(resolved)),
        // After the outgoing hook: --in-cluster writes its service-account files into the DEVOP_ROOT that one made.
        // The shadow's kubeconfig writer (and its YAML library) loads only for a run that has one.
        ...(options.shadow ? [(await import('../shadow/kubeconfig.js')).shadowChildEnvHook(options.shadow)] : []),
      ];
      const reporter = createReporter({ output: flags.output, verbose: Boolean(flags.verbose) });
      // Directories of sessions whose devop was killed (kill -9 skips their cleanup): they may hold tokens.
      for (const dir of await sweepSessionDirs())
        if (dir.removed) info(reporter, `removed ${dir.path}, left by devop ${dir.pid} (gone)`);
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
    if (json) error(reporter, err);
    throw err;
  } finally {
    await reporter.close();
  }
}
