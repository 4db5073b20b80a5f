// Filtered steal of HTTP/2 without TLS (h2c, prior knowledge): the agent routes each stream of one client connection by
// the filter, matched ones to the local command over HTTP/2, the others to the pod's own h2c app; gRPC-like trailers
// (grpc-status) and resets pass through.
import { connect as connectHttp2, constants, createServer, type ClientHttp2Session } from 'node:http2';
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { PodNet, type AgentProc, type Proc } from '../../testkit/netns.js';
import { connectSession, type TestSession } from '../../testkit/session-client.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent HTTP/2 filter');
const POD_PORT = 3100;

interface Answer {
  status: number;
  headers: Record<string, unknown>;
  body: string;
  trailers: Record<string, unknown>;
}

/** One request on an HTTP/2 connection, its whole answer (trailers included). */
function request(session: ClientHttp2Session, headers: Record<string, string>, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request(headers, { endStream: body === undefined });
    const answer: Answer = { status: 0, headers: {}, body: '', trailers: {} };
    stream.on('response', (h) => {
      answer.status = Number(h[':status']);
      answer.headers = h;
    });
    stream.on('trailers', (t) => {
      answer.trailers = t;
    });
    stream.setEncoding('utf8');
    stream.on('data', (c: string) => {
      answer.body += c;
    });
    stream.on('end', () => resolve(answer));
    stream.on('error', reject);
    if (body !== undefined) stream.end(body);
  });
}

/** The local command: an h2c server that says who it is, and answers gRPC-like calls with grpc-status trailers. */
async function startLocalH2c(
  name: string,
): Promise<{ port: number; close(): void; paths: string[]; connections(): number }> {
  const paths: string[] = [];
  let connections = 0;
  const server = createServer();
  server.on('session', () => {
    connections += 1;
  });
  server.on('stream', (stream, headers) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      paths.push(String(headers[':path']));
      if (headers['content-type'] === 'application/grpc') {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '7', 'grpc-message': `from ${name}` }));
        stream.end(Buffer.concat(chunks));
        return;
      }
      stream.on('error', () => undefined); // its own reset below
      if (headers[':path'] === '/reset') return stream.close(constants.NGHTTP2_REFUSED_STREAM);
      stream.respond({ ':status': 200, 'x-served-by': name });
      stream.end(`${name}: ${headers[':method']} ${headers[':path']}`);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as { port: number }).port,
    paths,
    close: () => server.close(),
    connections: () => connections,
  };
}

describe.runIf(run)('agent: HTTP-filtered steal of HTTP/2 (h2c)', () => {
  const net = new PodNet();
  let pod: Proc;
  let agent: AgentProc;
  let client: string;
  let local: Awaited<ReturnType<typeof startLocalH2c>>;
  let session: TestSession;

  beforeAll(async () => {
    await net.setup();
    await net.startPod({ port: 3000 });
    pod = await net.runListener(net.podNs, join(import.meta.dirname, '../../testkit/fixtures/pod-h2c-server.mjs'), [
      String(POD_PORT),
    ]);
    agent = await net.startAgent();
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    client = await net.relay(net.clientNs, net.podIP, POD_PORT);
    local = await startLocalH2c('local-h2');
    session = await connectSession(control, { local, user: 'alice' });
    const subscribed = await session.subscribe(POD_PORT, 'steal', {
      filter: { header: 'x-user: ^alice$', match: 'all' },
    });
    expect(subscribed.type).toBe('subscribed');
  });
  afterAll(async () => {
    session?.mux.close('test over');
    local?.close();
    await net.teardown();
  });

  const h2c = (): ClientHttp2Session =>
    connectHttp2(`http://${net.podIP}:${POD_PORT}`, { createConnection: () => connect(client) });

  test('two streams on one connection: the matching one reaches the local command, the other the pod', async () => {
    // Given alice's header filter on the port, and one h2c client connection (prior knowledge)
    const conn = h2c();
    // When it sends one request with alice's header and one without, at the same time
    const [mine, theirs] = await Promise.all([
      request(conn, { ':path': '/mine', 'x-user': 'alice' }),
      request(conn, { ':path': '/theirs', 'x-user': 'bob' }),
    ]);
    conn.close();
    // Then each came back from where the filter sends it, over HTTP/2 on both sides
    expect(mine).toMatchObject({ status: 200, body: 'local-h2: GET /mine' });
    expect(mine.headers['x-served-by']).toBe('local-h2');
    expect(theirs).toMatchObject({ status: 200, body: 'pod-h2: GET /theirs' });
    await waitFor("the pod's request log", () => pod.lines.some((l) => l.startsWith('REQ')));
    expect(pod.lines.filter((l) => l.startsWith('REQ'))).toEqual(['REQ GET /theirs']);
    expect(local.paths).toEqual(['/mine']);
    // And the agent said the connection was HTTP/2, and the session saw its request as traffic
    await waitFor('the agent log line', () => agent.lines.some((l) => l.includes('HTTP/2 connection')));
    expect(session.traffic.find((t) => t.kind === 'request' && t.path === '/mine')).toMatchObject({
      method: 'GET',
      to: 'local',
      port: POD_PORT,
    });
  });

  test('a gRPC-like unary call reaches the local command and its trailers (grpc-status) come back intact', async () => {
    // Given alice's header filter on the port
    const conn = h2c();
    const call = { ':method': 'POST', 'content-type': 'application/grpc', te: 'trailers' };
    // When a unary call with her header and one without go over one connection
    const [mine, theirs] = await Promise.all([
      request(conn, { ...call, ':path': '/echo.Echo/Say', 'x-user': 'alice' }, 'hello-local'),
      request(conn, { ...call, ':path': '/echo.Echo/Say' }, 'hello-pod'),
    ]);
    conn.close();
    // Then the local command answered hers with its body and trailers, the pod the other with its own
    expect(mine).toMatchObject({ status: 200, body: 'hello-local' });
    expect(mine.headers['content-type']).toBe('application/grpc');
    expect(mine.trailers).toMatchObject({ 'grpc-status': '7', 'grpc-message': 'from local-h2' });
    expect(theirs).toMatchObject({ status: 200, body: 'hello-pod' });
    expect(theirs.trailers).toMatchObject({ 'grpc-status': '0', 'grpc-message': 'from pod-h2' });
  });

  test("a stream the local command resets is reset for the client, and the connection's other streams go on", async () => {
    // Given alice's header filter on the port, and one h2c connection
    const conn = h2c();
    // When the local command resets her stream
    const reset = await request(conn, { ':path': '/reset', 'x-user': 'alice' }).then(
      () => 'answered',
      (err: NodeJS.ErrnoException) => err.code,
    );
    // Then the client sees the stream reset, and an unmatched stream on the same connection still reaches the pod
    expect(reset).toBe('ERR_HTTP2_STREAM_ERROR');
    expect((await request(conn, { ':path': '/after-reset' })).body).toBe('pod-h2: GET /after-reset');
    conn.close();
  });

  test('matched streams share one connection to the local command, whichever client connection they come on', async () => {
    // Given alice's header filter on the port, and the local command's connections counted so far
    const before = local.connections();
    // When three of her requests come one after another, on two client connections
    const [first, second] = [h2c(), h2c()];
    for (const conn of [first, second, first])
      expect((await request(conn, { ':path': '/again', 'x-user': 'alice' })).body).toBe('local-h2: GET /again');
    first.close();
    second.close();
    // Then the local command got at most one new connection for all three (the session's, kept while it subscribes)
    expect(local.connections() - before).toBeLessThanOrEqual(1);
  });
});
