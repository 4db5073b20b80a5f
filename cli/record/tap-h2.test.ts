// --record of HTTP/2 (h2c, the way the agent hands a filtered port's matched streams to the session, and h2 in TLS as
// it re-encrypts them under --tls-secret), over a real mux on a real socket pair: gRPC-like unary calls reach the local
// command and come back with their trailers, land in the HAR as HTTP/2 with those trailers, and `devop replay` sends
// them over HTTP/2 again.
import { mkdtempSync, rmSync } from 'node:fs';
import {
  connect as connectHttp2,
  createSecureServer,
  createServer as createHttp2Server,
  type ClientHttp2Session,
  type Http2SecureServer,
  type Http2Server,
} from 'node:http2';
import { connect as tlsConnect } from 'node:tls';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createAgentMux, createClientMux, type AgentMux } from '../../shared/mux.js';
import { socketPair } from '../../testkit/sockets.js';
import { incomingStreamHandler } from '../services/incoming.js';
import { runReplay } from '../services/replay.js';
import { HarRecorder, readHar } from './har.js';
import { makeSessionCert } from '../process/session-cert.js';
import { chooseAlpn, ExchangeRecorder, sniff } from './tap.js';
import { HTTP2_PREFACE } from './tap-h2.js';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

/** gRPC's length-prefixed message (PROTOCOL-HTTP2.md): not UTF-8 text, so the HAR keeps it as base64. */
const grpcFrame = (text: string): Buffer =>
  Buffer.concat([Buffer.from([0, 0, 0, 0, text.length]), Buffer.from(text, 'latin1')]);

/** The local command: a gRPC-like HTTP/2 server; /x.Echo/Say echoes with grpc-status `status`, /x.Echo/Deny fails. */
async function localGrpc(
  status: () => string,
  tls = false,
): Promise<{ port: number; server: Http2Server | Http2SecureServer }> {
  const server = tls ? createSecureServer(makeSessionCert('local h2 test')) : createHttp2Server();
  server.on('stream', (stream, headers) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      if (headers[':path'] === '/x.Echo/Deny') {
        stream.respond(
          { ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '7', 'grpc-message': 'denied' },
          { endStream: true },
        );
        return;
      }
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': status(), 'x-served-by': 'local' }));
      stream.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => server.close());
  return { port: (server.address() as AddressInfo).port, server };
}

async function setup(localPort: number): Promise<{ agent: AgentMux; har: HarRecorder; file: string; dir: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'devop-record-h2-'));
  const file = join(dir, 'session.har');
  const [a, b] = await socketPair(cleanups);
  const agent = createAgentMux(a);
  const client = createClientMux(b);
  const har = new HarRecorder(file, '0.0.0-test', undefined, { env: { XDG_CONFIG_HOME: dir } });
  await har.start();
  const handler = incomingStreamHandler({
    ports: [{ remote: 50051, local: localPort }],
    recorder: new ExchangeRecorder(har),
  });
  client.on('stream', (stream) => handler(stream, 'orders-abc'));
  cleanups.push(() => {
    agent.close();
    client.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { agent, har, file, dir };
}

/**
 * An HTTP/2 client connection over one stolen stream, as the agent makes for a subscription's matched streams: h2c, or
 * (`tls`) h2 in TLS offering h2 alone, as the agent re-encrypts towards the local command under --tls-secret.
 */
function stolenH2c(agent: AgentMux, tls = false): ClientHttp2Session {
  const stream = agent.openStream({
    kind: 'incoming',
    port: 50051,
    mode: 'steal',
    remoteAddress: '10.0.0.2',
    remotePort: 40000,
  });
  const session = tls
    ? connectHttp2('https://orders.default.svc:50051', {
        createConnection: () =>
          tlsConnect({ socket: stream as never, ALPNProtocols: ['h2'], rejectUnauthorized: false }) as never,
      })
    : connectHttp2('http://orders.default.svc:50051', { createConnection: () => stream as never });
  cleanups.push(() => session.destroy());
  return session;
}

function call(
  session: ClientHttp2Session,
  path: string,
  message: Buffer,
): Promise<{ body: Buffer; headers: Record<string, unknown>; trailers: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
    });
    let headers: Record<string, unknown> = {};
    let trailers: Record<string, unknown> = {};
    const chunks: Buffer[] = [];
    stream.on('response', (h) => {
      headers = h;
    });
    stream.on('trailers', (t) => {
      trailers = t;
    });
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => resolve({ body: Buffer.concat(chunks), headers, trailers }));
    stream.on('error', reject);
    stream.end(message);
  });
}

