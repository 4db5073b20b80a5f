// The error of an API request that ran out of --request-timeout, and how a timeout reads in a message. Apart from
// the requests it bounds (./request-timeout.ts): the reporter names this error, and every command loads the reporter,
// so importing it must not load the kube client (most of a command's start-up when it loads).
import { UserError } from '../../shared/errors.js';

/** "2 s", "1.5 s", "500 ms", "2 m": how a timeout reads in a message. */
export function formatTimeout(ms: number): string {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120_000 || ms % 60_000 !== 0) return `${Number((ms / 1000).toFixed(1))} s`;
  return `${ms / 60_000} m`;
}

/**
 * The API server did not answer in time. A UserError: the user can make the cluster reachable or wait longer. `step`
 * (the start-up step it happened in) makes the top-level handler print `devop: error [step]: …`.
 */
export class ApiTimeoutError extends UserError {
  readonly server: string;
  readonly timeoutMs: number;
  readonly action?: string;
  readonly step?: string;

  constructor(server: string, timeoutMs: number, where: { action?: string; step?: string } = {}) {
    super(
      `the API server ${server} did not answer within ${formatTimeout(timeoutMs)}` +
        (where.action ? ` (while trying to ${where.action})` : ''),
      'check that the cluster is reachable (kubectl cluster-info), or raise --request-timeout',
    );
    this.server = server;
    this.timeoutMs = timeoutMs;
    this.action = where.action;
    this.step = where.step;
  }

  /** The same timeout, saying what devop was doing (the first, innermost, action wins). */
  during(action: string): ApiTimeoutError {
    return this.action ? this : new ApiTimeoutError(this.server, this.timeoutMs, { action, step: this.step });
  }

  /** The same timeout, naming the start-up step it happened in. */
  inStep(step: string): ApiTimeoutError {
    return this.step ? this : new ApiTimeoutError(this.server, this.timeoutMs, { action: this.action, step });
  }
}
