// The first exchange on a new connection, for each side: the CLI sends hello and waits for helloOk; the agent checks
// the protocol version and the per-agent token, answers helloOk or a clear error and closes.
import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import { UserError } from './errors.js';
import type { AgentMux, ClientMux } from './mux.js';
import {
  ERROR_CODES,
  PROTOCOL_VERSION,
  type AgentMessage,
  type ClientMessage,
  type Hello,
  type HelloOk,
} from './protocol.js';

/** How long either side waits for the other's half of the handshake by default. */
export const HANDSHAKE_TIMEOUT_MS = 10_000;

export interface ClientHelloOptions {
  token: string;
  client: Hello['client'];
  resumeSessionId?: string;
  features?: string[];
  timeoutMs?: number;
}

/**
 * Sends hello and resolves with the agent's helloOk. Rejects with a UserError (message + hint) when the agent speaks
 * another protocol version, refuses the token, answers with an error, closes, or does not answer in time.
 */
export function clientHello(mux: ClientMux, options: ClientHelloOptions): Promise<HelloOk> {
  return new Promise<HelloOk>((resolve, reject) => {
    const timeoutMs = options.timeoutMs ?? HANDSHAKE_TIMEOUT_MS;
    const done = (fn: () => void): void => {
      clearTimeout(timer);
      mux.off('message', onMessage);
      mux.off('close', onClose);
      fn();
    };
    const onMessage = (msg: AgentMessage): void => {
      if (msg.type === 'helloOk') {
        if (msg.protocolVersion !== PROTOCOL_VERSION) {
          done(() => reject(versionError(msg.protocolVersion)));
          mux.close('protocol version mismatch');
          return;
        }
        done(() => resolve(msg));
      } else if (msg.type === 'error' && msg.id === undefined) {
        done(() => reject(handshakeError(msg)));
      } else if (msg.type === 'bye') {
        done(() =>
          reject(
            new UserError(
              `the agent ended the session during the handshake: ${msg.reason}`,
              'check the agent logs; run again to start a fresh agent',
            ),
          ),
        );
      }
    };
    const onClose = (err?: Error): void => {
      done(() =>
        reject(
          new UserError(
            `the tunnel to the agent closed during the handshake${err ? ` (${err.message})` : ''}`,
            'check that the agent pod is running and its logs (kubectl logs -l app.kubernetes.io/name=devop-agent)',
            { cause: err },
          ),
        ),
      );
    };
    const timer = setTimeout(() => {
      done(() =>
        reject(
          new UserError(
            `the agent did not answer the handshake within ${timeoutMs / 1000} s`,
            'check that the agent pod is running and that the port-forward works; rerun with --verbose',
          ),
        ),
      );
    }, timeoutMs);
    mux.on('message', onMessage);
    mux.on('close', onClose);
    const hello: ClientMessage = {
      type: 'hello',
      protocolVersion: PROTOCOL_VERSION,
      token: options.token,
      client: options.client,
      ...(options.resumeSessionId !== undefined ? { resumeSessionId: options.resumeSessionId } : {}),
      ...(options.features !== undefined ? { features: options.features } : {}),
    };
    if (!mux.send(hello)) onClose();
  });
}

function versionError(agentVersion: number): UserError {
  return new UserError(
    `the agent speaks protocol version ${agentVersion}, this devop speaks ${PROTOCOL_VERSION}`,
    'use an agent image of the same devop version (agent.image in devop.json or --agent-image), or upgrade devop',
  );
}

function handshakeError(msg: Extract<AgentMessage, { type: 'error' }>): UserError {
  if (msg.code === ERROR_CODES.versionMismatch) {
    const m = /version (\d+)/.exec(msg.message);
    return m
      ? versionError(Number(m[1]))
      : new UserError(msg.message, msg.hint ?? 'use matching versions of devop and its agent image');
  }
  if (msg.code === ERROR_CODES.badToken) {
    return new UserError(
      'the agent refused this session token',
      msg.hint ??
        'this agent was started for another devop session; let devop start its own agent (it does so by default)',
    );
  }
  return new UserError(
    `the agent refused the session: ${msg.message}`,
    msg.hint ?? 'check the agent logs (kubectl logs -l app.kubernetes.io/name=devop-agent)',
  );
}

/** What the agent answers when a hello is not acceptable, or null when it is (pure: used by acceptHello and tests). */
export function checkHello(hello: Hello, token: string): Extract<AgentMessage, { type: 'error' }> | null {
  if (hello.protocolVersion !== PROTOCOL_VERSION) {
    return {
      type: 'error',
      code: ERROR_CODES.versionMismatch,
      message: `agent speaks protocol version ${PROTOCOL_VERSION}, client speaks ${hello.protocolVersion}`,
      hint: 'use an agent image of the same devop version as the CLI',
    };
  }
  if (!sameToken(hello.token, token)) {
    return {
      type: 'error',
      code: ERROR_CODES.badToken,
      message: 'session token does not match this agent',
      hint: 'this agent was started for another devop session; let devop start its own agent',
    };
  }
  return null;
}

function sameToken(a: string, b: string): boolean {
  const da = createHash('sha256').update(a).digest();
  const db = createHash('sha256').update(b).digest();
  return timingSafeEqual(da, db);
}

export interface AcceptHelloOptions {
  token: string;
  agentVersion: string;
  features: string[];
  target?: HelloOk['target'];
  /** The session id to answer with (e.g. the resumed one); default: a new random UUID. */
  sessionId?: (hello: Hello) => string;
  timeoutMs?: number;
}

/**
 * Waits for the CLI's hello; answers helloOk and resolves with both messages, or answers an error, closes the
 * connection and rejects (with a plain Error naming why) when the version or token is wrong, the first message is not
 * hello, the connection closes, or no hello arrives in time.
 */
export function acceptHello(mux: AgentMux, options: AcceptHelloOptions): Promise<{ hello: Hello; helloOk: HelloOk }> {
  return new Promise((resolve, reject) => {
    const timeoutMs = options.timeoutMs ?? HANDSHAKE_TIMEOUT_MS;
    const done = (fn: () => void): void => {
      clearTimeout(timer);
      mux.off('message', onMessage);
      mux.off('close', onClose);
      fn();
    };
    const refuse = (error: Extract<AgentMessage, { type: 'error' }>): void => {
      done(() => reject(new Error(`handshake refused: ${error.message}`)));
      mux.send(error);
      mux.close(error.message);
    };
    const onMessage = (msg: ClientMessage): void => {
      if (msg.type !== 'hello') {
        refuse({
          type: 'error',
          code: ERROR_CODES.badRequest,
          message: `expected hello as the first message, got ${msg.type}`,
        });
        return;
      }
      const problem = checkHello(msg, options.token);
      if (problem) {
        refuse(problem);
        return;
      }
      const helloOk: HelloOk = {
        type: 'helloOk',
        protocolVersion: PROTOCOL_VERSION,
        agentVersion: options.agentVersion,
        sessionId: options.sessionId ? options.sessionId(msg) : randomUUID(),
        features: options.features,
        ...(options.target !== undefined ? { target: options.target } : {}),
      };
      mux.send(helloOk);
      done(() => resolve({ hello: msg, helloOk }));
    };
    const onClose = (err?: Error): void => {
      done(() => reject(new Error(`connection closed before hello${err ? `: ${err.message}` : ''}`)));
    };
    const timer = setTimeout(() => {
      refuse({ type: 'error', code: ERROR_CODES.badRequest, message: `no hello within ${timeoutMs / 1000} s` });
    }, timeoutMs);
    mux.on('message', onMessage);
    mux.on('close', onClose);
  });
}
