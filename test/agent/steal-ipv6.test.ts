// Steals and mirrors over IPv6 on a dual-stack pod: the agent's owned table is of family inet, so a client that
// reaches the pod's IPv6 address is stolen (whole, by the agent or devop-splice, and per request under a filter) like
// an IPv4 one, the node's IPv4 probes are still skipped, the port goes back to the pod for both families, and the
// packet capture copies IPv6 connections to mirrors.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { FEATURES } from '../../shared/protocol.js';
import { hostGet, httpGet } from '../../testkit/http.js';
import { PodNet, type AgentProc, type Proc } from '../../testkit/netns.js';
import { requireRoot } from '../../testkit/root.js';
import {
  connectSession,
  startLocalCommand,
  type LocalCommand,
  type TestSession,
} from '../../testkit/session-client.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent steal over IPv6');

describe.runIf(run)('agent: steal over IPv6', () => {
  const net = new PodNet();
  let pod: Proc;
  let agent: AgentProc;
  let control: string;
  let client4: string;
  let client6: string;
  let local: LocalCommand;
  let session: TestSession;

  beforeAll(async () => {
    await net.setup();
    // The pod's app listens on every address of both families, as a Node or Go server does by default
    pod = await net.startPod({ port: 3000, env: { LISTEN_HOST: '::' } });
    agent = await net.startAgent({ DEVOP_AGENT_NATIVE_PORT: '0' });
    control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    client4 = await net.relay(net.clientNs, net.podIP, 3000);
    client6 = await net.relay(net.clientNs, net.podIP6, 3000);
    local = await startLocalCommand('local');
    session = await connectSession(control, { local, features: [FEATURES.traffic, FEATURES.streamEvents] });
  });
  afterAll(async () => {
    session?.mux.close('test over');
    await local?.close();
    await net.teardown();
  });

  test('a whole steal takes IPv6 clients too, with their own address; the pod gets them back after', async () => {
    // Given the pod answering an IPv6 client
    expect((await httpGet(client6, '/before')).body).toBe('pod: GET /before');
    // When a session steals port 3000 whole
    const sub = await session.subscribe(3000, 'steal');
    expect(sub.type).toBe('subscribed');
    // Then IPv6 and IPv4 clients are answered by the local command, and the stream names the IPv6 client
    const before = session.incoming.length;
    expect((await httpGet(client6, '/six')).body).toBe('local: GET /six');
    expect(session.incoming[before].open).toMatchObject({ kind: 'incoming', port: 3000, remoteAddress: net.clientIP6 });
    expect((await httpGet(client4, '/four')).body).toBe('local: GET /four');
    expect(session.incoming[before + 1].open).toMatchObject({ remoteAddress: net.clientIP });
    // And the node's probes (IPv4, the node IP) still reach the pod
    expect(await hostGet(`http://${net.podIP}:3000/healthz`)).toBe('pod: GET /healthz');
    expect(net.podRequests(pod).some((l) => l.includes('/six') || l.includes('/four'))).toBe(false);
    // When the session lets the port go, IPv6 clients reach the pod again
    await session.request({ type: 'unsubscribe', id: (sub as { id: string }).id, port: 3000 }, ['unsubscribed']);
    await waitFor(
      'the pod to answer IPv6 clients',
      async () => (await httpGet(client6, '/after')).body === 'pod: GET /after',
    );
  });

  test('a filtered steal routes each IPv6 request by the filter', async () => {
    const sub = await session.subscribe(3000, 'steal', { filter: { header: 'x-dev: ^me$', match: 'all' } });
    expect(sub.type).toBe('subscribed');
    const before = session.incoming.length;
    expect((await httpGet(client6, '/mine', { headers: { 'x-dev': 'me' } })).body).toBe('local: GET /mine');
    expect(session.incoming[before].open).toMatchObject({ remoteAddress: net.clientIP6 });
    expect((await httpGet(client6, '/theirs')).body).toBe('pod: GET /theirs');
    expect(session.traffic.find((t) => t.kind === 'request' && t.path === '/theirs')).toMatchObject({ to: 'pod' });
    await session.request({ type: 'unsubscribe', id: (sub as { id: string }).id, port: 3000 }, ['unsubscribed']);
    await waitFor(
      'the pod to answer',
      async () => (await httpGet(client6, '/gone', { headers: { 'x-dev': 'me' } })).body === 'pod: GET /gone',
    );
  });

  test("a mirror (by packet capture) copies an IPv6 client's bytes while the pod answers it", async () => {
    const sub = await session.subscribe(3000, 'mirror');
    expect(sub).toMatchObject({ type: 'subscribed' });
    const before = session.incoming.length;
    expect((await httpGet(client6, '/mirrored-six')).body).toBe('pod: GET /mirrored-six');
    const copy = await waitFor('the copy of the IPv6 connection', () =>
      session.incoming
        .slice(before)
        .find((i) => Buffer.concat(i.data).toString().startsWith('GET /mirrored-six HTTP/1.1\r\n')),
    );
    expect(copy.open).toMatchObject({ mode: 'mirror', port: 3000, remoteAddress: net.clientIP6 });
    await session.request({ type: 'unsubscribe', id: (sub as { id: string }).id, port: 3000 }, ['unsubscribed']);
  });

  test('devop-splice takes IPv6 clients of a whole steal', async () => {
    const nativeRelay = await net.relay(net.podNs, '127.0.0.1', agent.nativePort ?? 0);
    const native = await connectSession(control, {
      local,
      features: [FEATURES.traffic, FEATURES.streamEvents, FEATURES.nativeSplice],
    });
    try {
      await native.joinNative(nativeRelay);
      expect(await native.subscribe(3000, 'steal')).toMatchObject({ type: 'subscribed' });
      const viaNative = async (path: string) => {
        const count = native.incoming.length;
        const { body } = await httpGet(client6, path);
        return body === `local: GET ${path}` && native.incoming[count]?.native === true
          ? native.incoming[count]
          : undefined;
      };
      const stream = await waitFor('devop-splice to take IPv6 clients', () => viaNative('/native-six'));
      expect(stream.open).toMatchObject({ port: 3000, remoteAddress: net.clientIP6 });
      // An IPv4 client's address is plain IPv4 (not ::ffff:…) though devop-splice's socket is dual-stack
      const count = native.incoming.length;
      expect((await httpGet(client4, '/native-four')).body).toBe('local: GET /native-four');
      expect(native.incoming[count].open).toMatchObject({ remoteAddress: net.clientIP });
    } finally {
      native.mux.close('test over');
    }
    await waitFor('the pod to answer', async () => (await httpGet(client6, '/end')).body === 'pod: GET /end');
  });
});
