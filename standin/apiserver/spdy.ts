// SPDY/3 as kubectl's SPDY library (moby/spdystream) speaks it to kube-apiserver and the kubelet: the frame codec, the
// compressed header blocks and one session's streams, over any transport (a raw upgraded connection, or a WebSocket
// whose binary messages carry the frames). The peer opens every stream; each gets a SYN_REPLY with no headers before
// any data frame (spdystream drops data on a stream it has no reply for). No flow control: spdystream has none.
import { constants, createDeflate, createInflate, type Deflate, type Inflate } from 'node:zlib';

/** SPDY/3's fixed zlib dictionary for header blocks (the draft's section 2.6.10.1; zlib dictionary id 0xe3c6a7c2). */
const HEADER_DICTIONARY = Buffer.from(
  [
    'AAAAB29wdGlvbnMAAAAEaGVhZAAAAARwb3N0AAAAA3B1dAAAAAZkZWxldGUAAAAFdHJhY2UAAAAGYWNjZXB0AAAADmFjY2VwdC1jaGFyc2V0',
    'AAAAD2FjY2VwdC1lbmNvZGluZwAAAA9hY2NlcHQtbGFuZ3VhZ2UAAAANYWNjZXB0LXJhbmdlcwAAAANhZ2UAAAAFYWxsb3cAAAANYXV0aG9y',
    'aXphdGlvbgAAAA1jYWNoZS1jb250cm9sAAAACmNvbm5lY3Rpb24AAAAMY29udGVudC1iYXNlAAAAEGNvbnRlbnQtZW5jb2RpbmcAAAAQY29u',
    'dGVudC1sYW5ndWFnZQAAAA5jb250ZW50LWxlbmd0aAAAABBjb250ZW50LWxvY2F0aW9uAAAAC2NvbnRlbnQtbWQ1AAAADWNvbnRlbnQtcmFu',
    'Z2UAAAAMY29udGVudC10eXBlAAAABGRhdGUAAAAEZXRhZwAAAAZleHBlY3QAAAAHZXhwaXJlcwAAAARmcm9tAAAABGhvc3QAAAAIaWYtbWF0',
    'Y2gAAAARaWYtbW9kaWZpZWQtc2luY2UAAAANaWYtbm9uZS1tYXRjaAAAAAhpZi1yYW5nZQAAABNpZi11bm1vZGlmaWVkLXNpbmNlAAAADWxh',
    'c3QtbW9kaWZpZWQAAAAIbG9jYXRpb24AAAAMbWF4LWZvcndhcmRzAAAABnByYWdtYQAAABJwcm94eS1hdXRoZW50aWNhdGUAAAATcHJveHkt',
    'YXV0aG9yaXphdGlvbgAAAAVyYW5nZQAAAAdyZWZlcmVyAAAAC3JldHJ5LWFmdGVyAAAABnNlcnZlcgAAAAJ0ZQAAAAd0cmFpbGVyAAAAEXRy',
    'YW5zZmVyLWVuY29kaW5nAAAAB3VwZ3JhZGUAAAAKdXNlci1hZ2VudAAAAAR2YXJ5AAAAA3ZpYQAAAAd3YXJuaW5nAAAAEHd3dy1hdXRoZW50',
    'aWNhdGUAAAAGbWV0aG9kAAAAA2dldAAAAAZzdGF0dXMAAAAGMjAwIE9LAAAAB3ZlcnNpb24AAAAISFRUUC8xLjEAAAADdXJsAAAABnB1Ymxp',
    'YwAAAApzZXQtY29va2llAAAACmtlZXAtYWxpdmUAAAAGb3JpZ2luMTAwMTAxMjAxMjAyMjA1MjA2MzAwMzAyMzAzMzA0MzA1MzA2MzA3NDAy',
    'NDA1NDA2NDA3NDA4NDA5NDEwNDExNDEyNDEzNDE0NDE1NDE2NDE3NTAyNTA0NTA1MjAzIE5vbi1BdXRob3JpdGF0aXZlIEluZm9ybWF0aW9u',
    'MjA0IE5vIENvbnRlbnQzMDEgTW92ZWQgUGVybWFuZW50bHk0MDAgQmFkIFJlcXVlc3Q0MDEgVW5hdXRob3JpemVkNDAzIEZvcmJpZGRlbjQw',
    'NCBOb3QgRm91bmQ1MDAgSW50ZXJuYWwgU2VydmVyIEVycm9yNTAxIE5vdCBJbXBsZW1lbnRlZDUwMyBTZXJ2aWNlIFVuYXZhaWxhYmxlSmFu',
    'IEZlYiBNYXIgQXByIE1heSBKdW4gSnVsIEF1ZyBTZXB0IE9jdCBOb3YgRGVjIDAwOjAwOjAwIE1vbiwgVHVlLCBXZWQsIFRodSwgRnJpLCBT',
    'YXQsIFN1biwgR01UY2h1bmtlZCx0ZXh0L2h0bWwsaW1hZ2UvcG5nLGltYWdlL2pwZyxpbWFnZS9naWYsYXBwbGljYXRpb24veG1sLGFwcGxp',
    'Y2F0aW9uL3hodG1sK3htbCx0ZXh0L3BsYWluLHRleHQvamF2YXNjcmlwdCxwdWJsaWNwcml2YXRlbWF4LWFnZT1nemlwLGRlZmxhdGUsc2Rj',
    'aGNoYXJzZXQ9dXRmLThjaGFyc2V0PWlzby04ODU5LTEsdXRmLSwqLGVucT0wLg==',
  ].join(''),
  'base64',
);

