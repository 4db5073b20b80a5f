// The HTTP/1.1 `Upgrade: h2c` offer on a filtered port, declined: the request goes on as HTTP/1.1 without it, so the
// connection stays one the agent routes request by request. RFC 9113 §3.1 deprecates the h2c upgrade and RFC 9110 §7.8
// lets a server ignore an Upgrade; clients that offer it (curl --http2 on http://) carry on in HTTP/1.1. Accepting it
// would need the upgrade request answered on HTTP/2 stream 1, which Node's http2 server cannot be handed.

/** The end of a request head (RFC 9112 §2.1). */
const HEAD_END = Buffer.from('\r\n\r\n');

/** Whether `seen` holds a whole request head (or more), so the offer can be looked for. */
export function headComplete(seen: Buffer): boolean {
  return seen.indexOf(HEAD_END) >= 0;
}

/**
 * The bytes with an `Upgrade: h2c` offer taken out of the first request head: its Upgrade and HTTP2-Settings header
 * lines, and those two tokens of Connection (the line goes when nothing is left). Anything else is returned as it came,
 * an Upgrade to other protocols too (WebSocket is routed whole by its request).
 */
export function withoutH2cOffer(seen: Buffer): Buffer {
  // Every first head of a filtered connection comes here: most carry no "h2c" in any case, and cost two searches.
  if (seen.indexOf('2c') < 0 && seen.indexOf('2C') < 0) return seen;
  const end = seen.indexOf(HEAD_END);
  if (end < 0) return seen;
  const lines = seen.subarray(0, end).toString('latin1').split('\r\n');
  const isOffer = (line: string): boolean => /^upgrade:\s*h2c\s*$/i.test(line);
  if (!lines.some(isOffer)) return seen;
  const kept: string[] = [];
  for (const line of lines) {
    if (isOffer(line) || /^http2-settings:/i.test(line)) continue;
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
