// `devop doctor [--context/--kubeconfig/-n/-t] [--output json]`: checks the cluster for what devop needs; exit 1 on a
// failure.
import type { Command } from 'commander';
import { addOptions } from '../config/commander.js';
import { CONNECTION_OPTIONS, type FlagValues } from '../config/options.js';

type DoctorFlags = FlagValues<
  (typeof CONNECTION_OPTIONS)[number] | 'namespace' | 'target' | 'agentImage' | 'agentNamespace'
> & { output: string };

export function registerDoctorCommand(program: Command, onExit: (code: number) => void): void {
  addOptions(program.command('doctor'), [
    ...CONNECTION_OPTIONS,
    ['namespace', "namespace of the targets (default: the context's)"],
    ['target', 'also check this target (deploy/NAME, pod/NAME, …) and its node'],
    ['agentImage', 'agent image to check'],
    ['agentNamespace', "where agent Jobs would run (default: the target's namespace)"],
    ['output', 'lines (plain) or json'],
  ])
    .description(
      'check the kubeconfig, API server, RBAC, agent image, node runtime and Pod Security admission, with the fix ' +
        'for each problem',
    )
    .action(async (flags: DoctorFlags) => {
      const { formatDoctorReport, runDoctor } = await import('../services/doctor.js');
      const report = await runDoctor(flags);
      process.stdout.write(
        flags.output === 'json' ? `${JSON.stringify(report, null, 2)}\n` : formatDoctorReport(report),
      );
      onExit(report.ok ? 0 : 1);
    });
}
