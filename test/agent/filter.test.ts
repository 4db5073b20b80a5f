// Filtered steal: two sessions with different header filters share one port, unmatched requests go to the pod,
// keep-alive connections interleave destinations, upgrades pass through, and port locks name the holder.
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { PodNet, type AgentProc, type Proc } from '../../testkit/netns.js';
import {
  connectSession,
  startLocalCommand,
  type LocalCommand,
  type TestSession,
} from '../../testkit/session-client.js';
import { httpGet, keepAliveAgent } from '../../testkit/http.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent filter');

describe.runIf(run)('agent: HTTP-filtered steal', () => {
  const net = new PodNet();
  let pod: Proc;
  let agent: AgentProc;
  let control: string;
  let client: string;
  const locals: LocalCommand[] = [];
  const sessions: TestSession[] = [];
  let alice: TestSession;
  let bob: TestSession;

  beforeAll(async () => {
    await net.setup();
    pod = await net.startPod({ port: 3000 });
    agent = await net.startAgent();
    control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    client = await net.relay(net.clientNs, net.podIP, 3000);
    const [la, lb] = await Promise.all([startLocalCommand('local-alice'), startLocalCommand('local-bob')]);
    locals.push(la, lb);
    alice = await connectSession(control, { local: la, user: 'alice' });
    bob = await connectSession(control, { local: lb, user: 'bob' });
    sessions.push(alice, bob);
  });
  afterAll(async () => {
    for (const s of sessions) s.mux.close('test over');
    await Promise.all(locals.map((l) => l.close()));
    await net.teardown();
  });

  test(
    'each request lands where its header says, unmatched ones at the pod, interleaved on one keep-alive ' +
      'connection',
    async () => {
      // Given two sessions filtering on different values of one header
      expect((await alice.subscribe(3000, 'steal', { filter: { header: 'x-user: ^alice$', match: 'all' } })).type).toBe(
        'subscribed',
      );
      expect((await bob.subscribe(3000, 'steal', { filter: { header: 'x-user: ^bob$', match: 'all' } })).type).toBe(
        'subscribed',
      );
      // When one keep-alive client sends requests for alice, nobody, bob, alice in turn
      const keep = keepAliveAgent();
      const answers = [];
      for (const [path, user] of [
        ['/1', 'alice'],
        ['/2', undefined],
        ['/3', 'bob'],
        ['/4', 'alice'],
        ['/5', 'carol'],
      ] as const) {
        answers.push(await httpGet(client, path, { agent: keep, headers: user ? { 'x-user': user } : {} }));
      }
      // Then each answer came from the right place, all on the same connection
      expect(answers.map((a) => a.body)).toEqual([
        'local-alice: GET /1',
        'pod: GET /2',
        'local-bob: GET /3',
        'local-alice: GET /4',
        'pod: GET /5',
      ]);
      expect(answers.slice(1).every((a) => a.reused)).toBe(true);
      // The pod's log line may trail its answer
      await waitFor("the pod's request log", () => net.podRequests(pod).length >= 2);
      expect(net.podRequests(pod).map((l) => l.split(' ')[2])).toEqual(['/2', '/5']);
      // And alice's session saw her requests as traffic events (method, path, status, to)
      await waitFor(
        'response events',
        () => alice.traffic.filter((t) => t.kind === 'response' && t.to === 'local').length >= 2,
      );
      const req = alice.traffic.find((t) => t.kind === 'request' && t.path === '/4');
      expect(req).toMatchObject({ method: 'GET', to: 'local', port: 3000 });
      keep.destroy();
    },
  );

  test('while paused, requests that match go to the pod and the session still gets their events (→ pod)', async () => {
    // Given alice's and bob's filters on the port (from the test above), both paused: no filter on the port is active
    alice.send({ type: 'pause', port: 3000 });
    bob.send({ type: 'pause', port: 3000 });
    // When a request for alice comes during the pause
    await waitFor('the pod to answer alice while paused', async () =>
      (await httpGet(client, '/paused-alice', { headers: { 'x-user': 'alice' } })).body.startsWith('pod:'),
    );
    // Then alice's session was told of it, as going to the pod, with its answer
    const paused = await waitFor('the paused request event', () =>
      alice.traffic.find((t) => t.kind === 'request' && t.path === '/paused-alice' && t.to === 'pod'),
    );
    expect(paused).toMatchObject({ method: 'GET', port: 3000 });
    const id = (paused as { requestId: string }).requestId;
    await waitFor('its response event', () =>
      alice.traffic.some((t) => t.kind === 'response' && t.requestId === id && t.status === 200),
    );
    // And after resume her requests reach her local command again
    alice.send({ type: 'resume', port: 3000 });
    bob.send({ type: 'resume', port: 3000 });
    await waitFor(
      'alice to get her requests again',
      async () =>
        (await httpGet(client, '/resumed-alice', { headers: { 'x-user': 'alice' } })).body ===
        'local-alice: GET /resumed-alice',
    );
  });

  test('a client that shuts down its sending side after the request still gets the whole answer, matched or not', async () => {
    // Given alice's and bob's filters on the port (from the test above)
    // When clients send one request each and half-close at once, one for alice and one for nobody
    const [forAlice, forNobody] = await Promise.all([
      net.halfClosedGet(3000, '/half-alice', 'x-user: alice'),
      net.halfClosedGet(3000, '/half-nobody'),
    ]);
    // Then alice's local command answered hers and the pod the other (the agent's HTTP side kept the connection open)
    expect(forAlice).toEqual({ body: 'local-alice: GET /half-alice' });
    expect(forNobody).toEqual({ body: 'pod: GET /half-nobody' });
  });

  test('an unmatched request reaches the pod with its chunked body; a head over 16 KiB is answered 431', async () => {
    // Given alice's and bob's filters on the port (from the tests above)
    // When a client sends a chunked POST that no filter matches
    const posted = await httpGet(client, '/chunked', {
      method: 'POST',
      headers: { 'transfer-encoding': 'chunked', 'x-user': 'carol' },
      body: 'hello-world',
    });
    // Then the pod's app got the request and its body, and its answer came back with its headers
    expect(posted).toMatchObject({ status: 200, body: 'pod: POST /chunked body=hello-world', servedBy: 'pod' });
    // When a request's head is over the agent's limit (the most text a filter is matched against)
    const tooBig = await httpGet(client, '/big', { headers: { 'x-big': 'a'.repeat(17 * 1024) } });
    // Then the agent answers 431 itself, and the next request is routed as usual
    expect(tooBig.status).toBe(431);
    expect((await httpGet(client, '/after-big', { headers: { 'x-user': 'alice' } })).body).toBe(
      'local-alice: GET /after-big',
    );
  });

  test('a POST body reaches the session intact; path and method filters work with any-of', async () => {
    const carolLocal = await startLocalCommand('local-carol');
    locals.push(carolLocal);
    const carol = await connectSession(control, { local: carolLocal, user: 'carol' });
    sessions.push(carol);
    expect(
      (await carol.subscribe(3000, 'steal', { filter: { path: '^/carol/', method: 'DELETE', match: 'any' } })).type,
    ).toBe('subscribed');
    expect((await httpGet(client, '/carol/x', { method: 'POST', body: 'payload-123' })).body).toBe(
      'local-carol: POST /carol/x body=payload-123',
    );
    expect((await httpGet(client, '/other', { method: 'DELETE' })).body).toBe('local-carol: DELETE /other');
    expect((await httpGet(client, '/other', { method: 'GET' })).body).toBe('pod: GET /other');
    // When carol ends her session (bye), her filter goes with it
    carol.send({ type: 'bye', reason: 'done' });
    await carol.closed;
    expect((await httpGet(client, '/carol/y')).body).toBe('pod: GET /carol/y');
  });

  test('an unmatched WebSocket upgrade passes through to the pod', async () => {
    const socket = connect(client);
    const received: Buffer[] = [];
    socket.on('data', (c: Buffer) => received.push(c));
    socket.write('GET /ws HTTP/1.1\r\nHost: pod\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n');
    await waitFor('the 101 answer', () => Buffer.concat(received).toString().includes('\r\n\r\n'));
    expect(Buffer.concat(received).toString()).toMatch(/^HTTP\/1.1 101 .*x-served-by: pod/s);
    received.length = 0;
    socket.write('ping-over-upgrade');
    await waitFor(
      'the echo over the upgraded connection',
      () => Buffer.concat(received).toString() === 'ping-over-upgrade',
    );
    socket.destroy();
  });

  test('a matching WebSocket upgrade goes to its session as a raw two-way stream', async () => {
    // Given alice's local command answers upgrades by echoing
    locals[0].server.once('upgrade', (_req, socket) => {
      socket.write(
        'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nx-served-by: ' +
          'local-alice\r\n\r\n',
      );
      socket.pipe(socket);
    });
    const socket = connect(client);
    const received: Buffer[] = [];
    socket.on('data', (c: Buffer) => received.push(c));
    socket.write(
      'GET /ws-alice HTTP/1.1\r\nHost: pod\r\nx-user: alice\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n',
    );
    await waitFor('the 101 answer', () => Buffer.concat(received).toString().includes('\r\n\r\n'));
    expect(Buffer.concat(received).toString()).toMatch(/^HTTP\/1.1 101 .*x-served-by: local-alice/s);
    received.length = 0;
    socket.write('hello-alice');
    await waitFor('the echo from the local command', () => Buffer.concat(received).toString() === 'hello-alice');
    socket.destroy();
  });

  test('an h2c upgrade offer is declined: the connection stays HTTP/1.1 and its requests are still routed one by one', async () => {
    // Given alice's filter on the port, and a client that offers h2c on its first request (as curl --http2 does)
    const socket = connect(client);
    let received = '';
    socket.setEncoding('utf8').on('data', (c: string) => {
      received += c;
    });
    socket.write(
      'GET /h2c-1 HTTP/1.1\r\nHost: pod\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n' +
        'HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n',
    );
    // Then the pod answers it in HTTP/1.1, not with 101
    await waitFor('the answer to the offer', () => received.includes('pod: GET /h2c-1'));
    expect(received).toMatch(/^HTTP\/1.1 200 /);
    // When alice's request follows on the same connection
    socket.write('GET /h2c-2 HTTP/1.1\r\nHost: pod\r\nx-user: alice\r\n\r\n');
    // Then her local command answers it
    await waitFor('the next request routed by the filter', () => received.includes('local-alice: GET /h2c-2'));
    socket.destroy();
  });

  test('an h2c offer on a later request is declined too: the pod answers it in HTTP/1.1, and routing goes on', async () => {
    // Given alice's filter on the port (the pod's app accepts any upgrade), and a keep-alive connection
    const socket = connect(client);
    let received = '';
    socket.setEncoding('utf8').on('data', (c: string) => {
      received += c;
    });
    socket.write('GET /later-1 HTTP/1.1\r\nHost: pod\r\n\r\n');
    await waitFor('the first answer', () => received.includes('pod: GET /later-1'));
    // When its second request offers h2c, and after the answer alice's request follows
    socket.write(
      'GET /later-2 HTTP/1.1\r\nHost: pod\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n' +
        'HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n',
    );
    await waitFor('the answer to the offer', () => received.includes('pod: GET /later-2'));
    socket.write('GET /later-3 HTTP/1.1\r\nHost: pod\r\nx-user: alice\r\n\r\n');
    // Then the offer was answered in HTTP/1.1, not with 101, and alice's request reached her local command
    await waitFor('the next request routed by the filter', () => received.includes('local-alice: GET /later-3'));
    expect(received).not.toContain('101 Switching Protocols');
    expect(received.match(/HTTP\/1.1 200 /g)).toHaveLength(3);
    socket.destroy();
  });

  test('an h2c offer pipelined behind a request still being answered waits for that answer', async () => {
    // Given alice's filter on the port, and a client that pipelines alice's request with a POST offering h2c
    const socket = connect(client);
    let received = '';
    socket.setEncoding('utf8').on('data', (c: string) => {
      received += c;
    });
    // When both go in one write, and a request for the pod follows
    socket.write(
      'GET /pipe-1 HTTP/1.1\r\nHost: pod\r\nx-user: alice\r\n\r\n' +
        'POST /pipe-2 HTTP/1.1\r\nHost: pod\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n' +
        'HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\nContent-Length: 5\r\n\r\nhello' +
        'GET /pipe-3 HTTP/1.1\r\nHost: pod\r\n\r\n',
    );
    // Then each is answered in order, in HTTP/1.1, the body of the offer included
    await waitFor('three answers', () => received.includes('pod: GET /pipe-3'));
    const order = ['local-alice: GET /pipe-1', 'pod: POST /pipe-2 body=hello', 'pod: GET /pipe-3'];
    const at = order.map((a) => received.indexOf(a));
    expect(at.every((i) => i >= 0)).toBe(true);
    expect([...at].sort((x, y) => x - y)).toEqual(at);
    expect(received).not.toContain('101 Switching Protocols');
    socket.destroy();
  });

  test('an unfiltered steal of a port with filtered steals is refused, naming the holder and since when', async () => {
    const dave = await connectSession(control, { user: 'dave' });
    sessions.push(dave);
    const refused = await dave.subscribe(3000, 'steal');
    expect(refused.type).toBe('refused');
    expect(refused).toMatchObject({ holder: { user: 'alice', host: 'laptop' } });
    expect((refused as { reason: string }).reason).toMatch(
      /port 3000 is stolen .* by alice@laptop since \d{4}-\d\d-\d\dT/,
    );
  });

  test('a second unfiltered steal of a stolen port is refused naming the first; a filtered steal is refused too', async () => {
    for (const s of [alice, bob]) {
      const sub = s.messages.find((m) => m.type === 'subscribed') as { id: string };
      await s.request({ type: 'unsubscribe', id: sub.id, port: 3000 }, ['unsubscribed']);
    }
    expect((await alice.subscribe(3000, 'steal')).type).toBe('subscribed');
    const second = await bob.subscribe(3000, 'steal');
    expect(second).toMatchObject({ type: 'refused', holder: { user: 'alice', host: 'laptop' } });
    const filtered = await bob.subscribe(3000, 'steal', { filter: { header: 'x-user: bob', match: 'all' } });
    expect(filtered).toMatchObject({ type: 'refused', holder: { user: 'alice' } });
    // A bad regex is refused with the reason, not a crash
    const bad = await bob.subscribe(3000, 'steal', { filter: { path: '([', match: 'all' } });
    expect(bad.type).toBe('refused');
    expect((bad as { reason: string }).reason).toMatch(/not a valid regular expression/);
    expect((await httpGet(client, '/whole')).body).toBe('local-alice: GET /whole');
  });
});
