// The ClusterDialer of a real session: `outgoing` and `file` streams and `dnsResolve` messages on the tunnel's mux, so
// that connections, names and files are those of the target pod (or of a targetless agent's pod).
import type { Duplex } from 'node:stream';
import type { MuxStream } from '../../shared/mux.js';
import { nativeTakes, type SessionTunnel } from '../session/tunnel.js';
import type { AgentMessage, StreamAccept } from '../../shared/protocol.js';
import { DialError, dialErrorCode, type ClusterDialer, type ResolvedAddress } from './dialer.js';
import { muxUdpAssociation } from './udp.js';

/**
 * How long a connect or lookup may wait for the agent's answer. The agent bounds its own connect (10 s) and DNS queries
 * (2 s per server); this only catches an agent that never answers, so the local program gets an error, not a hang.
 */
export const AGENT_ANSWER_TIMEOUT_MS = 30_000;
/** A remote file larger than this is refused: remote files are small secrets and configs, read into memory. */
export const MAX_REMOTE_FILE_BYTES = 64 * 1024 * 1024;

/** What a dialled connection knows about its two ends in the pod (from the agent's accept). */
export type DialledStream = Duplex &
  Partial<Pick<StreamAccept, 'localAddress' | 'localPort' | 'remoteAddress' | 'remotePort'>>;

type DnsResult = Extract<AgentMessage, { type: 'dnsResult' }>;

/**
 * `native`: the agent's native data path of a direct (unsupervised) session, which takes outgoing connections to
 * addresses (a supervised session's tunnel routes them itself).
 */
export function createMuxDialer(
  mux: SessionTunnel,
  native?: Pick<SessionTunnel, 'closed' | 'openStream'>,
): ClusterDialer {
  const lookups = new Map<string, { resolve(msg: DnsResult): void; reject(err: Error): void }>();
  let nextLookup = 0;
  mux.on('message', (msg) => {
    if (msg.type !== 'dnsResult') return;
    const waiter = lookups.get(msg.id);
    if (!waiter) return;
    lookups.delete(msg.id);
    waiter.resolve(msg);
  });
  mux.once('close', () => {
    for (const waiter of lookups.values())
      waiter.reject(new DialError('ENOTCONN', 'the tunnel to the agent is closed'));
    lookups.clear();
  });

  const failure = (reason: string, what: string): DialError =>
    new DialError(dialErrorCode(reason), `${what}: ${reason}`);

  return {
    udp: () => muxUdpAssociation(mux),
    connect(host, port, options) {
      return new Promise<Duplex>((resolve, reject) => {
        if (mux.closed) {
          reject(new DialError('ENOTCONN', `connect ${host}:${port}: the tunnel to the agent is closed`));
          return;
        }
        const open = { kind: 'outgoing' as const, host, port };
        const stream: MuxStream = native && nativeTakes(open, native) ? native.openStream(open) : mux.openStream(open);
        // Early: the caller writes at once (DATA follows the OPEN within the stream's first window); a failed connect
        // reaches it as 'dialError' on the stream (see ConnectOptions), as the rejection does otherwise.
        const early = options?.early === true;
        if (early) resolve(stream);
        const fail = (err: DialError): void => {
          if (early) stream.emit('dialError', err);
          reject(err);
        };
        const timer = setTimeout(() => {
          cleanup();
          const err = new DialError(
            'ETIMEDOUT',
            `connect ${host}:${port}: the agent did not answer in ${AGENT_ANSWER_TIMEOUT_MS} ms`,
          );
          stream.destroy(early ? err : undefined);
          fail(err);
        }, AGENT_ANSWER_TIMEOUT_MS);
        const onAccepted = (info: StreamAccept): void => {
          cleanup();
          resolve(Object.assign(stream, pickAddresses(info)) as DialledStream);
        };
        const onError = (err: Error & { reason?: string }): void => {
          cleanup();
          fail(failure(err.reason ?? err.message, `connect ${host}:${port}`));
        };
        const onClose = (): void => {
          cleanup();
          // An early stream closed without an error was closed by its caller: no connect failed.
          if (!early)
            reject(new DialError('ECONNRESET', `connect ${host}:${port}: the stream closed before the agent answered`));
        };
        const cleanup = (): void => {
          clearTimeout(timer);
          stream.off('accepted', onAccepted);
          stream.off('error', onError);
          stream.off('close', onClose);
        };
        stream.on('accepted', onAccepted);
        stream.on('error', onError);
        stream.on('close', onClose);
      });
    },

    lookup(name, family) {
      return new Promise<ResolvedAddress[]>((resolve, reject) => {
        if (mux.closed) {
          reject(new DialError('ENOTCONN', `lookup ${name}: the tunnel to the agent is closed`));
          return;
        }
        const id = `dns-${++nextLookup}`;
        const timer = setTimeout(() => {
          lookups.delete(id);
          reject(
            new DialError('EAI_AGAIN', `lookup ${name}: the agent did not answer in ${AGENT_ANSWER_TIMEOUT_MS} ms`),
          );
        }, AGENT_ANSWER_TIMEOUT_MS);
        lookups.set(id, {
          resolve(msg) {
            clearTimeout(timer);
            if (msg.error || msg.addresses.length === 0) {
              const code = msg.error ? dialErrorCode(msg.error) : 'ENOTFOUND';
              reject(
                new DialError(
                  code === 'EFAULT' ? 'EAI_AGAIN' : code,
                  `getaddrinfo ${code} ${name}${msg.error ? ` (${msg.error.message})` : ''}`,
                ),
              );
              return;
            }
            resolve(msg.addresses);
          },
          reject(err) {
            clearTimeout(timer);
            reject(err);
          },
        });
        mux.send({ type: 'dnsResolve', id, name, family });
      });
    },

    readFile(path) {
      return new Promise<Buffer>((resolve, reject) => {
        if (mux.closed) {
          reject(new DialError('ENOTCONN', `read ${path}: the tunnel to the agent is closed`));
          return;
        }
        const stream = mux.openStream({ kind: 'file', path });
        const chunks: Buffer[] = [];
        let size = 0;
        stream.end(); // nothing to send on a file stream
        stream.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_REMOTE_FILE_BYTES) {
            stream.destroy();
            reject(new DialError('EFAULT', `read ${path}: larger than ${MAX_REMOTE_FILE_BYTES} bytes`));
            return;
          }
          chunks.push(chunk);
        });
        stream.on('end', () => resolve(Buffer.concat(chunks)));
        stream.on('error', (err: Error & { reason?: string }) =>
          reject(failure(err.reason ?? err.message, `read ${path}`)),
        );
      });
    },
  };
}

function pickAddresses(info: StreamAccept): Partial<StreamAccept> {
  const { localAddress, localPort, remoteAddress, remotePort } = info;
  return { localAddress, localPort, remoteAddress, remotePort };
}
