// The preload's side of the control endpoint: one lazily opened loopback connection to the session's proxy that starts
// with a hello carrying the session's token, requests matched to answers by id, each with a deadline. It holds the
// event loop open only while a request is pending.
import { Socket } from 'node:net';
import type { ControlAnswer, ControlRequest } from '../outgoing/control-protocol.js';

/** Distributes Omit over the request union (a plain Omit would merge the variants into one). */
type WithoutId<T> = T extends unknown ? Omit<T, 'id'> : never;

export class ControlUnavailableError extends Error {
  readonly code: string;

  constructor(code: 'ECONNREFUSED' | 'ETIMEDOUT', message: string) {
    super(message);
    this.name = 'ControlUnavailableError';
    this.code = code;
  }
}

type Unanswered = Extract<ControlRequest, { op: 'hello' | 'claim' }>;

export interface ControlClient {
  request(request: WithoutId<Exclude<ControlRequest, Unanswered>>): Promise<ControlAnswer>;
  /** Sends a line the proxy does not answer (a claim). */
  tell(request: WithoutId<Extract<ControlRequest, { op: 'claim' }>>): void;
}

interface Pending {
  resolve(answer: ControlAnswer): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

/**
 * `connectRaw` connects a socket without going through the preload's own hooks (the original Socket#connect).
 */
export function createControlClient(options: {
  host: string;
  port: number;
  timeoutMs: number;
  /** The session's token (DEVOP_PRELOAD_CONFIG). */
  token: string;
  connectRaw: (socket: Socket, port: number, host: string) => void;
}): ControlClient {
  let socket: Socket | undefined;
  let nextId = 1;
  const pending = new Map<number, Pending>();

  const failAll = (err: Error): void => {
    for (const [id, entry] of pending) {
      clearTimeout(entry.timer);
      pending.delete(id);
      entry.reject(err);
    }
  };
  const updateRef = (): void => {
    // An idle control connection must not keep the program alive; a pending answer must (it resolves an await).
    if (!socket) return;
    if (pending.size > 0) socket.ref();
    else socket.unref();
  };
  const open = (): Socket => {
    const fresh = new Socket();
    let buffered = '';
    fresh.setEncoding('utf8');
    fresh.on('data', (chunk: string) => {
      buffered += chunk;
      let newline = buffered.indexOf('\n');
      while (newline >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        newline = buffered.indexOf('\n');
        let answer: ControlAnswer;
        try {
          answer = JSON.parse(line) as ControlAnswer;
        } catch {
          continue;
        }
        const entry = pending.get(answer.id);
        if (!entry) continue;
        pending.delete(answer.id);
        clearTimeout(entry.timer);
        entry.resolve(answer);
      }
      updateRef();
    });
    const onGone = (err?: Error): void => {
      if (socket === fresh) socket = undefined;
      failAll(
        new ControlUnavailableError(
          'ECONNREFUSED',
          `devop's outgoing proxy at ${options.host}:${options.port} is gone${err ? ` (${err.message})` : ''}`,
        ),
      );
    };
    fresh.on('error', onGone);
    fresh.on('close', () => onGone());
    options.connectRaw(fresh, options.port, options.host);
    // Written before any request: the proxy serves nothing on a connection that does not start with it.
    fresh.write(`${JSON.stringify({ id: nextId++, op: 'hello', token: options.token })}\n`);
    return fresh;
  };

  return {
    tell(request) {
      socket ??= open();
      socket.write(`${JSON.stringify({ ...request, id: nextId++ })}\n`);
      updateRef();
    },
    request(request) {
      socket ??= open();
      const id = nextId++;
      const current = socket;
      return new Promise<ControlAnswer>((resolve, reject) => {
        const timer = setTimeout(() => {
          pending.delete(id);
          updateRef();
          reject(
            new ControlUnavailableError(
              'ETIMEDOUT',
              `devop's outgoing proxy did not answer within ${options.timeoutMs} ms`,
            ),
          );
        }, options.timeoutMs);
        timer.unref();
        pending.set(id, { resolve, reject, timer });
        updateRef();
        current.write(`${JSON.stringify({ ...request, id })}\n`);
      });
    },
  };
}
