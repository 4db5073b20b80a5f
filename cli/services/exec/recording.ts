// `--record FILE`: a path that cannot be written fails before anything starts; the HAR is written after each exchange.
import type { StealMode } from '../../../shared/protocol.js';
import { AGENT_VERSION } from '../../../shared/version.js';
import { info, type Reporter, warn } from '../../reporter.js';
import type { ExchangeRecorder } from '../../record/tap.js';

export interface Recording {
  recorder: ExchangeRecorder;
  /**
   * Writes the HAR and says how many exchanges it holds; a failed session that recorded nothing writes no file (a file
   * already at the path stays as it was).
   */
  stop(failed: boolean): Promise<void>;
}

export async function startRecording(
  path: string,
  mode: StealMode,
  reporter: Reporter,
  keepSecrets = false,
): Promise<Recording> {
  const [{ HarRecorder }, { ExchangeRecorder }] = await Promise.all([
    import('../../record/har.js'),
    import('../../record/tap.js'),
  ]);
  const recordWarning = (message: string): void => warn(reporter, message);
  const har = new HarRecorder(path, AGENT_VERSION, recordWarning, { keepSecrets });
  await har.start();
  if (keepSecrets)
    recordWarning(`--record-secrets: ${path} keeps credentials and Secret values in clear (the file is 0600)`);
  if (mode !== 'steal')
    recordWarning(
      `--record writes stolen exchanges only: with --mirror, ${path} stays empty until you switch to steal`,
    );
  return {
    recorder: new ExchangeRecorder(har, recordWarning),
    async stop(failed) {
      if (failed && har.size === 0) {
        info(reporter, `recorded no HTTP exchange: ${path} was not written`);
        return;
      }
      await har.flush();
      info(
        reporter,
        `recorded ${har.size} HTTP exchange${har.size === 1 ? '' : 's'} to ${path} (devop replay ${path})`,
      );
    },
  };
}
