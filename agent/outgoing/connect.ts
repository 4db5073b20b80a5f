// The local command's outgoing TCP connections, opened from the pod's netns: the host is resolved as the pod would
// (agent/outgoing/dns.ts), then the session's stream and the socket are spliced.
import { connect } from 'node:net';
import type { MuxStream } from '../../shared/mux.js';
import { spliceSocket } from '../../shared/splice.js';
import { resolveInPod } from './dns.js';
import type { AgentLog } from '../log.js';

/** Bound on the connect: the caller is a local command waiting in connect(), and pods' DNS may be slow. */
const CONNECT_TIMEOUT_MS = 10_000;

export async function serveOutgoing(
  stream: MuxStream,
  host: string,
  port: number,
  pid: number | undefined,
  log: AgentLog,
): Promise<void> {
  let address: string;
  try {
    const found = await resolveInPod(pid, host);
    address = (found.find((a) => a.family === 4) ?? found[0]).address;
  } catch (err) {
    stream.reset(`${(err as { code?: string }).code ?? 'ENOTFOUND'}: cannot resolve ${host} in the pod`);
    return;
  }
  const socket = connect({ host: address, port, noDelay: true, allowHalfOpen: true, timeout: CONNECT_TIMEOUT_MS });
  const fail = (err: NodeJS.ErrnoException): void => {
    stream.reset(`${err.code ?? 'ECONNREFUSED'}: ${host}:${port}: ${err.message}`);
    socket.destroy();
  };
  socket.once('timeout', () => fail(Object.assign(new Error('connect timed out'), { code: 'ETIMEDOUT' })));
  socket.once('error', fail);
  socket.once('connect', () => {
    socket.setTimeout(0);
    socket.off('error', fail);
    log.debug('outgoing connected', { host, port, address });
    stream.accept({
      localAddress: socket.localAddress,
      localPort: socket.localPort,
      remoteAddress: socket.remoteAddress,
      remotePort: socket.remotePort,
    });
    spliceSocket(stream, socket);
    socket.on('error', () => stream.reset('connection reset in the pod'));
    stream.on('error', () => socket.destroy());
    socket.once('close', () => {
      if (!stream.writableEnded) stream.reset('connection closed in the pod');
    });
  });
  stream.on('error', () => socket.destroy());
}
