// The Plain reporter: one line per event on stderr, no escape codes — for pipes, CI logs and VS Code background tasks.
import type { Reporter, ReportEvent } from '../reporter.js';
import { LineSink } from './sink.js';
import {
  LINE_PREFIX,
  READY_LINE,
  formatBytes,
  formatDuration,
  formatExtension,
  formatGrpcStatus,
  formatSessionLine,
  formatStepLine,
  formatWriteLine,
} from './lines.js';

export interface PlainReporterOptions {
  stderr: NodeJS.WritableStream;
  stdout: NodeJS.WritableStream;
  verbose: boolean;
}

type RequestEvent = Extract<ReportEvent, { type: 'request' }>;

/** Requests waiting for their response; bounded so that a peer that never answers cannot grow it without end. */
const MAX_PENDING_REQUESTS = 1000;

export class PlainReporter implements Reporter {
  readonly capturesChildOutput = false;
  private readonly pending = new Map<string, RequestEvent>();
  private readonly stderr: LineSink;
  private readonly stdout: LineSink;

  constructor(private readonly options: PlainReporterOptions) {
    this.stderr = new LineSink(options.stderr);
    this.stdout = new LineSink(options.stdout);
  }

  emit(event: ReportEvent): void {
    const line = this.lineFor(event);
    if (line !== undefined) this.stderr.write(`${line}\n`);
  }

  private lineFor(event: ReportEvent): string | undefined {
    const { verbose } = this.options;
    switch (event.type) {
      case 'step':
        // A failed step's fix is printed once, by the top-level error handler that reports the failure itself.
        return formatStepLine(event);
      case 'ready':
        // The ready line stays last and alone on its line: VS Code's end pattern matches it.
        return event.session.extension
          ? `${LINE_PREFIX}${formatExtension(event.session.extension)}\n${READY_LINE}`
          : READY_LINE;
      case 'session':
        return formatSessionLine(event.session);
      case 'request':
        // A filtered mirror's request gets no answer here: its line is printed as it comes.
        if (event.mirror) {
          // A note says why no filter could decide it (a body over the bound).
          const copy =
            event.to === 'local'
              ? 'copied to the local command'
              : event.note
                ? `not copied: ${event.note}`
                : 'not matched, not copied';
          return `${LINE_PREFIX}mirror ${event.method} ${event.path} :${event.port}: ${copy}`;
        }
        if (this.pending.size >= MAX_PENDING_REQUESTS) this.pending.delete(this.pending.keys().next().value as string);
        this.pending.set(event.id, event);
        return undefined;
      case 'response': {
        const request = this.pending.get(event.id);
        this.pending.delete(event.id);
        const took = `(${formatDuration(event.ms)}, ${formatBytes(event.bytes)})`;
        if (request?.grpc) {
          const { service, method } = request.grpc;
          // grpc-js says "OK" in grpc-message of every success: only a failure's message is news.
          const message = event.grpcMessage && event.grpcStatus !== 0 ? `: ${event.grpcMessage}` : '';
          const call = `gRPC ${service}/${method} → ${request.to} :${request.port}`;
          return `${LINE_PREFIX}${formatGrpcStatus(event.grpcStatus)} ${call} ${took}${message}`;
        }
        const what = request
          ? `${request.method} ${request.path} → ${request.to} :${request.port}`
          : `request ${event.id}`;
        const note = request?.note ? `: ${request.note}` : '';
        return `${LINE_PREFIX}${event.status} ${what} ${took}${note}`;
      }
      case 'connection': {
        if (event.fallbackMs !== undefined && event.state === 'open') {
          const pod = event.pod ? ` ${event.pod}` : '';
          return (
            `${LINE_PREFIX}connection ${event.remote} → pod${pod} :${event.port}: ` +
            `the local command did not answer in ${formatDuration(event.fallbackMs)}, the pod answers`
          );
        }
        if (!verbose) return undefined;
        const bytes =
          event.state === 'closed'
            ? ` (in ${formatBytes(event.bytesIn ?? 0)}, out ${formatBytes(event.bytesOut ?? 0)})`
            : '';
        return `${LINE_PREFIX}connection ${event.state} ${event.remote} → ${event.to} :${event.port}${bytes}`;
      }
      case 'rtt':
        return verbose ? `${LINE_PREFIX}tunnel rtt ${event.ms.toFixed(1)} ms` : undefined;
      case 'log':
        if (event.level === 'debug') return verbose ? `${LINE_PREFIX}debug: ${event.message}` : undefined;
        return event.level === 'warn' ? `${LINE_PREFIX}warning: ${event.message}` : `${LINE_PREFIX}${event.message}`;
      case 'output':
        // Plain does not capture the child's stdio; if a service sends output anyway, keep it on its own stream.
        (event.stream === 'stdout' ? this.stdout : this.stderr).write(event.text);
        return undefined;
      case 'error': {
        const step = event.step ? ` [${event.step}]` : '';
        const hint = event.hint ? ` — fix: ${event.hint}` : '';
        return `${LINE_PREFIX}error${step}: ${event.message}${hint}`;
      }
      case 'write':
        return formatWriteLine(event);
      case 'exit':
        return event.signal
          ? `${LINE_PREFIX}local command ended by ${event.signal}`
          : `${LINE_PREFIX}local command exited with code ${event.code}`;
      default:
        return undefined;
    }
  }

  async close(): Promise<void> {
    await Promise.all([this.stdout.flush(), this.stderr.flush()]);
    this.stdout.dispose();
    this.stderr.dispose();
  }
}
