// `--record FILE`: the HAR is written at once (a bad path fails before anything starts) and after each exchange.
import type { StealMode } from '../../../shared/protocol.js';
import { AGENT_VERSION } from '../../../shared/version.js';
import { info, type Reporter, warn } from '../../reporter.js';
import type { ExchangeRecorder } from '../../record/tap.js';

export interface Recording {
  recorder: ExchangeRecorder;
  /** Flushes the HAR and says how many exchanges it holds. */
  stop(): Promise<void>;
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
    async stop() {
      await har.flush();
      info(
        reporter,
        `recorded ${har.size} HTTP exchange${har.size === 1 ? '' : 's'} to ${path} (devop replay ${path})`,
      );
    },
  };
}
