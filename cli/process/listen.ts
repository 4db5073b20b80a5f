// Waits until the local command accepts TCP connections on 127.0.0.1:<port>, by connecting (the only portable test).
import { connect } from 'node:net';

/**
 * Between connect attempts: short, so stealing starts soon after the command listens (a refused connect to loopback
 * costs tens of microseconds): every 10 ms for the first 2 s, when most commands start listening, then every 50 ms.
 */
const LISTEN_POLL_MS = { early: 10, earlyFor: 2000, later: 50 } as const;

export function canConnect(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * Resolves true once the port accepts a connection, false when the deadline passes or `stopped` resolves first (e.g.
 * the command exited).
 */
export async function waitForListen(
  port: number,
  input: { timeoutMs: number; stopped?: Promise<unknown>; host?: string },
): Promise<boolean> {
  const started = Date.now();
  const deadline = started + input.timeoutMs;
  let stop = false;
  let wake: (() => void) | undefined;
  void input.stopped?.then(() => {
    stop = true;
    wake?.();
  });
  while (!stop && Date.now() < deadline) {
    if (await canConnect(port, input.host)) return true;
    // Woken early when `stopped` resolves, so that a command that exits is reported as such at once.
    await new Promise<void>((r) => {
      const pause = Date.now() - started < LISTEN_POLL_MS.earlyFor ? LISTEN_POLL_MS.early : LISTEN_POLL_MS.later;
      const timer = setTimeout(r, pause);
      wake = () => {
        clearTimeout(timer);
        r();
      };
    });
  }
  return false;
}