const SPDY_VERSION = 3;
const SYN_STREAM = 1;
const SYN_REPLY = 2;
const RST_STREAM = 3;
const PING = 6;
const GOAWAY = 7;
const FLAG_FIN = 0x01;

/** Where a session's frames go: the frames must arrive in the order they are given. */
export interface SpdyTransport {
  write(frame: Buffer, done?: () => void): void;
  isOpen(): boolean;
  /** Ends the connection (after the frames already given). */
  end(): void;
}

export interface SpdyHandlers {
  /** A stream the peer opened, with its headers (names in lower case, the first value of each). */
  stream(id: number, headers: Map<string, string>): void;
  /** Bytes on a stream; `fin` when the peer will send no more on it (a half-close). */
  data(id: number, payload: Buffer, fin: boolean): void;
  /** The peer reset a stream. */
  reset(id: number): void;
  /** The peer is going away (GOAWAY) or the connection broke. */
  closed(): void;
}

/** A zlib stream kept for the whole session (SPDY compresses header blocks with one context per direction). */
function syncFlushing(z: Inflate | Deflate): (input: Buffer) => Promise<Buffer> {
  const out: Buffer[] = [];
  z.on('data', (chunk: Buffer) => out.push(chunk));
  return (input) =>
    new Promise((resolve, reject) => {
      // A session closed while a frame was still queued: its header block is not needed any more.
      if (z.destroyed) return reject(new Error('the SPDY session is closed'));
      z.once('error', reject);
      z.write(input);
      z.flush(constants.Z_SYNC_FLUSH, () => {
        z.off('error', reject);
        resolve(Buffer.concat(out.splice(0)));
      });
    });
}

function controlFrame(type: number, flags: number, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt16BE(0x8000 | SPDY_VERSION, 0);
  head.writeUInt16BE(type, 2);
  head.writeUInt32BE(data.length, 4);
  head[4] = flags;
  return Buffer.concat([head, data]);
}

function dataFrame(streamId: number, flags: number, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(streamId & 0x7fffffff, 0);
  head.writeUInt32BE(data.length, 4);
  head[4] = flags;
  return Buffer.concat([head, data]);
}

function u32(...values: number[]): Buffer {
  const b = Buffer.alloc(4 * values.length);
  for (const [i, v] of values.entries()) b.writeUInt32BE(v >>> 0, 4 * i);
  return b;
}

