// The h2c upgrade offer taken out of a request head; other heads and other upgrades left as they came.
import { describe, expect, it } from 'vitest';
import { withoutH2cOffer } from './h2c-upgrade.js';

describe('declining the h2c upgrade', () => {
  it("takes out curl --http2's offer and keeps the rest of the head and what follows it", () => {
    // Given the head curl sends to an http:// URL with --http2, and the start of a body after it
    const head =
      'GET /a HTTP/1.1\r\nHost: pod\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n' +
      'HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\nx-user: alice\r\n\r\nbody';
    // Then Upgrade, HTTP2-Settings and Connection go; the rest stays byte for byte
    expect(withoutH2cOffer(Buffer.from(head)).toString()).toBe(
      'GET /a HTTP/1.1\r\nHost: pod\r\nx-user: alice\r\n\r\nbody',
    );
  });

  it('keeps Connection tokens other than the offer, and leaves WebSocket upgrades and partial heads alone', () => {
    // Given an offer with keep-alive, a WebSocket upgrade, and a head not yet whole
    const keepAlive = 'GET / HTTP/1.1\r\nconnection: keep-alive, Upgrade, HTTP2-Settings\r\nupgrade: H2C\r\n\r\n';
    const websocket = 'GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n';
    const partial = 'GET / HTTP/1.1\r\nUpgrade: h2c\r\n';
    // Then only the offer goes
    expect(withoutH2cOffer(Buffer.from(keepAlive)).toString()).toBe('GET / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n');
    expect(withoutH2cOffer(Buffer.from(websocket)).toString()).toBe(websocket);
    expect(withoutH2cOffer(Buffer.from(partial)).toString()).toBe(partial);
  });
});
