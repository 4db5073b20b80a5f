// Registers `devop config validate [FILE | -f FILE]` (one line per problem) and `devop config schema` (JSON Schema).
import type { Command } from 'commander';
import { optionFor } from '../config/commander.js';
import { CONFIG_FILE_NAME } from '../config/file-name.js';
import { UserError } from '../../shared/errors.js';

export function registerConfigCommand(program: Command): void {
  const config = program.command('config').description('check devop.json, print its JSON Schema');

  config
    .command('validate')
    .description('check a devop.json: one line per problem naming the key, its value and what is accepted')
    .argument('[file]', `the config file to check (default: ./${CONFIG_FILE_NAME})`)
    .addOption(optionFor(['config', 'the config file to check, as exec takes it']))
    .action(async (argument: string | undefined, options: { config?: string }) => {
      if (argument !== undefined && options.config !== undefined && argument !== options.config) {
        const problem = `two files to check: ${argument} and -f ${options.config}`;
        throw new UserError(problem, 'name one file, as an argument or with -f');
      }
      // The config schema (zod) only when the command runs: help stays fast.
      const { validateConfigFile } = await import('../services/config.js');
      const named = argument ?? options.config;
      const { file, problems } = validateConfigFile(named ?? CONFIG_FILE_NAME, named !== undefined);
      if (problems.length === 0) {
        process.stdout.write(`${file}: valid\n`);
        return;
      }
      process.stdout.write(problems.map((line) => `${line}\n`).join(''));
      // Thrown so that the top-level handler sets the exit code (1) and prints the summary on stderr.
      throw new UserError(
        `${file} has ${problems.length} problem${problems.length === 1 ? '' : 's'} (listed above)`,
        'fix each key as its line says; editors check devop.json against devop.schema.json (devop vscode init sets ' +
          '$schema)',
      );
    });

  config
    .command('schema')
    .description('print the JSON Schema of devop.json (what editors use for completion)')
    .action(async () => {
      const { configSchemaText } = await import('../services/config.js');
      process.stdout.write(configSchemaText());
    });
}
