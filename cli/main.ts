// The devop command: registers the commands, and the one top-level error handler (UserError → one line: the problem and
// its fix, no stack; anything else → one line and a pointer to -v, the stack under -v). Exit code: the local command's
// when it ran, else 1 on error.
import { Command } from 'commander';
import { AGENT_VERSION } from '../shared/version.js';
import { formatTopLevelError } from './commands/error-output.js';

type OnExit = (code: number) => void;
type Register = (program: Command, onExit: OnExit) => void;

/**
 * Each command's module, loaded only when it runs: a run pays for its own command's code, not for all nine (start-up
 * time is part of exec → stealing). In the order `devop --help` lists them.
 */
const COMMANDS: ReadonlyArray<readonly [name: string, load: () => Promise<Register>]> = [
  ['exec', async () => (await import('./commands/exec.js')).registerExecCommand],
  ['ls', async () => (await import('./commands/ls.js')).registerLsCommand],
  ['replay', async () => (await import('./commands/replay.js')).registerReplayCommand],
  ['port-forward', async () => (await import('./commands/port-forward.js')).registerPortForwardCommand],
  ['vscode', async () => (await import('./commands/vscode.js')).registerVscodeCommand],
  ['config', async () => (await import('./commands/config.js')).registerConfigCommand],
  ['doctor', async () => (await import('./commands/doctor.js')).registerDoctorCommand],
  ['clean', async () => (await import('./commands/clean.js')).registerCleanCommand],
  ['sessions', async () => (await import('./commands/sessions.js')).registerSessionsCommand],
];

/**
 * The commands a run needs: the one named by the first argument; none for `--version`; all of them otherwise (help,
 * a mistyped command: commander lists or suggests them).
 */
export function commandsFor(args: readonly string[]): readonly string[] {
  const first = args[0];
  const names = COMMANDS.map(([name]) => name);
  if (first !== undefined && names.includes(first)) return [first];
  if (first === '--version' && args.length === 1) return [];
  return names;
}

export async function buildProgram(args: readonly string[], onExit: OnExit): Promise<Command> {
  const program = new Command('devop')
    .description('run a local process as if it were a Kubernetes workload')
    .version(AGENT_VERSION, '--version')
    .enablePositionalOptions();
  const wanted = commandsFor(args);
  const registers = await Promise.all(COMMANDS.filter(([name]) => wanted.includes(name)).map(([, load]) => load()));
  for (const register of registers) register(program, onExit);
  usageErrorsAsOneLine(program);
  return program;
}

/**
 * Commander's usage errors (unknown option or command, missing or extra argument) as one line in devop's error format,
 * with its suggestion and the help to read — rather than the whole help, whose first screen would hide the problem.
 */
function usageErrorsAsOneLine(command: Command): void {
  const help = `${commandPath(command)} --help`;
  const outputError = (text: string, write: (line: string) => void): void =>
    write(`devop: ${usageProblem(text)} — fix: see \`${help}\`\n`);
  command.configureOutput({ outputError });
  for (const sub of command.commands) usageErrorsAsOneLine(sub);
}

function commandPath(command: Command): string {
  return command.parent ? `${commandPath(command.parent)} ${command.name()}` : command.name();
}

/** `error: unknown option '--x'\n(Did you mean --y?)\n` → `unknown option '--x' (did you mean --y?)` */
export function usageProblem(text: string): string {
  const lines = text
    .replace(/^error: /, '')
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  return lines.join(' ').replace('(Did you mean', '(did you mean');
}

async function main(argv: string[]): Promise<number> {
  let code = 0;
  const onExit = (c: number): void => {
    code = c;
  };
  try {
    const program = await buildProgram(argv.slice(2), onExit);
    await program.parseAsync(argv);
    return code;
  } catch (err) {
    const verbose = argv.includes('-v') || argv.includes('--verbose');
    process.stderr.write(formatTopLevelError(err, verbose));
    return 1;
  }
}

const exitCode = await main(process.argv);
// Flush stdout/stderr before leaving: open watches or sockets of a failed start-up must not keep devop alive.
await new Promise<void>((resolve) => process.stdout.write('', () => resolve()));
await new Promise<void>((resolve) => process.stderr.write('', () => resolve()));
process.exit(exitCode);
