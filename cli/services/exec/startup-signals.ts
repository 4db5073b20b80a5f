// Until the local command runs, Ctrl-C (or SIGTERM, SIGHUP) stops devop's start-up; afterwards the command gets them.
import { UserError } from '../../../shared/errors.js';

const STARTUP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

export interface StartupSignals {
  readonly signal: AbortSignal;
  /** Settles as `promise` does, or rejects with the stop when a signal comes first. */
  race<T>(promise: Promise<T>): Promise<T>;
  /** The local command runs: signals are its own from now on (cli/process/child.ts). Idempotent. */
  release(): void;
}

export function watchStartupSignals(): StartupSignals {
  const abort = new AbortController();
  const onSignal = (signal: NodeJS.Signals): void =>
    abort.abort(new UserError(`stopped by ${signal} during start-up`, 'run again'));
  for (const s of STARTUP_SIGNALS) process.on(s, onSignal);
  return {
    signal: abort.signal,
    race: (promise) => raceAbort(promise, abort.signal),
    release() {
      for (const s of STARTUP_SIGNALS) process.off(s, onSignal);
    },
  };
}

export function raceAbort<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}
