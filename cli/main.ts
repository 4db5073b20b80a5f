// The devop command: registers the commands, and the one top-level error handler (UserError → problem + fix, no stack;
// anything else → the message, with the stack under -v). Exit code: the local command's when it ran, else 1 on error.
import { Command } from 'commander';
import { AGENT_VERSION } from '../shared/agent-contract.js';
import { registerCleanCommand } from './commands/clean.js';
import { registerConfigCommand } from './commands/config.js';
import { formatTopLevelError } from './commands/error-output.js';
import { registerDoctorCommand } from './commands/doctor.js';
import { registerExecCommand } from './commands/exec.js';
import { registerLsCommand } from './commands/ls.js';
import { registerPortForwardCommand } from './commands/port-forward.js';
import { registerVscodeCommand } from './commands/vscode.js';

export function buildProgram(onExit: (code: number) => void): Command {
  const program = new Command('devop')
    .description('run a local process as if it were a Kubernetes workload')
    .version(AGENT_VERSION, '--version')
    .enablePositionalOptions()
    .showHelpAfterError();
  registerExecCommand(program, onExit);
  registerLsCommand(program);
  registerPortForwardCommand(program);
  registerVscodeCommand(program);
  registerConfigCommand(program);
  registerDoctorCommand(program, onExit);
  registerCleanCommand(program, onExit);
  return program;
}

async function main(argv: string[]): Promise<number> {
  let code = 0;
  const program = buildProgram((c) => {
    code = c;
  });
  try {
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
