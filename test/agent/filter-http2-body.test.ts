// The JSON body filter on HTTP/2 (h2c) streams: a stream whose JSON body matches reaches the local command with its
// body intact, any other the pod, on one client connection; a body over the bound goes to the pod, saying why; gRPC
// calls (protobuf bodies) are never the body filter's.
import { connect as connectHttp2, createServer, type ClientHttp2Session } from 'node:http2';
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { MAX_FILTERED_BODY_BYTES } from '../../shared/body-filter.js';
import { requireRoot } from '../../testkit/root.js';
import { PodNet, type Proc } from '../../testkit/netns.js';
import { connectSession, type TestSession } from '../../testkit/session-client.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent HTTP/2 body filter');
const POD_PORT = 3101;

/** One request on an HTTP/2 connection; its answer's body. */
function request(session: ClientHttp2Session, headers: Record<string, string>, body?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const stream = session.request(headers, { endStream: body === undefined });
    let answer = '';
    stream.setEncoding('utf8');
    stream.on('data', (c: string) => {
      answer += c;
    });
    stream.on('end', () => resolve(answer));
    stream.on('error', reject);
    if (body !== undefined) stream.end(body);
  });
}

/** The local command: an h2c server that answers each stream with its name, the request and its body. */
async function startLocalH2c(): Promise<{ port: number; close(): void }> {
  const server = createServer();
  server.on('stream', (stream, headers) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      const body = Buffer.concat(chunks);
      stream.respond({ ':status': 200 });
      stream.end(`local: ${headers[':method']} ${headers[':path']}${body.length ? ` body=${body}` : ''}`);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as { port: number }).port, close: () => server.close() };
}

describe.runIf(run)('agent: JSON body filter on HTTP/2 streams', () => {
  const net = new PodNet();
  let pod: Proc;
  let client: string;
  let local: Awaited<ReturnType<typeof startLocalH2c>>;
  let session: TestSession;

  beforeAll(async () => {
    await net.setup();
    await net.startPod({ port: 3000 });
    pod = await net.runListener(net.podNs, join(import.meta.dirname, '../../testkit/fixtures/pod-h2c-server.mjs'), [
      String(POD_PORT),
    ]);
    const agent = await net.startAgent();
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    client = await net.relay(net.clientNs, net.podIP, POD_PORT);
    local = await startLocalH2c();
    session = await connectSession(control, { local, user: 'alice' });
    const subscribed = await session.subscribe(POD_PORT, 'steal', {
      filter: { body: '$.user.name: ^alice$', match: 'all' },
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
  const post = (path: string, type: string) => ({ ':method': 'POST', ':path': path, 'content-type': type });

  test('Given a body filter, When streams with and without a matching body share a connection, Then each goes where its body says, intact', async () => {
    const conn = h2c();
    const alice = JSON.stringify({ user: { name: 'alice' }, n: 1 });
    const bob = JSON.stringify({ user: { name: 'bob' } });
    // When four streams go at once on one connection: alice's JSON, bob's JSON, a bodyless GET, a gRPC call
    const answers = await Promise.all([
      request(conn, post('/alice', 'application/json'), alice),
      request(conn, post('/bob', 'application/json'), bob),
      request(conn, { ':path': '/get' }),
      request(conn, { ...post('/x.Svc/Call', 'application/grpc'), te: 'trailers' }, alice),
    ]);
    conn.close();
    // Then only alice's JSON body reached the local command, and every body arrived as sent
    expect(answers).toEqual([
      `local: POST /alice body=${alice}`,
      `pod-h2: POST /bob body=${bob}`,
      'pod-h2: GET /get',
      alice, // the pod's app echoes a gRPC call's body
    ]);
    await waitFor("the pod's request log", () => pod.lines.filter((l) => l.startsWith('REQ')).length >= 3);
  });

  test('Given a body filter, When a matching JSON body is over the bound, Then the pod answers it whole and the session is told why', async () => {
    const conn = h2c();
    const big = JSON.stringify({ user: { name: 'alice' }, pad: 'x'.repeat(MAX_FILTERED_BODY_BYTES) });
    // When alice's body is longer than the agent reads to decide
    const answer = await request(conn, post('/big', 'application/json'), big);
    conn.close();
    // Then the pod got it whole, and the request's event says why it went there
    expect(answer).toBe(`pod-h2: POST /big body=${big}`);
    const event = await waitFor('the request event', () =>
      session.traffic.find((t) => t.kind === 'request' && t.path === '/big'),
    );
    expect(event).toMatchObject({
      to: 'pod',
      note: 'body over 64 KiB: the body filter cannot read it, the pod answers',
    });
  });
});
