// The terminal UI behind a dynamic import: ink and react (about half a second of module loading) load only when a run
// actually draws the TUI, so plain and JSON runs (CI, scripts, VS Code tasks) never pay for them.
import { errorMessage } from '../../shared/errors.js';
import { type Reporter, type ReportEvent, type SessionControls, warn } from '../reporter.js';
import type { InkReporterOptions } from './ink-reporter.js';
import { PlainReporter } from './plain.js';

export class LazyInkReporter implements Reporter {
  /** Known before ink is loaded: the exec service decides at start whether to pipe the child's stdio. */
  readonly capturesChildOutput = true;
  private inner: Reporter | undefined;
  /** Calls made while ink loads, replayed in order once it is there. */
  private readonly queued: Array<(reporter: Reporter) => void> = [];
  private readonly loaded: Promise<Reporter>;

  constructor(options: InkReporterOptions) {
    this.loaded = import('./ink-reporter.js')
      .then(({ InkReporter }): Reporter => new InkReporter(options))
      .catch((err: unknown): Reporter => {
        // A broken install must not lose the session's output: fall back to plain lines, and say why.
        const plain = new PlainReporter({ stdout: options.stdout, stderr: options.stderr, verbose: options.verbose });
        const why = errorMessage(err);
        warn(plain, `the terminal UI could not be loaded (${why}); showing plain lines`);
        return plain;
      })
      .then((reporter) => {
        this.inner = reporter;
        for (const call of this.queued.splice(0)) call(reporter);
        return reporter;
      });
  }

  emit(event: ReportEvent): void {
    this.call((reporter) => reporter.emit(event));
  }

  attachControls(controls: SessionControls): void {
    this.call((reporter) => reporter.attachControls?.(controls));
  }

  async close(): Promise<void> {
    const reporter = await this.loaded;
    await reporter.close();
  }

  private call(action: (reporter: Reporter) => void): void {
    if (this.inner) action(this.inner);
    else this.queued.push(action);
  }
}
