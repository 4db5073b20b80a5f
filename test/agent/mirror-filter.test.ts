// Filtered mirrors: the agent parses a mirrored connection's client bytes (HTTP/1.x keep-alive with pipelining and
// chunked bodies; h2c streams on one connection), and only the requests that match the filter reach the session, one
// copy each; every request is told as a `request` traffic event. The pod answers all of them unchanged. Both ways of
// mirroring: by packet capture (the default) and through the agent (DEVOP_AGENT_MIRROR=proxy).
import { connect as connectHttp2, createServer, type ClientHttp2Session } from 'node:http2';
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { MAX_FILTERED_BODY_BYTES } from '../../shared/body-filter.js';
import type { TrafficEvent } from '../../shared/protocol.js';
import { requireRoot } from '../../testkit/root.js';
import { PodNet } from '../../testkit/netns.js';
import { connectSession, type TestSession } from '../../testkit/session-client.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent filtered mirror');
const H2_PORT = 3100;
const FILTER = { header: 'x-dev: ^me$', match: 'all' as const };

/** The mirror's request events a session got: method, path, and whether a copy went to the local command. */
function mirrorRequests(session: TestSession): string[] {
  return session.traffic
    .filter((e): e is Extract<TrafficEvent, { kind: 'request' }> => e.kind === 'request' && e.mirror === true)
    .map((e) => `${e.method} ${e.path} → ${e.to}`);
}

/** A chunked body's bytes (RFC 9112 §7.1); throws unless it ends with the last chunk and nothing after it. */
function dechunk(body: string): string {
  let out = '';
  let rest = body;
  for (;;) {
    const eol = rest.indexOf('\r\n');
    const size = Number.parseInt(rest.slice(0, eol), 16);
    if (size === 0) {
      expect(rest.slice(eol)).toBe('\r\n\r\n');
      return out;
    }
    out += rest.slice(eol + 2, eol + 2 + size);
    rest = rest.slice(eol + 4 + size);
  }
}

/** The lines a session was told about its mirror (log messages) that contain `text`. */
function told(session: TestSession, text: string): string[] {
  return session.messages.flatMap((m) => (m.type === 'log' && m.message.includes(text) ? [m.message] : []));
}

/** Sends `raw` on one client connection and resolves with the pod's answers once `answers` of them arrived. */
function exchange(to: string, raw: string, answers: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(to);
    let text = '';
    socket.on('data', (c: Buffer) => {
      text += c.toString();
      if ((text.match(/HTTP\/1\.1 200/g) ?? []).length === answers)
        setTimeout(() => {
          socket.end();
          resolve(text);
        }, 100);
    });
    socket.on('error', reject);
    socket.write(raw);
  });
}

/** The local command of the HTTP/2 session: an h2c server that keeps each stream's path and body length. */
async function startLocalH2c(): Promise<{ port: number; seen: string[]; bodies: string[]; close(): void }> {
  const seen: string[] = [];
  const bodies: string[] = [];
  const server = createServer();
  server.on('stream', (stream, headers) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      const body = Buffer.concat(chunks);
      seen.push(`${headers[':method']} ${headers[':path']} ${body.length}`);
      bodies.push(`${headers[':path']} ${body}`);
      stream.respond({ ':status': 200 });
      stream.end('local answer, dropped');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as { port: number }).port, seen, bodies, close: () => server.close() };
}

function h2Request(
  conn: ClientHttp2Session,
  path: string,
  headers: Record<string, string>,
  body?: Buffer,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const stream = conn.request({ ':method': body ? 'POST' : 'GET', ':path': path, ...headers }, { endStream: !body });
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => resolve(Buffer.concat(chunks).toString()));
    stream.on('error', reject);
    if (body) stream.end(body);
  });
}

