// `devop replay FILE [--to PORT] [--filter REGEX] [--ignore FIELD]`: the requests of a `devop exec --record` session,
// sent to the local command again; each answer is compared with the recorded one. Exit code 1 when one differs.
import type { Command } from 'commander';
import { addOptions } from '../config/commander.js';
import type { FlagValues } from '../config/options.js';

type ReplayFlags = FlagValues<'to' | 'filter' | 'ignore'> & { output: string };

export function registerReplayCommand(program: Command, onExit: (code: number) => void): void {
  addOptions(program.command('replay'), ['to', 'filter', 'ignore', ['output', 'lines (plain) or json']])
    .description(
      'send the requests recorded by `devop exec --record FILE` to the local command again and show which answers ' +
        'changed (status, and the fields of JSON bodies)',
    )
    .argument('<file>', 'the HAR file devop exec --record wrote')
    .action(async (file: string, flags: ReplayFlags) => {
      const { formatReplayReport, replayOptions, runReplay } = await import('../services/replay.js');
      const report = await runReplay(replayOptions(file, flags));
      process.stdout.write(
        flags.output === 'json' ? `${JSON.stringify(report, null, 2)}\n` : formatReplayReport(report),
      );
      const { different, failed } = report.summary;
      onExit(different > 0 || failed > 0 ? 1 : 0);
    });
}
