// The bytes of a `udp` stream: UDP datagrams, each length-prefixed with its peer (host and port), so that a byte
// stream keeps their boundaries. Both sides bound what they hold: a datagram that does not fit is dropped, as UDP does.
//
// One datagram on the stream (big-endian):
//   u16 length (of everything after it) | u8 host length | host (UTF-8: an IP literal, a name, or empty) | u16 port |
//   payload
// CLI → agent the peer is the destination (a name is resolved in the pod; empty = the pod's own nameserver, the first
// of its resolv.conf); agent → CLI it is the source of the reply (empty when it came from that nameserver).

/** The largest payload one datagram on the stream carries (what is left of a u16 length after the longest host). */
export const MAX_UDP_PAYLOAD = 0xffff - 1 - 255 - 2;

export interface Datagram {
  /** An IP literal, a name (CLI → agent), or '' for the pod's nameserver. */
  host: string;
  port: number;
  payload: Buffer;
}

/** One datagram's bytes on the stream; undefined when it cannot be carried (too large, host too long). */
export function encodeDatagram(datagram: Datagram): Buffer | undefined {
  const host = Buffer.from(datagram.host, 'utf8');
  if (host.length > 255 || datagram.payload.length > MAX_UDP_PAYLOAD) return undefined;
  if (!Number.isInteger(datagram.port) || datagram.port < 0 || datagram.port > 0xffff) return undefined;
  const header = Buffer.alloc(2 + 1 + host.length + 2);
  header.writeUInt16BE(1 + host.length + 2 + datagram.payload.length, 0);
  header.writeUInt8(host.length, 2);
  host.copy(header, 3);
  header.writeUInt16BE(datagram.port, 3 + host.length);
  return Buffer.concat([header, datagram.payload]);
}

/** A stream's bytes that do not hold datagrams: the stream is reset with this message. */
export class DatagramFormatError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DatagramFormatError';
  }
}

/**
 * Cuts a `udp` stream's bytes back into datagrams, whatever the chunking. Holds at most one datagram's bytes (≤ 64 KiB)
 * besides the chunk it is given.
 */
export class DatagramDecoder {
  private pending: Buffer = Buffer.alloc(0);

  /** The whole datagrams `chunk` completes, in order; throws DatagramFormatError on bytes that cannot be one. */
  push(chunk: Buffer): Datagram[] {
    let bytes = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : chunk;
    const datagrams: Datagram[] = [];
    while (bytes.length >= 2) {
      const length = bytes.readUInt16BE(0);
      if (bytes.length < 2 + length) break;
      const body = bytes.subarray(2, 2 + length);
      const hostLength = length >= 1 ? body[0] : -1;
      if (hostLength < 0 || 1 + hostLength + 2 > length)
        throw new DatagramFormatError(`a datagram of ${length} bytes cannot hold its host and port`);
      const host = body.subarray(1, 1 + hostLength).toString('utf8');
      const port = body.readUInt16BE(1 + hostLength);
      // A copy: the payload outlives the chunk it came in (it waits in a socket's send queue).
      datagrams.push({ host, port, payload: Buffer.from(body.subarray(1 + hostLength + 2)) });
      bytes = bytes.subarray(2 + length);
    }
    this.pending = Buffer.from(bytes);
    return datagrams;
  }
}
