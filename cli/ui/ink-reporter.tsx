// The Ink reporter: renders the TUI on an interactive terminal and receives the local command's output into its own
// pane.
import { render, type Instance } from 'ink';
import type { Reporter, ReportEvent, SessionControls } from '../reporter.js';
import { App } from './components/App.js';
import { ViewStore } from './store.js';

export interface InkReporterOptions {
  stdout: NodeJS.WriteStream;
  stderr: NodeJS.WriteStream;
  stdin: NodeJS.ReadStream;
  verbose: boolean;
  /** q / Ctrl-C before the session has controls; default: raise SIGINT so the exec service's own handler stops it. */
  onInterrupt?: () => void;
}

export class InkReporter implements Reporter {
  /** The terminal belongs to the TUI, so the child's stdio is piped to `output` events and drawn in its pane. */
  readonly capturesChildOutput = true;
  private readonly store = new ViewStore();
  private instance: Instance | undefined;
  private closed = false;

  constructor(private readonly options: InkReporterOptions) {}

  emit(event: ReportEvent): void {
    if (this.closed) return;
    this.store.dispatch(event);
    this.mount();
  }

  attachControls(controls: SessionControls): void {
    this.store.setControls(controls);
    this.mount();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.store.flush();
    this.store.dispose();
    const instance = this.instance;
    if (!instance) return;
    // Let React commit the last state so the final frame (outcome, exit line) stays on screen.
    await new Promise((resolve) => setImmediate(resolve));
    instance.unmount();
    await instance.waitUntilExit().catch(() => undefined);
  }

  /**
   * q / Ctrl-C before the session has controls: the keys are raw, so the terminal sent no SIGINT — raise it. Without a
   * handler SIGINT kills devop outright, so the terminal is given back (raw mode off) first.
   */
  private raiseInterrupt(): void {
    if (process.listenerCount('SIGINT') === 0) this.instance?.unmount();
    process.kill(process.pid, 'SIGINT');
  }

  /**
   * Mounted on the first event rather than at construction, so a reporter that is never used leaves the terminal alone.
   */
  private mount(): void {
    if (this.instance) return;
    const { stdout, stderr, stdin, verbose } = this.options;
    const onInterrupt = this.options.onInterrupt ?? (() => this.raiseInterrupt());
    this.instance = render(<App store={this.store} onInterrupt={onInterrupt} verbose={verbose} />, {
      stdout,
      stderr,
      stdin,
      // Ctrl-C is a key like q: it stops the session cleanly (see App), rather than ink exiting under the session.
      exitOnCtrlC: false,
      // A stray console.* (a library's warning) is drawn above the UI instead of tearing the frame.
      patchConsole: true,
    });
  }
}
