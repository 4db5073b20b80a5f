// Steal a whole port: the client's requests reach the local command, node-IP probes still reach the pod, flush moves
// keep-alive connections, and unsubscribing gives the port back.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { FEATURES } from '../../shared/protocol.js';
import { PodNet, sh, type AgentProc, type Proc } from '../../testkit/netns.js';
import {
  connectSession,
  startLocalCommand,
  type LocalCommand,
  type TestSession,
} from '../../testkit/session-client.js';
import { hostGet, httpGet, keepAliveAgent } from '../../testkit/http.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent steal');

describe.runIf(run)('agent: steal a whole port', () => {
  const net = new PodNet();
  let pod: Proc;
  let agent: AgentProc;
  let control: string;
  let client: string;
  let local: LocalCommand;
  let session: TestSession;

  beforeAll(async () => {
    await net.setup();
    pod = await net.startPod({ port: 3000 });
    agent = await net.startAgent();
    control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    client = await net.relay(net.clientNs, net.podIP, 3000);
    local = await startLocalCommand('local');
    session = await connectSession(control, { local });
  });
  afterAll(async () => {
    session?.mux.close('test over');
    await local?.close();
    await net.teardown();
  });

  test(
    'requests from the client netns reach the local command; the pod sees none; node-IP probes still reach the ' +
      'pod',
    async () => {
      // Given a session that steals port 3000 (probes not stolen)
      expect((await session.subscribe(3000, 'steal')).type).toBe('subscribed');
      // When the client sends requests to the pod IP
      const a = await httpGet(client, '/stolen-a');
      const b = await httpGet(client, '/stolen-b', { method: 'POST', body: 'hello' });
      // Then the local command answered them and the pod's app never saw them
      expect(a.body).toBe('local: GET /stolen-a');
      expect(b.body).toBe('local: POST /stolen-b body=hello');
      // And a kubelet-like request from the node's IP still reaches the pod
      const probe = await hostGet(`http://${net.podIP}:3000/healthz`);
      expect(probe).toBe('pod: GET /healthz');
      await waitFor("the probe in the pod's log", () =>
        net.podRequests(pod).includes(`REQ GET /healthz from ${net.nodeIP}`),
      );
      // (the pod logs in order: had it seen the stolen requests, their lines would be before the probe's)
      expect(net.podRequests(pod).filter((l) => l.includes('/stolen'))).toEqual([]);
      // And the rule lives in the agent's owned nft table (hooked before the pod's own nat rules), skipping the node IP
      const rules = (await net.devopRules()).join('\n');
      expect(rules).toContain(`table inet devop_${agent.agentId} {`);
      expect(rules).toMatch(/^\s*flags owner$/m);
      expect(rules).toContain('type nat hook prerouting priority dstnat - 1; policy accept;');
      expect(rules).toMatch(
        new RegExp(`ip saddr != ${net.nodeIP} tcp dport 3000 redirect to :\\d+ comment "devop 3000"`),
      );
      // And no iptables rule at all (that is the fallback's)
      expect(await net.iptablesSave()).not.toContain('DEVOP');
      // And the session was told about each connection
      await waitFor(
        'traffic events',
        () =>
          session.traffic.filter((t) => t.kind === 'connection' && t.phase === 'close' && t.to === 'local').length >= 2,
      );
    },
  );

  test("pause sends the port's traffic back to the pod, still listed to the session; resume takes it again", async () => {
    session.send({ type: 'pause', port: 3000 });
    await waitFor(
      'the pod to answer while paused',
      async () => (await httpGet(client, '/paused')).body === 'pod: GET /paused',
    );
    // The session is told of the connections the pod answers meanwhile (its list shows them, → pod)
    await waitFor('a paused connection event', () =>
      session.traffic.some((t) => t.kind === 'connection' && t.to === 'pod' && t.phase === 'close'),
    );
    session.send({ type: 'resume', port: 3000 });
    await waitFor(
      'the local command to answer again',
      async () => (await httpGet(client, '/resumed')).body === 'local: GET /resumed',
    );
  });

  test('a client that shuts down its sending side after the request still gets the whole answer', async () => {
    // Given the port stolen (from the tests above)
    // When a client sends its request and half-closes at once
    // Then the local command's answer arrives after the client's end (the agent passed the end on and kept its side
    // open)
    expect(await net.halfClosedGet(3000, '/half-closed')).toEqual({ body: 'local: GET /half-closed' });
  });

  test('unsubscribing gives the port back to the pod and removes its rule', async () => {
    const port = 3000;
    const sub = session.messages.find((m) => m.type === 'subscribed');
    expect(sub).toBeDefined();
    await session.request({ type: 'unsubscribe', id: (sub as { id: string }).id, port }, ['unsubscribed']);
    expect((await httpGet(client, '/after-unsubscribe')).body).toBe('pod: GET /after-unsubscribe');
    expect((await net.devopRules()).join('\n')).not.toMatch(/dport 3000/);
  });

  test(
    'when nothing in the pod used conntrack, an open keep-alive connection is reset on its next request even ' +
      'without flush',
    async () => {
      // Given a keep-alive connection to the pod, opened while no rule in the pod netns needed connection tracking
      const keep = keepAliveAgent();
      expect((await httpGet(client, '/ka-1', { agent: keep })).body).toBe('pod: GET /ka-1');
      // When stealing starts without flush
      const sub = await session.subscribe(3000, 'steal', { flush: false });
      expect(sub.type).toBe('subscribed');
      // Then the kernel picks the untracked connection's next packet up as new, redirects it, and the listener resets
      // it
      await expect(httpGet(client, '/ka-2', { agent: keep })).rejects.toThrow(/socket hang up|ECONNRESET/);
      // And the client's next connection is stolen
      expect((await httpGet(client, '/ka-3', { agent: keep })).body).toBe('local: GET /ka-3');
      await session.request({ type: 'unsubscribe', id: (sub as { id: string }).id, port: 3000 }, ['unsubscribed']);
      expect((await httpGet(client, '/ka-sentinel')).body).toBe('pod: GET /ka-sentinel');
      await waitFor("the sentinel in the pod's log", () =>
        net.podRequests(pod).some((l) => l.includes('/ka-sentinel')),
      );
      expect(net.podRequests(pod).some((l) => l.includes('/ka-2'))).toBe(false);
      keep.destroy();
    },
  );

  test(
    'with conntrack already in use in the pod: without flush a keep-alive connection stays with the pod; with ' +
      'flush it is reset at once',
    async () => {
      // Given a pod netns where a rule (as a service mesh would have) keeps connection tracking on
      await sh(
        `ip netns exec ${net.podNs} iptables-nft -t nat -A OUTPUT -p tcp -d 127.0.0.2 --dport 9 -j REDIRECT ` +
          `--to-ports 9`,
      );
      try {
        const keep = keepAliveAgent();
        expect((await httpGet(client, '/kb-1', { agent: keep })).body).toBe('pod: GET /kb-1');
        // When stealing starts without flush, the tracked connection keeps its original (non-)NAT decision
        const noFlush = await session.subscribe(3000, 'steal', { flush: false });
        expect(noFlush.type).toBe('subscribed');
        const second = await httpGet(client, '/kb-2', { agent: keep });
        expect(second.reused).toBe(true);
        expect(second.body).toBe('pod: GET /kb-2');
        await session.request({ type: 'unsubscribe', id: (noFlush as { id: string }).id, port: 3000 }, [
          'unsubscribed',
        ]);

        // Given a fresh keep-alive connection to the pod
        const keep2 = keepAliveAgent();
        const before = await httpGet(client, '/kb-3', { agent: keep2 });
        expect(before.body).toBe('pod: GET /kb-3');
        const closed = new Promise<void>((r) => before.socket.once('close', () => r()));
        // When stealing starts with flush
        expect((await session.subscribe(3000, 'steal', { flush: true })).type).toBe('subscribed');
        // Then the pod's side of that connection is reset at once, before the client sends anything more
        await closed;
        // And the client's next request (on a new connection) lands at the local command
        const after = await httpGet(client, '/kb-4', { agent: keep2 });
        expect(after.reused).toBe(false);
        expect(after.body).toBe('local: GET /kb-4');
        keep.destroy();
        keep2.destroy();
      } finally {
        await sh(
          `ip netns exec ${net.podNs} iptables-nft -t nat -D OUTPUT -p tcp -d 127.0.0.2 --dport 9 -j REDIRECT ` +
            `--to-ports 9`,
        );
      }
    },
  );

  test('with stealProbes, requests from the node IP are stolen too', async () => {
    for (const m of session.messages.filter((x) => x.type === 'subscribed')) {
      await session.request({ type: 'unsubscribe', id: (m as { id: string }).id, port: 3000 }, ['unsubscribed']);
    }
    expect((await session.subscribe(3000, 'steal', { stealProbes: true })).type).toBe('subscribed');
    expect(await hostGet(`http://${net.podIP}:3000/healthz-stolen`)).toBe('local: GET /healthz-stolen');
    const rules = (await net.devopRules()).join('\n');
    expect(rules).toMatch(/tcp dport 3000 redirect/);
    expect(rules).not.toMatch(/saddr != .* dport 3000/);
  });

  test(
    'a keep-alive connection opened during a pause is answered by the pod; on resume it moves to the local ' +
      'command',
    async () => {
      for (const m of session.messages.filter((x) => x.type === 'subscribed')) {
        await session.request({ type: 'unsubscribe', id: (m as { id: string }).id, port: 3000 }, ['unsubscribed']);
      }
      // Given a steal with flush, paused, and a keep-alive client (one socket) that connected during the pause
      expect((await session.subscribe(3000, 'steal', { flush: true })).type).toBe('subscribed');
      session.send({ type: 'pause', port: 3000 });
      // A fresh connection answered by the pod shows the pause is in place; only then does the kept-alive client
      // connect (one that connected before would stay stolen: a pause affects new connections).
      await waitFor(
        'the pause to take effect',
        async () => (await httpGet(client, '/paused-probe')).body === 'pod: GET /paused-probe',
      );
      const keep = keepAliveAgent();
      await waitFor('the pod to answer while paused', async () => {
        const answer = await httpGet(client, '/during-pause', { agent: keep });
        return answer.body === 'pod: GET /during-pause' ? answer : undefined;
      });
      const again = await httpGet(client, '/during-pause-2', { agent: keep });
      expect([again.body, again.reused]).toEqual(['pod: GET /during-pause-2', true]);
      const closed = new Promise<void>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error('the connection opened during the pause was not ended on resume')),
          10_000,
        );
        again.socket.once('close', () => resolve(clearTimeout(timer)));
      });
      // When the steal resumes
      session.send({ type: 'resume', port: 3000 });
      // Then the agent ends that connection, and the client's next request (same client, new socket) is stolen
      await closed;
      const after = await httpGet(client, '/after-resume', { agent: keep });
      expect([after.body, after.reused]).toEqual(['local: GET /after-resume', false]);
      keep.destroy();
    },
  );

  test('without flush, a keep-alive connection opened during a pause stays with the pod after resume', async () => {
    for (const m of session.messages.filter((x) => x.type === 'subscribed')) {
      await session.request({ type: 'unsubscribe', id: (m as { id: string }).id, port: 3000 }, ['unsubscribed']);
    }
    expect((await session.subscribe(3000, 'steal', { flush: false })).type).toBe('subscribed');
    session.send({ type: 'pause', port: 3000 });
    await waitFor(
      'the pause to take effect',
      async () => (await httpGet(client, '/nf-probe')).body === 'pod: GET /nf-probe',
    );
    const keep = keepAliveAgent();
    await waitFor(
      'the pod to answer while paused',
      async () => (await httpGet(client, '/nf-pause', { agent: keep })).body === 'pod: GET /nf-pause',
    );
    session.send({ type: 'resume', port: 3000 });
    // (a fresh connection is stolen again: the resume took effect)
    await waitFor(
      'the local command to answer again',
      async () => (await httpGet(client, '/nf-fresh')).body === 'local: GET /nf-fresh',
    );
    const same = await httpGet(client, '/nf-same', { agent: keep });
    expect([same.body, same.reused]).toEqual(['pod: GET /nf-same', true]);
    keep.destroy();
  });

  test('a session that reports connections from their streams (stream-events) gets their ids and no events', async () => {
    for (const m of session.messages.filter((x) => x.type === 'subscribed')) {
      await session.request({ type: 'unsubscribe', id: (m as { id: string }).id, port: 3000 }, ['unsubscribed']);
    }
    // Given a second session that lists stream-events, stealing the port
    const reporting = await connectSession(control, { local, features: [FEATURES.traffic, FEATURES.streamEvents] });
    try {
      expect((await reporting.subscribe(3000, 'steal')).type).toBe('subscribed');
      // When two clients connect and are answered
      expect((await httpGet(client, '/reported-a')).body).toBe('local: GET /reported-a');
      expect((await httpGet(client, '/reported-b')).body).toBe('local: GET /reported-b');
      // Then each stream's OPEN names its connection, the ids differ, and no connection event came for them, while
      // the first session (without the feature) still got its events above
      expect(reporting.incoming.map((i) => i.open.connId)).toEqual([
        expect.stringMatching(/^3000-\d+$/),
        expect.stringMatching(/^3000-\d+$/),
      ]);
      expect(new Set(reporting.incoming.map((i) => i.open.connId)).size).toBe(2);
      await reporting.request({ type: 'ping', id: 7, sentAt: Date.now() }, ['pong']);
      expect(reporting.traffic.filter((t) => t.kind === 'connection')).toEqual([]);
      expect(session.incoming.every((i) => i.open.connId === undefined)).toBe(true);
    } finally {
      reporting.mux.close('test over');
    }
  });
});
