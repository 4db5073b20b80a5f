// Tunnel health for the supervisor: a liveness watch (pings; a tunnel that stays silent is declared stalled and closed,
// which makes the supervisor reconnect) and a polite close (bye, then wait briefly for the agent to close its end).
import type { AgentMessage } from '../../shared/protocol.js';
import type { SessionTunnel } from './tunnel.js';

/**
 * A ping every second; a tunnel with no message for 5 s is stalled (the agent answers pings at once, even under load).
 */
export const LIVENESS_PING_MS = 1000;
export const STALL_TIMEOUT_MS = 5000;
/** Ping ids from here up are ours (session.ts's own pinger counts from 1). */
const PING_ID_BASE = 1_000_000;

export interface LivenessOptions {
  /** Called with the RTT of each of our pings. */
  onRtt?: (ms: number) => void;
  /** Called once when the tunnel is declared stalled (it is closed right after). */
  onStall: (silentMs: number) => void;
  pingMs?: number;
  stallMs?: number;
}

/** Watches a tunnel until it closes; returns a function that stops watching. */
export function watchLiveness(mux: SessionTunnel, options: LivenessOptions): () => void {
  const pingMs = options.pingMs ?? LIVENESS_PING_MS;
  const stallMs = options.stallMs ?? STALL_TIMEOUT_MS;
  let lastHeard = Date.now();
  let id = PING_ID_BASE;
  const onMessage = (msg: AgentMessage): void => {
    lastHeard = Date.now();
    if (msg.type === 'pong' && msg.id > PING_ID_BASE) options.onRtt?.(Date.now() - msg.sentAt);
  };
  mux.on('message', onMessage);
  const timer = setInterval(() => {
    if (mux.closed) return stop();
    const silent = Date.now() - lastHeard;
    if (silent > stallMs) {
      stop();
      options.onStall(silent);
      mux.close('tunnel stalled');
      return;
    }
    mux.send({ type: 'ping', id: ++id, sentAt: Date.now() });
  }, pingMs);
  timer.unref();
  function stop(): void {
    clearInterval(timer);
    mux.off('message', onMessage);
  }
  return stop;
}

/** Says bye and gives the agent a moment to close its end (so it releases the session's ports at once). */
export function byeAndWait(mux: SessionTunnel, reason: string, waitMs = 1000): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      mux.close(reason);
      resolve();
    };
    const timer = setTimeout(done, waitMs);
    mux.once('close', done);
    mux.once('message', (msg) => {
      if (msg.type === 'bye') done();
    });
    mux.send({ type: 'bye', reason });
  });
}
