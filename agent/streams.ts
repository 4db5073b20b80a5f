// Streams a session opens: outgoing TCP connections from the pod's netns, and reads of files in the target's
// filesystem.
import { connect } from 'node:net';
import type { MuxStream } from '../shared/mux.js';
import { spliceSocket } from '../shared/splice.js';
import { resolveInPod } from './dns.js';
import { deniedByCapabilities } from './capabilities.js';
import { openInTarget, type TargetFile } from './target.js';
import type { AgentLog } from './log.js';

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

export async function serveFile(stream: MuxStream, path: string, pid: number): Promise<void> {
  stream.on('error', () => undefined);
  stream.resume(); // nothing to read from the CLI on a file stream
  let file: TargetFile;
  try {
    file = await openInTarget(pid, path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'EINVAL';
    if (code === 'EISDIR') {
      stream.reset(`EISDIR: ${path} is a directory`);
      return;
    }
    const denied = deniedByCapabilities(err, `reading ${path} in the target container`);
    const detail = denied ? `${denied.message} (${denied.hint})` : (err as Error).message;
    stream.reset(`${code}: ${path}: ${detail}`);
    return;
  }
  stream.accept({ size: file.size });
  stream.on('error', () => file.close());
  file.content.once('error', (err: NodeJS.ErrnoException) => stream.reset(`${err.code ?? 'EIO'}: ${path}`));
  file.content.pipe(stream);
}
