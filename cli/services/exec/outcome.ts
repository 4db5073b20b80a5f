// How an exec ends: the local command exits (its code is devop's), or the tunnel closes, the session is stopped from
// outside, or a start-up step fails (the command is stopped and the cause thrown). Traffic is released either way.
import { UserError } from '../../../shared/errors.js';
import type { ChildExit, LocalCommand } from '../../process/child.js';
import type { Reporter } from '../../reporter.js';
import type { Session } from '../../session/connect.js';
import type { TrafficControl } from './traffic-control.js';

/**
 * When the command has ended, how long a start-up step still running may take to report its end before the exit line:
 * the listen step ends within ms; a subscribe in flight is not waited for longer than this.
 */
const STEP_SETTLE_MS = 1000;

type Outcome = { kind: 'exit'; exit: ChildExit } | { kind: 'tunnel'; err: Error } | { kind: 'failed'; err: unknown };

/** The first of the ends above. `started` is the listen and traffic steps: it never ends the session by succeeding. */
export function firstEnd(session: Session, command: LocalCommand, started: Promise<void>): Promise<Outcome> {
  const tunnelLost = new Promise<Error>((resolve) =>
    session.tunnel.once('close', (err) => resolve(err ?? new Error('closed'))),
  );
  const stoppedFromOutside = new Promise<string>((resolve) => session.onStopped?.(resolve));
  return Promise.race<Outcome>([
    command.exited.then((exit) => ({ kind: 'exit' as const, exit })),
    tunnelLost.then((err) => ({ kind: 'tunnel' as const, err })),
    stoppedFromOutside.then((reason) => ({
      kind: 'failed' as const,
      err: new UserError(`this session was stopped: ${reason}`, 'the pod serves its own traffic; run devop again'),
    })),
    started.then(
      () => new Promise<never>(() => undefined),
      (err: unknown) => ({ kind: 'failed' as const, err }),
    ),
  ]);
}

/** Says the end (the exit line) and releases the ports; returns the command's exit code, or throws the failure. */
export async function settle(
  outcome: Outcome,
  command: LocalCommand,
  started: Promise<void>,
  traffic: TrafficControl,
  reporter: Reporter,
): Promise<number> {
  if (outcome.kind === 'exit') {
    // A start-up step still waiting (listen) reports how it failed first: the exit line then follows its cause.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([started.catch(() => undefined), new Promise((r) => (timer = setTimeout(r, STEP_SETTLE_MS)))]);
    clearTimeout(timer);
    reporter.emit({ type: 'exit', code: outcome.exit.code, signal: outcome.exit.signal });
    await traffic.release();
    return outcome.exit.exitCode;
  }
  const err =
    outcome.kind === 'tunnel'
      ? new UserError(
          `the tunnel to the agent closed: ${outcome.err.message}`,
          'the pod serves its own traffic again; run devop again (check the agent pod and the API server)',
        )
      : outcome.err;
  const exit = await command.stop('SIGTERM');
  reporter.emit({ type: 'exit', code: exit.code, signal: exit.signal });
  await traffic.release();
  throw err;
}
