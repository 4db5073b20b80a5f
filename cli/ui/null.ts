// The Null reporter: drops every event (tests, and services run as libraries).
import type { Reporter, ReportEvent } from '../reporter.js';

export class NullReporter implements Reporter {
  readonly capturesChildOutput = false;
  emit(event: ReportEvent): void {
    void event;
  }
  async close(): Promise<void> {
    // Nothing was drawn: nothing to take down.
  }
}
