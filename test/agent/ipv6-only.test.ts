// An IPv6-only pod (no IPv4 address but loopback's, its default route the node's IPv6 address, as in an IPv6-only
// cluster): the agent from its bundle starts there, takes the node's IPv6 address for kubelet's (its default gateway),
// and steals (whole, by the agent and by devop-splice, and per request under a header filter), mirrors by capture and
// flushes IPv6 clients; with the iptables fallback too, through ip6tables, skipping the node's IPv6 address.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { FEATURES } from '../../shared/protocol.js';
import { hostGet, httpGet, keepAliveAgent } from '../../testkit/http.js';
import { PodNet, sh, type AgentProc, type Proc } from '../../testkit/netns.js';
import { requireRoot } from '../../testkit/root.js';
import {
  connectSession,
  startLocalCommand,
  type LocalCommand,
  type TestSession,
} from '../../testkit/session-client.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent in an IPv6-only pod');

describe.runIf(run)('agent: an IPv6-only pod', () => {
  const net = new PodNet({ ipv4: false });
  let pod: Proc;
  let agent: AgentProc;
  let control: string;
  let client: string;
  let local: LocalCommand;
  let session: TestSession;
  /** A kubelet-like request from the node (the host: its bridge holds the node's IPv6 address). */
  const probe = (path: string) => hostGet(`http://[${net.podIP6}]:3000${path}`);
  const unsubscribe = async (s: TestSession, sub: unknown) =>
    s.request({ type: 'unsubscribe', id: (sub as { id: string }).id, port: 3000 }, ['unsubscribed']);

  beforeAll(async () => {
    await net.setup();
    pod = await net.startPod({ port: 3000, env: { LISTEN_HOST: '::' } });
    agent = await net.startAgent({ DEVOP_AGENT_NATIVE_PORT: '0' });
    control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    client = await net.relay(net.clientNs, net.podIP6, 3000);
    local = await startLocalCommand('local');
    session = await connectSession(control, { local, features: [FEATURES.traffic, FEATURES.streamEvents] });
  });
  afterAll(async () => {
    session?.mux.close('test over');
    await local?.close();
    await net.teardown();
  });

  test('the pod netns has no IPv4 address but loopback; the agent starts there with its owned table', async () => {
    const v4 = await sh(`ip netns exec ${net.podNs} ip -4 -o addr`);
    expect(v4.trim().split('\n')).toEqual([expect.stringMatching(/^\d+: lo +inet 127\.0\.0\.1\/8 /)]);
    expect(await sh(`ip netns exec ${net.podNs} ip -o addr show dev eth0`)).toContain(`inet6 ${net.podIP6}/64`);
    expect(agent.lines.some((l) => l.includes('redirect rules: owned nft table'))).toBe(true);
  });

  test("a whole steal takes IPv6 clients; the node's IPv6 probes stay with the pod; the pod gets the port back", async () => {
    // Given the pod answering its client
    expect((await httpGet(client, '/before')).body).toBe('pod: GET /before');
    // When a session steals port 3000 whole (probes not stolen)
    const sub = await session.subscribe(3000, 'steal');
    expect(sub.type).toBe('subscribed');
    // Then the client is answered by the local command, and the stream names it by its IPv6 address
    const before = session.incoming.length;
    expect((await httpGet(client, '/stolen')).body).toBe('local: GET /stolen');
    expect(session.incoming[before].open).toMatchObject({ kind: 'incoming', port: 3000, remoteAddress: net.clientIP6 });
    // And the node's requests reach the pod: its IPv6 address (the pod's default gateway) is the one skipped
    expect(await probe('/healthz')).toBe('pod: GET /healthz');
    await waitFor("the probe in the pod's log", () =>
      net.podRequests(pod).includes(`REQ GET /healthz from ${net.nodeIP6}`),
    );
    expect((await net.devopRules()).join('\n')).toContain(`ip6 saddr != ${net.nodeIP6} tcp dport 3000 redirect`);
    expect(net.podRequests(pod).some((l) => l.includes('/stolen'))).toBe(false);
    // When the session lets the port go, the pod answers again and no rule of the port is left
    await unsubscribe(session, sub);
    await waitFor('the pod to answer', async () => (await httpGet(client, '/after')).body === 'pod: GET /after');
    expect((await net.devopRules()).join('\n')).not.toMatch(/dport 3000/);
  });

  test("with stealProbes the node's IPv6 requests are stolen too", async () => {
    const sub = await session.subscribe(3000, 'steal', { stealProbes: true });
    expect(sub.type).toBe('subscribed');
    expect(await probe('/healthz-stolen')).toBe('local: GET /healthz-stolen');
    expect((await net.devopRules()).join('\n')).not.toMatch(/saddr != .* dport 3000/);
    await unsubscribe(session, sub);
  });

  test('a steal with a header filter takes the matching requests; the others reach the pod over IPv6', async () => {
    const sub = await session.subscribe(3000, 'steal', { filter: { header: 'x-dev: ^me$', match: 'all' } });
    expect(sub.type).toBe('subscribed');
    const before = session.incoming.length;
    expect((await httpGet(client, '/mine', { headers: { 'x-dev': 'me' } })).body).toBe('local: GET /mine');
    expect(session.incoming[before].open).toMatchObject({ remoteAddress: net.clientIP6 });
    // The agent passes the unmatched request on to the app at the pod's IPv6 address (the only one it has)
    expect((await httpGet(client, '/theirs')).body).toBe('pod: GET /theirs');
    expect(net.podRequests(pod)).toContain(`REQ GET /theirs from ${net.podIP6}`);
    expect(session.traffic.find((t) => t.kind === 'request' && t.path === '/theirs')).toMatchObject({ to: 'pod' });
    await unsubscribe(session, sub);
    await waitFor(
      'the pod to answer',
      async () => (await httpGet(client, '/gone', { headers: { 'x-dev': 'me' } })).body === 'pod: GET /gone',
    );
  });

  test("a mirror (packet capture) copies the client's bytes while the pod answers; the node's probes are not copied", async () => {
    const sub = await session.subscribe(3000, 'mirror');
    expect(sub).toMatchObject({ type: 'subscribed' });
    const before = session.incoming.length;
    expect(await probe('/probe-not-copied')).toBe('pod: GET /probe-not-copied');
    expect((await httpGet(client, '/mirrored')).body).toBe('pod: GET /mirrored');
    const copy = await waitFor('the copy of the connection', () =>
      session.incoming
        .slice(before)
        .find((i) => Buffer.concat(i.data).toString().startsWith('GET /mirrored HTTP/1.1\r\n')),
    );
    expect(copy.open).toMatchObject({ mode: 'mirror', port: 3000, remoteAddress: net.clientIP6 });
    // The capture skips the node's IPv6 address: the probe, sent first, has no copy
    const copied = session.incoming.slice(before).map((i) => Buffer.concat(i.data).toString());
    expect(copied.some((bytes) => bytes.includes('/probe-not-copied'))).toBe(false);
    await unsubscribe(session, sub);
  });

  test('a steal with flush resets the keep-alive connection the pod had; its next connection is stolen', async () => {
    // Given a pod netns where a rule keeps connection tracking on (as a mesh's would), and a kept-alive client
    const rule = '-t nat -A OUTPUT -p tcp -d ::2 --dport 9 -j REDIRECT --to-ports 9';
    await sh(`ip netns exec ${net.podNs} ip6tables-nft ${rule}`);
    try {
      const keep = keepAliveAgent();
      const first = await httpGet(client, '/ka-1', { agent: keep });
      expect(first.body).toBe('pod: GET /ka-1');
      const closed = new Promise<void>((r) => first.socket.once('close', () => r()));
      // When stealing starts with flush
      const logFrom = agent.lines.length;
      const sub = await session.subscribe(3000, 'steal', { flush: true });
      expect(sub.type).toBe('subscribed');
      // Then the pod's side of that connection is reset at once, and the client's next request lands locally
      await closed;
      const after = await httpGet(client, '/ka-2', { agent: keep });
      expect([after.body, after.reused]).toEqual(['local: GET /ka-2', false]);
      const flushed = agent.lines.slice(logFrom).find((l) => l.includes('flushed existing connections'));
      expect(flushed).toMatch(/"sockets":1\b/);
      keep.destroy();
      await unsubscribe(session, sub);
    } finally {
      await sh(`ip netns exec ${net.podNs} ip6tables-nft ${rule.replace('-A', '-D')}`);
    }
  });

  test('devop-splice takes the clients of a whole steal', async () => {
    const nativeRelay = await net.relay(net.podNs, '127.0.0.1', agent.nativePort ?? 0);
    const native = await connectSession(control, {
      local,
      features: [FEATURES.traffic, FEATURES.streamEvents, FEATURES.nativeSplice],
    });
    try {
      await native.joinNative(nativeRelay);
      const sub = await native.subscribe(3000, 'steal');
      expect(sub).toMatchObject({ type: 'subscribed' });
      const viaNative = async (path: string) => {
        const count = native.incoming.length;
        const { body } = await httpGet(client, path);
        return body === `local: GET ${path}` && native.incoming[count]?.native === true
          ? native.incoming[count]
          : undefined;
      };
      const stream = await waitFor('devop-splice to take the client', () => viaNative('/native'));
      expect(stream.open).toMatchObject({ port: 3000, remoteAddress: net.clientIP6 });
      // (A session that only closed would keep its steal for its resume: the port is given back first.)
      await unsubscribe(native, sub);
    } finally {
      native.mux.close('test over');
    }
    await waitFor('the pod to answer', async () => (await httpGet(client, '/end')).body === 'pod: GET /end');
  });

  test(
    "the iptables fallback steals through ip6tables, skipping the node's IPv6 address; kill -9: its guard " +
      'removes the rules',
    async () => {
      // Given an agent on the iptables fallback (as on a kernel before 5.12)
      const fallback = await net.startAgent({ DEVOP_AGENT_IPTABLES: 'nft' });
      const fallbackControl = await net.relay(net.podNs, '127.0.0.1', fallback.port);
      const other = await connectSession(fallbackControl, { local });
      // When it steals port 3000
      expect((await other.subscribe(3000, 'steal')).type).toBe('subscribed');
      // Then the client is stolen, the node's probes are not, by an ip6tables rule that skips the node
      expect((await httpGet(client, '/fallback')).body).toBe('local: GET /fallback');
      expect(await probe('/fallback-probe')).toBe('pod: GET /fallback-probe');
      const ip6 = await sh(`ip netns exec ${net.podNs} ip6tables-nft-save -t nat`);
      expect(ip6).toContain(`-A PREROUTING -p tcp -m comment --comment devop -j DEVOP-${fallback.agentId}`);
      expect(ip6).toContain(
        `-A DEVOP-${fallback.agentId} ! -s ${net.nodeIP6}/128 -p tcp -m tcp --dport 3000 -j REDIRECT`,
      );
      // When the agent is killed
      process.kill(fallback.innerPid, 'SIGKILL');
      // Then the pod answers again and its guard leaves no rule of either family (iptables-save, ip6tables-save)
      await waitFor(
        'the pod to answer again',
        async () => (await httpGet(client, '/back', { timeoutMs: 1000 })).body === 'pod: GET /back',
        2000,
      );
      await waitFor(
        'the guard to remove the rules',
        async () => !(await net.iptablesSave()).includes(`DEVOP-${fallback.agentId}`),
        2000,
      );
      other.mux.close('test over');
    },
  );
});
