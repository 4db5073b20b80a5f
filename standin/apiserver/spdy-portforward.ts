// kubectl port-forward as kubectl 1.31+ speaks it: a WebSocket whose subprotocol SPDY/3.1+portforward.k8s.io says
// that the binary messages carry SPDY/3 frames (the API server's "tunneling" port-forward). Each forwarded connection
// is a pair of client-opened streams (headers streamtype error|data, port, requestid); the data stream's bytes go to
// the pod's port and back, the error stream carries a failure message. No flow control: kubectl's SPDY library
// (spdystream) has none.
import type { Duplex } from 'node:stream';
import { constants, createDeflate, createInflate, type Deflate, type Inflate } from 'node:zlib';
import { WebSocket } from 'ws';
import type { K8sObject } from './errors.js';

export const SPDY_TUNNEL_PROTOCOL = 'SPDY/3.1+portforward.k8s.io';

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
/** Stop reading from the pod while this much is queued towards the client (bounded memory per connection). */
const HIGH_WATER = 1024 * 1024;

interface ForwardedConnection {
  port: number;
  errorStream?: number;
  dataStream?: number;
  socket?: Duplex;
  /** Bytes (and the end) the client sent before the pod connection was open. */
  pending: Buffer[];
  ended: boolean;
}

/** A zlib stream kept for the whole session (SPDY compresses header blocks with one context per direction). */
function syncFlushing(z: Inflate | Deflate): (input: Buffer) => Promise<Buffer> {
  const out: Buffer[] = [];
  z.on('data', (chunk: Buffer) => out.push(chunk));
  return (input) =>
    new Promise((resolve, reject) => {
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
  for (let i = block.readUInt32BE(0); i > 0; i--) headers.set(next(), next().split('\0')[0]);
  return headers;
}

export type DialPod = (port: number) => Promise<Duplex>;

export function serveSpdyPortForward(ws: WebSocket, pod: K8sObject, dial: DialPod | undefined): void {
  const inflate = syncFlushing(createInflate({ dictionary: HEADER_DICTIONARY }));
  const deflate = syncFlushing(createDeflate({ dictionary: HEADER_DICTIONARY }));
  const connections = new Map<string, ForwardedConnection>();
  const byStream = new Map<number, ForwardedConnection>();
  let input = Buffer.alloc(0);
  // Frames are handled one at a time, in order: a header block can only be inflated after the ones before it.
  let handling = Promise.resolve();
  // SYN_REPLYs leave in the order their header blocks were deflated.
  let replies = Promise.resolve();

  const send = (frame: Buffer, done?: () => void): void => {
    if (ws.readyState === WebSocket.OPEN) ws.send(frame, done);
  };
  const reply = (streamId: number): Promise<void> => {
    const id = Buffer.alloc(4);
    id.writeUInt32BE(streamId, 0);
    // An empty header block: a count of 0.
    replies = replies.then(async () => {
      const headers = await deflate(Buffer.alloc(4));
      send(controlFrame(SYN_REPLY, 0, Buffer.concat([id, headers])));
    });
    return replies;
  };
  const fail = (conn: ForwardedConnection, message: string): void => {
    const text = `error forwarding port ${conn.port} to pod ${pod.metadata.name}, uid ${pod.metadata.uid}: ${message}`;
    if (conn.errorStream !== undefined) send(dataFrame(conn.errorStream, FLAG_FIN, Buffer.from(text)));
    if (conn.dataStream !== undefined) send(dataFrame(conn.dataStream, FLAG_FIN, Buffer.alloc(0)));
  };

  const open = async (conn: ForwardedConnection, streamId: number): Promise<void> => {
    if (!dial) return fail(conn, 'no node runs this pod');
    let socket: Duplex;
    try {
      socket = await dial(conn.port);
    } catch (err) {
      return fail(conn, (err as Error).message);
    }
    if (ws.readyState !== WebSocket.OPEN) return void socket.destroy();
    conn.socket = socket;
    for (const chunk of conn.pending.splice(0)) socket.write(chunk);
    if (conn.ended) socket.end();
    let queued = 0;
    socket.on('data', (chunk: Buffer) => {
      queued += chunk.length;
      send(dataFrame(streamId, 0, chunk), () => {
        queued -= chunk.length;
        if (queued < HIGH_WATER && socket.isPaused()) socket.resume();
      });
      if (queued >= HIGH_WATER) socket.pause();
    });
    socket.on('end', () => {
      send(dataFrame(streamId, FLAG_FIN, Buffer.alloc(0)));
      if (conn.errorStream !== undefined) send(dataFrame(conn.errorStream, FLAG_FIN, Buffer.alloc(0)));
    });
    socket.on('error', (err) => fail(conn, err.message));
  };

  const synStream = async (frame: Buffer): Promise<void> => {
    const streamId = frame.readUInt32BE(8) & 0x7fffffff;
    const headers = parseHeaders(await inflate(frame.subarray(18)));
    const requestId = headers.get('requestid') ?? String(streamId);
    const conn = connections.get(requestId) ?? { port: Number(headers.get('port')), pending: [], ended: false };
    connections.set(requestId, conn);
    byStream.set(streamId, conn);
    const type = headers.get('streamtype');
    if (type === 'error') conn.errorStream = streamId;
    else if (type === 'data') conn.dataStream = streamId;
    await reply(streamId);
    if (type === 'data') {
      if (!(conn.port > 0 && conn.port < 65536)) return fail(conn, `invalid port ${headers.get('port')}`);
      void open(conn, streamId);
    }
  };

  const handle = async (frame: Buffer): Promise<void> => {
    const flags = frame[4];
    if (!(frame[0] & 0x80)) {
      const conn = byStream.get(frame.readUInt32BE(0) & 0x7fffffff);
      if (!conn || conn.dataStream !== (frame.readUInt32BE(0) & 0x7fffffff)) return; // the error stream's FIN, or gone
      const payload = frame.subarray(8);
      if (payload.length > 0) {
        if (conn.socket) conn.socket.write(payload);
        else conn.pending.push(Buffer.from(payload));
      }
      if (flags & FLAG_FIN) {
        conn.ended = true;
        conn.socket?.end();
      }
      return;
    }
    const type = frame.readUInt16BE(2);
    if (type === SYN_STREAM) await synStream(frame);
    else if (type === RST_STREAM) byStream.get(frame.readUInt32BE(8) & 0x7fffffff)?.socket?.destroy();
    else if (type === PING) send(frame);
    else if (type === GOAWAY) ws.close(1000);
    // SETTINGS, WINDOW_UPDATE, HEADERS: nothing to do for port-forward.
  };

  ws.on('message', (data: Buffer) => {
    input = Buffer.concat([input, data]);
    while (input.length >= 8) {
      const length = input.readUInt32BE(4) & 0xffffff;
      if (input.length < 8 + length) break;
      const frame = input.subarray(0, 8 + length);
      input = input.subarray(8 + length);
      handling = handling.then(() => handle(frame)).catch(() => ws.close(1002, 'bad SPDY frame'));
    }
  });
  ws.on('close', () => {
    for (const conn of connections.values()) conn.socket?.destroy();
  });
}