for (const how of ['capture', 'proxy'] as const) {
  describe.runIf(run)(`agent: filtered mirror (${how})`, () => {
    const net = new PodNet();
    let client: string;
    let h2Client: string;
    let control: string;
    let local: Awaited<ReturnType<typeof startLocalH2c>>;
    const sessions: TestSession[] = [];

    beforeAll(async () => {
      await net.setup();
      await net.startPod({ port: 3000 });
      await net.runListener(net.podNs, join(import.meta.dirname, '../../testkit/fixtures/pod-h2c-server.mjs'), [
        String(H2_PORT),
      ]);
      const agent = await net.startAgent(how === 'proxy' ? { DEVOP_AGENT_MIRROR: 'proxy' } : {});
      control = await net.relay(net.podNs, '127.0.0.1', agent.port);
      client = await net.relay(net.clientNs, net.podIP, 3000);
      h2Client = await net.relay(net.clientNs, net.podIP, H2_PORT);
      local = await startLocalH2c();
    });
    afterAll(async () => {
      for (const session of sessions) session.mux.close('test over');
      local?.close();
      await net.teardown();
    });

    test('HTTP/1.x keep-alive, pipelined, chunked: only the matching requests are copied, one copy each', async () => {
      // Given a session mirroring :3000 with a header filter
      const session = await connectSession(control, { user: 'h1' });
      sessions.push(session);
      expect((await session.subscribe(3000, 'mirror', { filter: FILTER })).type).toBe('subscribed');
      // When one client connection sends three pipelined requests: a match, a miss, and a chunked match
      const raw =
        'GET /a HTTP/1.1\r\nHost: pod\r\nX-Dev: me\r\n\r\n' +
        'GET /b HTTP/1.1\r\nHost: pod\r\n\r\n' +
        'POST /c HTTP/1.1\r\nHost: pod\r\nX-Dev: me\r\nTransfer-Encoding: chunked\r\n\r\n' +
        '5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n';
      const answers = await exchange(client, raw, 3);
      // Then the pod answered all three
      expect(answers).toContain('pod: GET /a');
      expect(answers).toContain('pod: GET /b');
      expect(answers).toContain('pod: POST /c body=hello world');
      // And the session got two copies, each a request of its own, the chunked body intact
      await waitFor('two copies', () => session.incoming.filter((i) => i.data.length > 0).length >= 2, 5000);
      await new Promise((r) => setTimeout(r, 200));
      const copies = session.incoming.map((i) => Buffer.concat(i.data).toString());
      expect(copies).toHaveLength(2);
      expect(copies[0]).toMatch(/^GET \/a HTTP\/1.1\r\n.*X-Dev: me\r\nConnection: close\r\n\r\n$/s);
      expect(copies[1]).toMatch(/^POST \/c HTTP\/1.1\r\n.*Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n/s);
      expect(dechunk(copies[1].slice(copies[1].indexOf('\r\n\r\n') + 4))).toBe('hello world');
      for (const copy of session.incoming) expect(copy.open).toMatchObject({ kind: 'incoming', mode: 'mirror' });
      // And each request was told, matched or not
      await waitFor('three request events', () => mirrorRequests(session).length === 3);
      expect(mirrorRequests(session)).toEqual(['GET /a → local', 'GET /b → pod', 'POST /c → local']);
    });

    test('a JSON body filter: the body decides, and the copy carries it whole', async () => {
      // Given a session mirroring :3000 with a body filter
      const session = await connectSession(control, { user: 'body' });
      sessions.push(session);
      const filter = { body: '$.user: ^me$', match: 'all' as const };
      expect((await session.subscribe(3000, 'mirror', { filter })).type).toBe('subscribed');
      // When one keep-alive connection posts a matching body and one that does not match
      const post = (path: string, body: string): string =>
        `POST ${path} HTTP/1.1\r\nHost: pod\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${body.length}\r\n\r\n${body}`;
      await exchange(client, post('/yes', '{"user":"me"}') + post('/no', '{"user":"you"}'), 2);
      // Then only the matching one was copied, body included, and both were told
      await waitFor('two request events', () => mirrorRequests(session).length === 2);
      expect(mirrorRequests(session)).toEqual(['POST /yes → local', 'POST /no → pod']);
      await waitFor('the copy', () => session.incoming.some((i) => i.data.length > 0));
      await new Promise((r) => setTimeout(r, 200));
      const copies = session.incoming.map((i) => Buffer.concat(i.data).toString());
      expect(copies).toHaveLength(1);
      expect(copies[0]).toMatch(/^POST \/yes HTTP\/1.1\r\n.*\r\n\r\n\{"user":"me"\}$/s);
    });

    test('bytes that are not HTTP: one line, and that connection is not copied', async () => {
      // Given a session mirroring :3000 with a header filter
      const session = await connectSession(control, { user: 'raw' });
      sessions.push(session);
      expect((await session.subscribe(3000, 'mirror', { filter: FILTER })).type).toBe('subscribed');
      // When a client sends bytes that are no HTTP request, then an HTTP request on the same connection
      await new Promise<void>((resolve) => {
        const socket = connect(client);
        socket.on('error', () => resolve());
        socket.on('close', () => resolve());
        socket.write('\x16\x03\x01 not http\r\n\r\nGET /late HTTP/1.1\r\nX-Dev: me\r\n\r\n');
        setTimeout(() => socket.destroy(), 300);
      });
      // Then the session is told once, and gets no copy
      const said = () =>
        session.messages.filter((m) => m.type === 'log' && m.message.includes('is not copied: its bytes are not HTTP'));
      await waitFor('the line', () => said().length > 0);
      await new Promise((r) => setTimeout(r, 200));
      expect(said()).toHaveLength(1);
      expect(session.incoming).toHaveLength(0);
    });

    test('h2c: matching streams of one connection become copies to the local command, the others do not', async () => {
      // Given a session mirroring the h2c port with a header filter, its local command an h2c server
      const session = await connectSession(control, { user: 'h2', local });
      sessions.push(session);
      expect((await session.subscribe(H2_PORT, 'mirror', { filter: FILTER })).type).toBe('subscribed');
      // When one client connection sends a matching stream with a 200 KiB body, a miss, and a matching GET
      const conn = connectHttp2(`http://${net.podIP}:${H2_PORT}`, { createConnection: () => connect(h2Client) });
      conn.on('error', () => undefined);
      const big = Buffer.alloc(200 * 1024, 'x');
      const answers = await Promise.all([
        h2Request(conn, '/upload', { 'x-dev': 'me' }, big),
        h2Request(conn, '/other', {}),
        h2Request(conn, '/mine', { 'x-dev': 'me' }),
      ]);
      // Then the pod answered all of them
      expect(answers[1]).toBe('pod-h2: GET /other');
      expect(answers[2]).toBe('pod-h2: GET /mine');
      // And the local command got copies of the matching streams only, the body whole
      await waitFor('two copied streams', () => local.seen.length === 2, 5000);
      expect(local.seen.sort()).toEqual(['GET /mine 0', `POST /upload ${big.length}`]);
      expect(session.incoming.every((i) => i.open.mode === 'mirror' && i.open.answers === true)).toBe(true);
      await waitFor('three request events', () => mirrorRequests(session).length === 3);
      expect(mirrorRequests(session).sort()).toEqual(['GET /mine → local', 'GET /other → pod', 'POST /upload → local']);
      conn.close();
    });

    test('h2c with a JSON body filter: the body decides each stream, a copy carries it whole, one over the bound is not copied', async () => {
      // Given a session mirroring the h2c port with a body filter, its local command an h2c server
      local.seen.length = 0;
      local.bodies.length = 0;
      const session = await connectSession(control, { user: 'h2-body', local });
      sessions.push(session);
      const filter = { body: '$.user: ^me$', match: 'all' as const };
      expect((await session.subscribe(H2_PORT, 'mirror', { filter })).type).toBe('subscribed');
      // When one client connection posts a matching JSON body, one that does not match, and a matching one over 64 KiB
      const conn = connectHttp2(`http://${net.podIP}:${H2_PORT}`, { createConnection: () => connect(h2Client) });
      conn.on('error', () => undefined);
      const json = { 'content-type': 'application/json' };
      const over = Buffer.from(JSON.stringify({ user: 'me', pad: 'x'.repeat(MAX_FILTERED_BODY_BYTES) }));
      const answers = await Promise.all([
        h2Request(conn, '/yes', json, Buffer.from('{"user":"me","n":1}')),
        h2Request(conn, '/no', json, Buffer.from('{"user":"you"}')),
        h2Request(conn, '/big', json, over),
      ]);
      // Then the pod answered all of them
      expect(answers[0]).toBe('pod-h2: POST /yes body={"user":"me","n":1}');
      expect(answers[1]).toBe('pod-h2: POST /no body={"user":"you"}');
      // And only the matching stream within the bound reached the local command, its body whole
      await waitFor('the copy', () => local.bodies.length > 0, 5000);
      await waitFor('three request events', () => mirrorRequests(session).length === 3);
      await new Promise((r) => setTimeout(r, 200));
      expect(local.bodies).toEqual(['/yes {"user":"me","n":1}']);
      expect(mirrorRequests(session).sort()).toEqual(['POST /big → pod', 'POST /no → pod', 'POST /yes → local']);
      // And the one over the bound says why it was not copied, as over HTTP/1.x
      const big = session.traffic.find((e) => e.kind === 'request' && e.path === '/big');
      expect(big).toMatchObject({ to: 'pod', note: 'body over 64 KiB: the body filter cannot read it' });
      conn.close();
    });

    test('HTTP/1.x with a JSON body filter: a body over the bound is not copied, and its line says why', async () => {
      // Given a session mirroring :3000 with a body filter
      const session = await connectSession(control, { user: 'body-over' });
      sessions.push(session);
      const filter = { body: '$.user: ^me$', match: 'all' as const };
      expect((await session.subscribe(3000, 'mirror', { filter })).type).toBe('subscribed');
      // When a client posts a matching JSON body over 64 KiB
      const body = JSON.stringify({ user: 'me', pad: 'x'.repeat(MAX_FILTERED_BODY_BYTES) });
      await exchange(
        client,
        'POST /big HTTP/1.1\r\nHost: pod\r\nContent-Type: application/json\r\n' +
          `Content-Length: ${body.length}\r\n\r\n${body}`,
        1,
      );
      // Then it is told, not copied, and says why
      await waitFor('the request event', () => mirrorRequests(session).length === 1);
      const event = session.traffic.find((e) => e.kind === 'request' && e.path === '/big');
      expect(event).toMatchObject({ to: 'pod', note: 'body over 64 KiB: the body filter cannot read it' });
      await new Promise((r) => setTimeout(r, 200));
      expect(session.incoming).toHaveLength(0);
    });

    test('an h2c offer on a later request is declined for the copies: its request is copied without it', async () => {
      // Given a session mirroring :3000 with a header filter (the pod's app accepts any upgrade)
      const session = await connectSession(control, { user: 'h2c-later' });
      sessions.push(session);
      expect((await session.subscribe(3000, 'mirror', { filter: FILTER })).type).toBe('subscribed');
      // When a keep-alive connection sends a request, then one offering h2c (both matching)
      await exchange(
        client,
        'GET /m1 HTTP/1.1\r\nHost: pod\r\nX-Dev: me\r\n\r\n' +
          'GET /m2 HTTP/1.1\r\nHost: pod\r\nX-Dev: me\r\nConnection: Upgrade, HTTP2-Settings\r\n' +
          'Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n',
        1,
      );
      // Then both are copied, the second without the offer
      await waitFor('two copies', () => session.incoming.filter((i) => i.data.length > 0).length >= 2, 5000);
      await new Promise((r) => setTimeout(r, 200));
      const copies = session.incoming.map((i) => Buffer.concat(i.data).toString());
      expect(copies).toHaveLength(2);
      expect(copies[1]).toMatch(/^GET \/m2 HTTP\/1.1\r\n.*X-Dev: me\r\nConnection: close\r\n\r\n$/s);
      expect(copies[1]).not.toMatch(/h2c|HTTP2-Settings/i);
      expect(mirrorRequests(session)).toEqual(['GET /m1 → local', 'GET /m2 → local']);
    });

    test('a WebSocket upgrade: one line naming the connection, and nothing after it is copied', async () => {
      // Given a session mirroring :3000 with a header filter
      const session = await connectSession(control, { user: 'ws' });
      sessions.push(session);
      expect((await session.subscribe(3000, 'mirror', { filter: FILTER })).type).toBe('subscribed');
      // When a connection sends a matching request, then a WebSocket upgrade the pod accepts, then bytes over it
      const answered = await new Promise<string>((resolve, reject) => {
        const socket = connect(client);
        let text = '';
        socket.on('error', reject);
        const done = setTimeout(() => {
          socket.destroy();
          resolve(text);
        }, 3000);
        let step = 0;
        socket.on('data', (c: Buffer) => {
          text += c.toString();
          if (step === 0 && text.includes('pod: GET /before')) {
            step = 1;
            socket.write(
              'GET /ws HTTP/1.1\r\nHost: pod\r\nX-Dev: me\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n',
            );
          } else if (step === 1 && /101 Switching Protocols.*\r\n\r\n/s.test(text)) {
            step = 2;
            socket.write('GET /after HTTP/1.1\r\nX-Dev: me\r\n\r\n');
            clearTimeout(done);
            setTimeout(() => {
              socket.destroy();
              resolve(text);
            }, 300);
          }
        });
        socket.write('GET /before HTTP/1.1\r\nHost: pod\r\nX-Dev: me\r\n\r\n');
      });
      expect(answered).toMatch(/pod: GET \/before.*HTTP\/1.1 101 Switching Protocols.*GET \/after/s);
      // Then the session is told once, naming the connection, and only the request before the upgrade was copied
      await waitFor('the line', () => told(session, 'upgraded connections are not copied').length > 0);
      await new Promise((r) => setTimeout(r, 200));
      const line = new RegExp(
        '^mirror of :3000: connection 3000-\\S+ is not copied: it was upgraded to websocket \\(GET /ws\\): ' +
          'upgraded connections are not copied; the pod was not affected$',
      );
      expect(told(session, 'upgraded connections are not copied')).toEqual([expect.stringMatching(line)]);
      expect(mirrorRequests(session)).toEqual(['GET /before → local']);
      expect(session.incoming).toHaveLength(1);
    });
  });
}
