// `devop sessions [-n NS | -A] [--output json]` lists the sessions holding devop's Leases; `devop sessions stop ID
// [--force]` stops one (another user's only when asked by name with --force, and the cluster's RBAC allows it).
import type { Command } from 'commander';
import { addOptions } from '../config/commander.js';
import { CONNECTION_OPTIONS, type FlagValues } from '../config/options.js';
import { UserError } from '../../shared/errors.js';

type SessionsFlags = FlagValues<(typeof CONNECTION_OPTIONS)[number] | 'namespace' | 'allNamespaces'> & {
  output: string;
};
type StopFlags = SessionsFlags & { force?: boolean };

const WHERE = [['namespace', "namespace (default: the context's)"], 'allNamespaces'] as const;

function checkWhere(flags: SessionsFlags): void {
  if (flags.namespace && flags.allNamespaces) throw new UserError('-n and -A were both given', 'pass one of them');
}

export function registerSessionsCommand(program: Command): void {
  const sessions = addOptions(program.command('sessions').enablePositionalOptions(), [
    ...CONNECTION_OPTIONS,
    ...WHERE,
    ['output', 'table (plain) or json'],
  ])
    .description(
      'list devop sessions that hold a Lease (unfiltered steals, --replace): target, ports, mode, holder, since, ' +
        'and the PID when this machine holds it',
    )
    .action(async (flags: SessionsFlags) => {
      checkWhere(flags);
      const { formatSessionsTable, listSessions } = await import('../services/sessions.js');
      const rows = await listSessions(flags);
      process.stdout.write(flags.output === 'json' ? `${JSON.stringify(rows, null, 2)}\n` : formatSessionsTable(rows));
    });
  addOptions(sessions.command('stop').argument('<id>', 'the session ID `devop sessions` shows'), [
    ...CONNECTION_OPTIONS,
    ...WHERE,
    ['force', "stop another user's session (needs the RBAC to delete its Leases)"],
    ['output', 'lines (plain) or json'],
  ])
    .description("stop a session: its devop restores the pod's traffic and ends")
    .action(async (id: string, flags: StopFlags) => {
      checkWhere(flags);
      const { formatStopResult, stopSession } = await import('../services/sessions.js');
      const result = await stopSession({ ...flags, id });
      process.stdout.write(flags.output === 'json' ? `${JSON.stringify(result, null, 2)}\n` : formatStopResult(result));
    });
}
