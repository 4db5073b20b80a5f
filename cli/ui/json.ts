// The JSON reporter: one NDJSON event per line on stdout (each with `type` and `time`) for VS Code and scripts.
import type { Reporter, ReportEvent } from '../reporter.js';
import { LineSink } from './sink.js';

export interface JsonReporterOptions {
  stdout: NodeJS.WritableStream;
  verbose: boolean;
}

export class JsonReporter implements Reporter {
  /** stdout carries the events, so the child's output must arrive as `output` events rather than raw bytes. */
  readonly capturesChildOutput = true;

  private readonly sink: LineSink;

  constructor(private readonly options: JsonReporterOptions) {
    this.sink = new LineSink(options.stdout);
  }

  emit(event: ReportEvent): void {
    if (event.type === 'log' && event.level === 'debug' && !this.options.verbose) return;
    this.sink.write(`${JSON.stringify({ ...event, time: new Date().toISOString() })}\n`);
  }

  async close(): Promise<void> {
    await this.sink.flush();
  }
}
