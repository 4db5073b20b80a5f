// `devop doctor [--context/--kubeconfig/-n/-t] [--output json]`: checks the cluster for what devop needs; exit 1 on a failure.
import { Command, Option } from 'commander';
import { addConnectionOptions, type ConnectionFlags } from './connection-flags.js';

interface DoctorFlags extends ConnectionFlags {
  namespace?: string;
  target?: string;
  agentImage?: string;
  agentNamespace?: string;
  output: string;
}

export function registerDoctorCommand(program: Command, onExit: (code: number) => void): void {
  addConnectionOptions(program.command('doctor'))
    .description('check the kubeconfig, API server, RBAC, agent image, node runtime and Pod Security admission, with the fix for each problem')
    .option('-n, --namespace <namespace>', "namespace of the targets (default: the context's)")
    .option('-t, --target <target>', 'also check this target (deploy/NAME, pod/NAME, …) and its node')
    .option('--agent-image <image>', 'agent image to check')
    .option('--agent-namespace <namespace>', "where agent Jobs would run (default: the target's namespace)")
    .addOption(new Option('--output <mode>', 'lines (plain) or json').choices(['auto', 'plain', 'json']).default('auto'))
    .action(async (flags: DoctorFlags) => {
      const { formatDoctorReport, runDoctor } = await import('../services/doctor.js');
      const report = await runDoctor(flags);
      process.stdout.write(flags.output === 'json' ? `${JSON.stringify(report, null, 2)}\n` : formatDoctorReport(report));
      onExit(report.ok ? 0 : 1);
    });
}
