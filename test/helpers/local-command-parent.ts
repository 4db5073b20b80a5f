// Stands in for devop around the local command (for tests that signal or kill -9 "devop"): starts the command given
// in argv with startLocalCommand, prints "started PID", and exits with the exit code devop would use.
// Usage: node --import tsx local-command-parent.ts GRACE_MS COMMAND [ARGS…]
import { startLocalCommand } from '../../cli/process/child.js';

const [graceMs, command, ...args] = process.argv.slice(2);
const env = process.env as Record<string, string>;
const local = await startLocalCommand({ command: command!, args, env, pipeOutput: false, graceMs: Number(graceMs) });
process.stdout.write(`started ${local.child.pid}\n`);
const exit = await local.exited;
process.exit(exit.exitCode);