/** A header block: count, then length-prefixed names and values (several values of one name joined by NUL). */
function parseHeaders(block: Buffer): Map<string, string> {
  const headers = new Map<string, string>();
  let at = 4;
  const next = (): string => {
    const length = block.readUInt32BE(at);
    const text = block.subarray(at + 4, at + 4 + length).toString('utf8');
    at += 4 + length;
    return text;
  };
  for (let i = block.readUInt32BE(0); i > 0; i--) headers.set(next().toLowerCase(), next().split('\0')[0]);
  return headers;
}

export interface SpdySession {
  /** Bytes from the transport, in order (frames may be split or joined anyhow). */
  receive(chunk: Buffer): void;
  /** Data on a stream; `done` once the transport took it (for backpressure). */
  send(id: number, payload: Buffer, fin?: boolean, done?: () => void): void;
  /** Frees the header compression contexts once the transport closed. */
  close(): void;
  /** GOAWAY naming the last stream the peer opened, then the end of the transport, as spdystream's Close. */
  goAway(): void;
}

export function spdySession(transport: SpdyTransport, handlers: SpdyHandlers): SpdySession {
  const inflater = createInflate({ dictionary: HEADER_DICTIONARY });
  const deflater = createDeflate({ dictionary: HEADER_DICTIONARY });
  const inflate = syncFlushing(inflater);
  const deflate = syncFlushing(deflater);
  let input: Buffer = Buffer.alloc(0);
  let lastStream = 0;
  let gone = false;
  // Frames are handled one at a time, in order: a header block can only be inflated after the ones before it.
  let handling = Promise.resolve();
  // Outgoing frames leave in order, each after the SYN_REPLYs queued before it (their header blocks deflate
  // asynchronously).
  let outgoing = Promise.resolve();
  const queue = (frame: Buffer | Promise<Buffer>, done?: () => void): void => {
    outgoing = outgoing
      .then(async () => {
        const bytes = await frame;
        if (transport.isOpen()) transport.write(bytes, done);
      })
      // A header block that cannot be compressed leaves the session unusable: it ends, the chain goes on (no rejection
      // left unhandled).
      .catch(() => transport.end());
  };
  const closed = (): void => {
    if (gone) return;
    gone = true;
    handlers.closed();
  };

  const handle = async (frame: Buffer): Promise<void> => {
    const flags = frame[4];
    if (!(frame[0] & 0x80)) {
      handlers.data(frame.readUInt32BE(0) & 0x7fffffff, frame.subarray(8), (flags & FLAG_FIN) !== 0);
      return;
    }
    const type = frame.readUInt16BE(2);
    if (type === SYN_STREAM) {
      const id = frame.readUInt32BE(8) & 0x7fffffff;
      lastStream = Math.max(lastStream, id);
      const headers = parseHeaders(await inflate(frame.subarray(18)));
      // An empty header block (a count of 0) in reply, as spdystream's SendReply(http.Header{}, false).
      queue(deflate(Buffer.alloc(4)).then((block) => controlFrame(SYN_REPLY, 0, Buffer.concat([u32(id), block]))));
      handlers.stream(id, headers);
      if (flags & FLAG_FIN) handlers.data(id, Buffer.alloc(0), true);
    } else if (type === RST_STREAM) handlers.reset(frame.readUInt32BE(8) & 0x7fffffff);
    else if (type === PING) queue(Buffer.from(frame));
    else if (type === GOAWAY) closed();
    // SETTINGS, WINDOW_UPDATE, HEADERS: nothing to do without flow control.
  };

  return {
    receive(chunk) {
      input = input.length ? Buffer.concat([input, chunk]) : chunk;
      while (input.length >= 8) {
        const length = input.readUInt32BE(4) & 0xffffff;
        if (input.length < 8 + length) break;
        const frame = Buffer.from(input.subarray(0, 8 + length));
        input = input.subarray(8 + length);
        handling = handling.then(() => handle(frame)).catch(() => transport.end());
      }
    },
    send(id, payload, fin = false, done) {
      queue(dataFrame(id, fin ? FLAG_FIN : 0, payload), done);
    },
    close() {
      inflater.close();
      deflater.close();
    },
    goAway() {
      queue(controlFrame(GOAWAY, 0, u32(lastStream, 0)));
      outgoing = outgoing.then(() => transport.end());
    },
  };
}
