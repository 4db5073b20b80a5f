// Registers `devop vscode init [exec flags] [-- command…]`: a VS Code background task running `devop exec`, a Node
// attach configuration around it, and devop.json's $schema.
import { Command, Option } from 'commander';
import { relative, resolve } from 'node:path';
import { UserError } from '../../shared/errors.js';

const DEFAULT_TASK_LABEL = 'devop: exec';
/** Node's default inspector port. */
const DEFAULT_INSPECT_PORT = 9229;

/** The `devop exec` flags that `vscode init` accepts and writes into the task, as exec spells them. */
const EXEC_FLAGS: ReadonlyArray<{ flags: string; description: string; kind: 'value' | 'list' | 'switch' }> = [
  { flags: '-t, --target <target>', description: 'what to run as: pod/NAME, deploy/NAME, … or targetless', kind: 'value' },
  { flags: '-n, --namespace <namespace>', description: "the target's namespace", kind: 'value' },
  { flags: '--context <context>', description: 'kubeconfig context', kind: 'value' },
  { flags: '--kubeconfig <file>', description: 'kubeconfig file', kind: 'value' },
  { flags: '--steal', description: 'steal the traffic (the local command answers)', kind: 'switch' },
  { flags: '--mirror', description: 'mirror the traffic (the pod answers, the local command gets a copy)', kind: 'switch' },
  { flags: '-p, --port <REMOTE[:LOCAL]>', description: 'port to steal/mirror (repeatable)', kind: 'list' },
  { flags: '--http-header-filter <filter>', description: 'only requests with this header, e.g. "x-user: alice"', kind: 'value' },
  { flags: '--http-path-filter <regex>', description: 'only requests whose path matches', kind: 'value' },
  { flags: '--http-method-filter <method>', description: 'only requests with this method', kind: 'value' },
  { flags: '--no-flush', description: "keep the pod's existing connections when stealing starts", kind: 'switch' },
  { flags: '--steal-probes', description: 'also steal kubelet probes', kind: 'switch' },
  { flags: '--env-include <glob>', description: 'pod env vars to pass (repeatable)', kind: 'list' },
  { flags: '--env-exclude <glob>', description: 'pod env vars to leave out (repeatable)', kind: 'list' },
  { flags: '--env-file <file>', description: 'dotenv file applied over the pod env', kind: 'value' },
  { flags: '--agent-image <image>', description: 'agent image', kind: 'value' },
  { flags: '--agent-namespace <namespace>', description: 'namespace of the agent Job', kind: 'value' },
  { flags: '--agent-privileged', description: 'run the agent privileged', kind: 'switch' },
  { flags: '--ephemeral', description: 'run the agent as an ephemeral container', kind: 'switch' },
  { flags: '--agent-ttl <seconds>', description: 'agent lifetime after its last session', kind: 'value' },
  { flags: '--startup-timeout <seconds>', description: 'how long to wait for the agent', kind: 'value' },
  { flags: '-f, --config <file>', description: 'devop.json to use', kind: 'value' },
];

function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/** Rebuilds the exec flags the user gave, in the table's order, as argv for the task. */
function execArgsFrom(command: Command): string[] {
  const args: string[] = [];
  for (const spec of EXEC_FLAGS) {
    const option = command.options.find((candidate) => candidate.flags === spec.flags);
    if (!option) continue;
    const key = option.attributeName();
    if (command.getOptionValueSource(key) !== 'cli') continue;
    const value: unknown = command.getOptionValue(key);
    const flag = option.long ?? option.short ?? '';
    if (spec.kind === 'switch') args.push(flag);
    else if (spec.kind === 'list') for (const item of value as string[]) args.push(flag, item);
    else args.push(flag, String(value));
  }
  return args;
}

export function registerVscodeCommand(program: Command): void {
  const vscode = program.command('vscode').description('set up VS Code to run and debug the local command under devop');
  const init = vscode
    .command('init')
    .description('write .vscode/tasks.json (background `devop exec` task), .vscode/launch.json (Node attach) and devop.json $schema')
    .argument('[command...]', 'the local command (after --); default: node <package.json main>')
    .option('--dir <folder>', 'the workspace folder (default: the current folder)')
    .option('--label <label>', 'label of the task', DEFAULT_TASK_LABEL)
    .option('--inspect-port <port>', 'Node inspector port the debugger attaches to', String(DEFAULT_INSPECT_PORT))
    .option('--devop-command <command>', 'how the task starts devop (split on spaces; default: this devop)');
  for (const spec of EXEC_FLAGS) {
    init.addOption(spec.kind === 'list' ? new Option(spec.flags, spec.description).argParser(collect) : new Option(spec.flags, spec.description));
  }
  type InitOptions = { dir?: string; label: string; inspectPort: string; devopCommand?: string };
  init.action(async (localCommand: string[], options: InitOptions, command: Command) => {
    const inspectPort = Number(options.inspectPort);
    if (!Number.isInteger(inspectPort) || inspectPort < 1 || inspectPort > 65535) {
      throw new UserError(`--inspect-port ${options.inspectPort} is not a port`, 'pass a port 1-65535, e.g. --inspect-port 9229');
    }
    const { initVscode } = await import('../services/vscode.js');
    const result = initVscode({
      workspace: resolve(options.dir ?? '.'),
      execArgs: execArgsFrom(command),
      localCommand,
      devopCommand: options.devopCommand?.split(/\s+/).filter(Boolean),
      inspectPort,
      taskLabel: options.label,
    });
    for (const file of result.files) {
      const shown = relative(process.cwd(), file.path) || file.path;
      process.stdout.write(`${file.action} ${shown}\n`);
    }
    for (const note of result.notes) process.stderr.write(`devop: note: ${note}\n`);
    process.stdout.write(`run and debug: "devop: attach" (starts task "${options.label}": ${String(result.task.detail)})\n`);
  });
}
