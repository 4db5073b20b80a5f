// Registers `devop vscode init [exec flags] [-- command…]`: a VS Code background task running `devop exec`, a Node
// attach configuration around it, and devop.json's $schema.
import type { Command } from 'commander';
import { relative, resolve } from 'node:path';
import { UserError } from '../../shared/errors.js';
import { addOptions } from '../config/commander.js';
import { EXEC_OPTIONS, OPTIONS, type OptionSpec } from '../config/options.js';

/** The `devop exec` flags that `vscode init` accepts and writes into the task (the task sets --output itself). */
const TASK_EXEC_OPTIONS = EXEC_OPTIONS.filter((name) => name !== 'output');

/** Rebuilds the exec flags the user gave, in the table's order, as argv for the task. */
function execArgsFrom(command: Command): string[] {
  const args: string[] = [];
  for (const name of TASK_EXEC_OPTIONS) {
    if (command.getOptionValueSource(name) !== 'cli') continue;
    const spec: OptionSpec = OPTIONS[name];
    const option = command.options.find((candidate) => candidate.attributeName() === name);
    const flag = option?.long ?? option?.short ?? '';
    const value: unknown = command.getOptionValue(name);
    if (spec.repeatable) for (const item of value as string[]) args.push(flag, item);
    else if (option?.required) args.push(flag, String(value));
    else args.push(flag);
  }
  return args;
}

export function registerVscodeCommand(program: Command): void {
  const vscode = program.command('vscode').description('set up VS Code to run and debug the local command under devop');
  const init = vscode
    .command('init')
    .description(
      'write .vscode/tasks.json (background `devop exec` task), .vscode/launch.json (Node attach) and devop.json ' +
        '$schema',
    )
    .argument('[command...]', 'the local command (after --); default: node <package.json main>');
  addOptions(init, ['dir', 'label', 'inspectPort', 'devopCommand', ...TASK_EXEC_OPTIONS]);
  type InitOptions = { dir?: string; label: string; inspectPort: string; devopCommand?: string };
  init.action(async (localCommand: string[], options: InitOptions, command: Command) => {
    const inspectPort = Number(options.inspectPort);
    if (!Number.isInteger(inspectPort) || inspectPort < 1 || inspectPort > 65535) {
      throw new UserError(
        `--inspect-port ${options.inspectPort} is not a port`,
        'pass a port 1-65535, e.g. --inspect-port 9229',
      );
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
    process.stdout.write(
      `run and debug: "devop: attach" (starts task "${options.label}": ${String(result.task.detail)})\n`,
    );
  });
}
