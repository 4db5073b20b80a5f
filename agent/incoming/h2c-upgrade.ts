// The HTTP/1.1 `Upgrade: h2c` offer on a filtered or filtered-mirror port, declined on every request of a connection:
// the request goes on as HTTP/1.1 without it, so the connection stays one the agent routes (or copies) request by
// request. RFC 9113 §3.1 deprecates the h2c upgrade and RFC 9110 §7.8 lets a server ignore an Upgrade; clients that
// offer it (curl --http2 on http://) carry on in HTTP/1.1. Accepting it would need the upgrade request answered on
// HTTP/2 stream 1, which Node's http2 server cannot be handed.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';

/** The end of a request head (RFC 9112 §2.1). */
const HEAD_END = Buffer.from('\r\n\r\n');
const OFFER = /^upgrade:\s*h2c\s*$/i;

/** The request line and headers of a request as the client sent them, and the bytes that followed it. */
export function requestHead(req: IncomingMessage, after: Buffer): Buffer {
  let text = `${req.method} ${req.url} HTTP/${req.httpVersion}\r\n`;
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) text += `${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}\r\n`;
  return Buffer.concat([Buffer.from(`${text}\r\n`, 'latin1'), after]);
}

/**
 * The bytes with an `Upgrade: h2c` offer taken out of the request head they start with: its Upgrade and HTTP2-Settings
 * header lines, and those two tokens of Connection (the line goes when nothing is left). Anything else is returned as
 * it came, an Upgrade to other protocols too (WebSocket is routed whole by its request).
 */
export function withoutH2cOffer(seen: Buffer): Buffer {
  const end = seen.indexOf(HEAD_END);
  if (end < 0) return seen;
  const lines = seen.subarray(0, end).toString('latin1').split('\r\n');
  if (!lines.some((line) => OFFER.test(line))) return seen;
  const kept: string[] = [];
  for (const line of lines) {
    if (OFFER.test(line) || /^http2-settings:/i.test(line)) continue;
    const connection = /^connection:(.*)$/i.exec(line);
    if (!connection) {
      kept.push(line);
      continue;
    }
    const tokens = connection[1]
      .split(',')
      .map((t) => t.trim())
      .filter((t) => t !== '' && !/^(upgrade|http2-settings)$/i.test(t));
    if (tokens.length > 0) kept.push(`Connection: ${tokens.join(', ')}`);
  }
  return Buffer.concat([Buffer.from(kept.join('\r\n'), 'latin1'), seen.subarray(end)]);
}

/** Whether a request Node's HTTP server handed over as an upgrade offers h2c (and nothing else). */
export function offersH2c(req: IncomingMessage): boolean {
  return /^\s*h2c\s*$/i.test(String(req.headers.upgrade ?? ''));
}

/**
 * Declines the h2c offer of a request Node's HTTP server handed over as an upgrade (`after`: the bytes it had read past
 * the head): the request is given back to the server without the offer, with what followed it, and the server parses
 * the connection on as HTTP/1.1. Only such requests come here: a request without an Upgrade costs nothing more. An
 * answer still being written for an earlier pipelined request finishes first (the server's queue of answers is per
 * connection it was handed, and starts again empty).
 */
export function declineH2cOffer(server: Server, req: IncomingMessage, socket: Duplex, after: Buffer): void {
  const again = (): void => {
    if (socket.destroyed) return;
    socket.unshift(withoutH2cOffer(requestHead(req, after)));
    server.emit('connection', socket);
  };
  const answering = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (answering && !answering.writableFinished) answering.once('finish', () => setImmediate(again));
  else again();
}
