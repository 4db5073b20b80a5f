// The session's tunnel as everything above the session sees it: send a message, ask and wait for the answer, open a
// stream, hear messages, the agent's streams and the close. A direct tunnel (one mux) and the supervised one
// (SessionMux: tunnels that come and go underneath) are both one, so the exec service never knows which it holds.
import { randomUUID } from 'node:crypto';
import { isIPv4 } from 'node:net';
import { UserError } from '../../shared/errors.js';
import type { MuxStream } from '../../shared/mux.js';
import type { AgentMessage, ClientMessage, StreamOpen } from '../../shared/protocol.js';

export interface SessionTunnel {
  /** True once the tunnel has ended for good (a supervised one stays open while it reconnects). */
  readonly closed: boolean;
  /** Sends a control message; false when it could not be sent (the tunnel is closed). */
  send(msg: ClientMessage): boolean;
  /** Opens a stream to the agent (outgoing connection, remote file). */
  openStream(open: StreamOpen): MuxStream;
  close(reason?: string): void;
  on(event: 'message', listener: (msg: AgentMessage) => void): this;
  on(event: 'stream', listener: (stream: MuxStream, pod?: string) => void): this;
  on(event: 'close', listener: (err?: Error) => void): this;
  once(event: 'message', listener: (msg: AgentMessage) => void): this;
  once(event: 'stream', listener: (stream: MuxStream, pod?: string) => void): this;
  once(event: 'close', listener: (err?: Error) => void): this;
  off(event: 'message', listener: (msg: AgentMessage) => void): this;
  off(event: 'stream', listener: (stream: MuxStream, pod?: string) => void): this;
  off(event: 'close', listener: (err?: Error) => void): this;
}

/**
 * Whether the agent's native data path (devop-splice) takes this stream: an outgoing connection to an IPv4 address
 * (names are resolved by the agent, in the pod; files are read by the agent).
 */
export function nativeTakes(open: StreamOpen, native: { closed: boolean } | undefined): boolean {
  return native !== undefined && !native.closed && open.kind === 'outgoing' && isIPv4(open.host);
}

/** How long a request to the agent (env read, subscribe) may take before the session is declared broken. */
export const AGENT_REQUEST_TIMEOUT_MS = 15_000;

/** The agent's answer to a request: one of the expected messages, or an error. */
export type AgentAnswer<T extends AgentMessage['type']> =
  | Extract<AgentMessage, { type: T }>
  | Extract<AgentMessage, { type: 'error' }>;

/** Sends a request and waits for the agent message that answers it (same id), or its `error`. */
export function agentRequest<T extends AgentMessage['type']>(
  tunnel: SessionTunnel,
  send: (id: string) => void,
  answers: readonly T[],
  what: string,
  id: string = randomUUID(),
): Promise<AgentAnswer<T>> {
  const answersIt = (msg: AgentMessage): msg is AgentAnswer<T> =>
    msg.type === 'error' || (answers as readonly string[]).includes(msg.type);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () =>
        finish(() =>
          reject(
            new UserError(
              `the agent did not answer (${what}) within ${AGENT_REQUEST_TIMEOUT_MS / 1000} s`,
              'check the agent logs; rerun with --verbose',
            ),
          ),
        ),
      AGENT_REQUEST_TIMEOUT_MS,
    );
    const finish = (fn: () => void): void => {
      clearTimeout(timer);
      tunnel.off('message', onMessage);
      tunnel.off('close', onClose);
      fn();
    };
    const onMessage = (msg: AgentMessage): void => {
      if (!('id' in msg) || msg.id !== id) return;
      if (answersIt(msg)) finish(() => resolve(msg));
    };
    const onClose = (err?: Error): void =>
      finish(() =>
        reject(
          new UserError(
            `the tunnel to the agent closed (${what})${err ? `: ${err.message}` : ''}`,
            'check the agent logs; run again',
          ),
        ),
      );
    tunnel.on('message', onMessage);
    tunnel.on('close', onClose);
    send(id);
  });
}