describe('--record of HTTP/2 (h2c)', () => {
  it('sniffs the HTTP/2 preface as h2c, not as an HTTP/1.x request line', () => {
    expect(sniff(HTTP2_PREFACE)).toBe('h2c');
    expect(sniff(Buffer.from('POST /x HTTP/1.1\r\n'))).toBe('http');
  });

  it('speaks h2 in TLS only with a client that offers h2 alone; HTTP/1.1 whenever offered', () => {
    expect(chooseAlpn(['h2'])).toBe('h2');
    expect(chooseAlpn(['h2', 'http/1.1'])).toBe('http/1.1');
    expect(chooseAlpn(['spdy/3'])).toBeUndefined();
  });

  it('Given a recording, When a call comes in TLS offering h2 alone (the agent under --tls-secret), Then it is answered and recorded as HTTPS HTTP/2', async () => {
    // Given a local command that serves h2 in TLS, and a recording session
    const local = await localGrpc(() => '0', true);
    const { agent, har, file, dir } = await setup(local.port);
    // When a call comes on a stolen stream in TLS whose client offers h2 only
    const hello = grpcFrame('tls');
    const answer = await call(stolenH2c(agent, true), '/x.Echo/Say', hello);
    // Then the local command answered it, trailers intact, and the HAR has it as HTTP/2 over https
    expect(answer.body.equals(hello)).toBe(true);
    expect(answer.trailers).toMatchObject({ 'grpc-status': '0' });
    await har.flush();
    const [entry] = await readHar(file);
    expect(entry.request).toMatchObject({ url: 'https://orders.default.svc:50051/x.Echo/Say', httpVersion: 'HTTP/2' });
    expect(entry.response._trailers).toContainEqual({ name: 'grpc-status', value: '0' });
    // And replay sends it in TLS over HTTP/2 again
    expect((await runReplay({ file, env: { XDG_CONFIG_HOME: dir } })).summary).toMatchObject({ same: 1, failed: 0 });
  });

  it('Given a recording, When unary gRPC calls come over h2c, Then they are answered with their trailers and recorded as HTTP/2', async () => {
    // Given a gRPC-like local command and a recording session
    let status = '0';
    const local = await localGrpc(() => status);
    const { agent, har, file, dir } = await setup(local.port);
    // When two calls come on one stolen h2c connection: one answered with trailers, one failed trailers-only
    const session = stolenH2c(agent);
    const hello = grpcFrame('hello\u00ff');
    const [ok, denied] = await Promise.all([
      call(session, '/x.Echo/Say', hello),
      call(session, '/x.Echo/Deny', grpcFrame('no')),
    ]);
    // Then the client got the local command's answers, trailers intact
    expect(ok.body.equals(hello)).toBe(true);
    expect(ok.trailers).toMatchObject({ 'grpc-status': '0', 'x-served-by': 'local' });
    expect(denied.headers).toMatchObject({ 'grpc-status': '7', 'grpc-message': 'denied' });
    // And the HAR holds both as HTTP/2, the body as base64, the trailers in _trailers
    await har.flush();
    const entries = await readHar(file);
    const say = entries.find((e) => e.request.url.endsWith('/x.Echo/Say'));
    expect(say?.request).toMatchObject({
      method: 'POST',
      url: 'http://orders.default.svc:50051/x.Echo/Say',
      httpVersion: 'HTTP/2',
      postData: { mimeType: 'application/grpc', text: hello.toString('base64'), _encoding: 'base64' },
    });
    expect(say?.request.headers).toContainEqual({ name: 'te', value: 'trailers' });
    expect(say?.request.headers.some((h) => h.name.startsWith(':'))).toBe(false);
    expect(say?.response).toMatchObject({
      status: 200,
      httpVersion: 'HTTP/2',
      content: { mimeType: 'application/grpc', size: hello.length },
      _trailers: [
        { name: 'grpc-status', value: '0' },
        { name: 'x-served-by', value: 'local' },
      ],
    });
    expect(say).toMatchObject({ _pod: 'orders-abc', _port: 50051, _localPort: local.port });
    const deny = entries.find((e) => e.request.url.endsWith('/x.Echo/Deny'));
    expect(deny?.response.headers).toContainEqual({ name: 'grpc-status', value: '7' });

    // When the recording is replayed to the local command
    const same = await runReplay({ file, env: { XDG_CONFIG_HOME: dir } });
    // Then both calls go over HTTP/2 again and answer the same
    expect(same.summary).toEqual({ same: 2, different: 0, failed: 0, skipped: 0 });
    // When the local command now fails the echo call with another grpc-status
    status = '13';
    const changed = await runReplay({ file, env: { XDG_CONFIG_HOME: dir } });
    // Then replay names the changed status
    const line = changed.results.find((r) => r.request.includes('/x.Echo/Say'));
    expect(line).toMatchObject({ outcome: 'different', differences: ['grpc-status 0 → 13'] });
  });
});
