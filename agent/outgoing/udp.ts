// The local command's UDP, sent from the pod's netns: one `udp` stream is one association, served by a UDP socket of
// its own here; each datagram names its destination (resolved with the pod's DNS; empty = the pod's nameserver) and
// each reply goes back with its source. Nothing queues without bound: a reply the stream cannot take now is dropped.
import { createSocket, type Socket } from 'node:dgram';
import { isIP } from 'node:net';
import type { MuxStream } from '../../shared/mux.js';
import { DatagramDecoder, encodeDatagram, type Datagram } from '../../shared/udp-datagrams.js';
import type { AgentLog } from '../log.js';
import { podNameservers, resolveInPod } from './dns.js';

/** An association that carried no datagram either way for this long ends (its socket closes, the stream ends). */
export const UDP_IDLE_MS = 60_000;
/** Replies not sent yet (the peer's credit ran out) are kept up to this; more are dropped, as a full socket would. */
const MAX_UNSENT_BYTES = 256 * 1024;
/** Names an association has resolved, kept this long: a client sending a burst asks the pod's DNS once. */
const NAME_TTL_MS = 30_000;
const MAX_NAMES = 256;

export function serveUdp(stream: MuxStream, pid: number | undefined, log: AgentLog): void {
  const sockets: { 4?: Socket; 6?: Socket } = {};
  const names = new Map<string, { at: number; address: string; family: 4 | 6 }>();
  /** The nameserver datagrams with an empty host went to: its replies go back with an empty host too. */
  let nameserver: string | undefined;
  let closed = false;
  let idle: NodeJS.Timeout | undefined;
  const touch = (): void => {
    clearTimeout(idle);
    idle = setTimeout(() => {
      log.debug('udp association idle: closed', { idleMs: UDP_IDLE_MS });
      finish();
      stream.end();
    }, UDP_IDLE_MS);
    idle.unref();
  };
  const finish = (): void => {
    if (closed) return;
    closed = true;
    clearTimeout(idle);
    sockets[4]?.close();
    sockets[6]?.close();
  };

  const reply = (payload: Buffer, address: string, port: number): void => {
    touch();
    const source = address.replace(/^::ffff:/, '');
    const host = source === nameserver && port === 53 ? '' : source;
    const bytes = encodeDatagram({ host, port, payload });
    if (!bytes || closed || stream.writableLength > MAX_UNSENT_BYTES) return;
    stream.write(bytes);
  };
  const socketFor = (family: 4 | 6): Socket => {
    let socket = sockets[family];
    if (!socket) {
      socket = createSocket(family === 4 ? 'udp4' : 'udp6');
      socket.on('message', (payload, rinfo) => reply(payload, rinfo.address, rinfo.port));
      // ICMP errors (a closed port) surface here on some sends: UDP loses the datagram, the association goes on.
      socket.on('error', (err) => log.debug('udp socket error', { error: err.message }));
      sockets[family] = socket;
    }
    return socket;
  };

  const destination = async (host: string): Promise<{ address: string; family: 4 | 6 } | undefined> => {
    if (host === '') {
      nameserver ??= (await podNameservers(pid))[0];
      return nameserver ? { address: nameserver, family: isIP(nameserver) as 4 | 6 } : undefined;
    }
    const literal = isIP(host);
    if (literal) return { address: host, family: literal as 4 | 6 };
    const known = names.get(host);
    if (known && Date.now() - known.at < NAME_TTL_MS) return known;
    const found = await resolveInPod(pid, host);
    const first = found.find((a) => a.family === 4) ?? found[0];
    if (names.size >= MAX_NAMES) names.clear();
    names.set(host, { at: Date.now(), ...first });
    return first;
  };
  const send = (datagram: Datagram): void => {
    touch();
    destination(datagram.host).then(
      (to) => {
        if (!to || closed) return;
        socketFor(to.family).send(datagram.payload, datagram.port, to.address);
      },
      // A name the pod cannot resolve loses the datagram, as a UDP send to nowhere would.
      (err: Error) => log.debug('udp destination not resolved', { host: datagram.host, error: err.message }),
    );
  };

  const decoder = new DatagramDecoder();
  stream.on('data', (chunk: Buffer) => {
    let datagrams: Datagram[];
    try {
      datagrams = decoder.push(chunk);
    } catch (err) {
      stream.reset(`EINVAL: ${(err as Error).message}`);
      finish();
      return;
    }
    for (const datagram of datagrams) if (datagram.port > 0) send(datagram);
  });
  stream.on('end', () => {
    finish();
    stream.end();
  });
  stream.on('close', finish);
  stream.on('error', finish);
  socketFor(4).bind(0, () => {
    if (closed) return;
    touch();
    stream.accept({ localAddress: sockets[4]?.address().address, localPort: sockets[4]?.address().port });
  });
}
