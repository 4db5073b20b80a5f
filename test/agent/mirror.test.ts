// Mirror: the client keeps getting the pod's answers unchanged while each mirroring session receives the same bytes;
// a session that does not read never slows the pod's traffic (its copy is dropped and it is told). By default the
// copies come from a packet capture (devop-capture) and the agent is not in the pod's path: no redirect rule, the app
// sees the real client; DEVOP_AGENT_MIRROR=proxy puts the agent back in the path.
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { AGENT_BUNDLE, PodNet, sh, type AgentProc, type Proc } from '../../testkit/netns.js';
import { connectSession, startLocalCommand, type TestSession } from '../../testkit/session-client.js';
import { httpGet, keepAliveAgent } from '../../testkit/http.js';
import { MIRROR_BUFFER_LIMIT } from '../../agent/incoming/mirror.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent mirror');

/** The capture suites need the capture program next to the bundle, as the image has it: without it they fail. */
function requireCapture(): void {
  const program = join(dirname(AGENT_BUNDLE), 'devop-capture');
  if (!existsSync(program))
    throw new Error(
      `the mirror suite needs ${program} (the agent mirrors by packet capture): scripts/build.mjs builds it with cc ` +
        '(scripts/setup.sh installs gcc)',
    );
}

/** The agent's captures in the pod's netns. */
async function captures(net: PodNet): Promise<string[]> {
  const pids = (await sh(`ip netns pids ${net.podNs}`)).split('\n').filter(Boolean);
  return pids.map((pid) => net.readCmdline(Number(pid))).filter((cmd) => cmd.includes('devop-capture'));
}

/** Subscribes and returns the subscription's id (what unsubscribe names). */
async function subscribe(session: TestSession, mode: 'steal' | 'mirror'): Promise<string> {
  const reply = await session.subscribe(3000, mode);
  expect(reply).toMatchObject({ type: 'subscribed' });
  return (reply as { id: string }).id;
}

async function unsubscribe(session: TestSession, id: string): Promise<void> {
  await session.request({ type: 'unsubscribe', id, port: 3000 }, ['unsubscribed']);
}

/** The mirrored connections a session received whose bytes start with `head`. */
function copiesOf(session: TestSession, head: string): Buffer[] {
  return session.incoming.map((i) => Buffer.concat(i.data)).filter((b) => b.toString().startsWith(head));
}

interface Setup {
  net: PodNet;
  pod: Proc;
  agent: AgentProc;
  control: string;
  client: string;
  sessions: TestSession[];
}

/** A pod on :3000, an agent (with `env`), a control relay and a client relay; torn down after the suite. */
function podWithAgent(env: Record<string, string> = {}, opts: { bundle?: string } = {}): Setup {
  const s = { net: new PodNet(), sessions: [] as TestSession[] } as Setup;
  beforeAll(async () => {
    await s.net.setup();
    s.pod = await s.net.startPod({ port: 3000 });
    s.agent = await s.net.startAgent(env, opts);
    s.control = await s.net.relay(s.net.podNs, '127.0.0.1', s.agent.port);
    s.client = await s.net.relay(s.net.clientNs, s.net.podIP, 3000);
  });
  afterAll(async () => {
    for (const session of s.sessions) session.mux.close('test over');
    await s.net.teardown();
  });
  return s;
}

/**
 * Two sessions mirror :3000; a keep-alive client sends two requests; the pod answers both and each session gets the
 * bytes.
 */
async function twoSessionsGetTheBytes(s: Setup): Promise<void> {
  // Given two sessions mirroring port 3000
  const one = await connectSession(s.control, { user: 'one' });
  const two = await connectSession(s.control, { user: 'two' });
  s.sessions.push(one, two);
  const ids = [await subscribe(one, 'mirror'), await subscribe(two, 'mirror')];
  // When a keep-alive client sends two requests, one with a body
  const keep = keepAliveAgent();
  const a = await httpGet(s.client, '/m-1', { agent: keep });
  const b = await httpGet(s.client, '/m-2', { agent: keep, method: 'POST', body: 'mirror-body' });
  keep.destroy();
  // Then the pod answered both, unchanged
  expect(a.body).toBe('pod: GET /m-1');
  expect(b.body).toBe('pod: POST /m-2 body=mirror-body');
  // The pod's log line may trail its answer
  await waitFor("the pod's request log", () => s.net.podRequests(s.pod).length >= 2);
  expect(s.net.podRequests(s.pod).map((l) => l.split(' ')[2])).toEqual(['/m-1', '/m-2']);
  // And each session received the very bytes the client sent, as one mirrored connection
  for (const session of [one, two]) {
    await waitFor('the mirrored bytes', () =>
      Buffer.concat(session.incoming.flatMap((i) => i.data))
        .toString()
        .includes('mirror-body'),
    );
    expect(session.incoming).toHaveLength(1);
    expect(session.incoming[0].open).toMatchObject({
      kind: 'incoming',
      mode: 'mirror',
      port: 3000,
      remoteAddress: s.net.clientIP,
    });
    const text = Buffer.concat(session.incoming[0].data).toString();
    expect(text).toMatch(/^GET \/m-1 HTTP\/1.1\r\n.*\r\n\r\nPOST \/m-2 HTTP\/1.1\r\n.*\r\n\r\nmirror-body$/s);
  }
  await unsubscribe(one, ids[0]);
  await unsubscribe(two, ids[1]);
  await waitFor('the capture (if any) to go with the last mirror', async () => (await captures(s.net)).length === 0);
}

describe.runIf(run)('agent: mirror by packet capture (the default)', () => {
  requireCapture();
  const s = podWithAgent();

  test("the client gets the pod's answers; two mirroring sessions each receive the same request bytes", async () => {
    await twoSessionsGetTheBytes(s);
  });

  test(
    "a mirror-only port has no redirect rule: the app sees the client's own address; the capture goes with the " +
      'last mirror',
    async () => {
      // Given a session mirroring port 3000
      const session = await connectSession(s.control, { user: 'watcher' });
      s.sessions.push(session);
      const id = await subscribe(session, 'mirror');
      // Then one capture (of port 3000, with a 2 MiB buffer, not from the node) runs, and no devop rule exists in the
      // pod's netns
      expect(await captures(s.net)).toEqual([
        expect.stringMatching(new RegExp(`devop-capture 3000 2048 ${s.net.nodeIP} $`)),
      ]);
      expect(await s.net.devopRules()).toEqual([]);
      // When a client calls the pod
      const answer = await httpGet(s.client, '/who');
      expect(answer.body).toBe('pod: GET /who');
      // Then the app saw the client's own address (nothing forwarded it), and the session got the copy
      await waitFor("the pod's request log", () => s.net.podRequests(s.pod).find((l) => l.includes('/who')));
      expect(s.net.podRequests(s.pod).find((l) => l.includes('/who'))).toBe(`REQ GET /who from ${s.net.clientIP}`);
      await waitFor('the mirrored request', () => copiesOf(session, 'GET /who ').length === 1);
      await waitFor('the close event with bytes in', () =>
        session.traffic.some((t) => t.kind === 'connection' && t.phase === 'close' && (t.bytesIn ?? 0) > 0),
      );
      // When the session unsubscribes, the capture goes
      await unsubscribe(session, id);
      await waitFor('the capture to exit', async () => (await captures(s.net)).length === 0);
    },
  );

  test(
    'steal and mirror on one port by two sessions: the thief answers, the mirror gets the bytes; the rule goes ' +
      'with the steal',
    async () => {
      // Given session A stealing :3000 to its local command and session B mirroring it
      const local = await startLocalCommand('local-a');
      const thief = await connectSession(s.control, { user: 'thief', local });
      const watcher = await connectSession(s.control, { user: 'watcher' });
      s.sessions.push(thief, watcher);
      const watching = await subscribe(watcher, 'mirror');
      expect(await s.net.devopRules()).toEqual([]);
      const stealing = await subscribe(thief, 'steal');
      expect((await s.net.devopRules()).join('\n')).toMatch(/dport 3000/);
      // When a client calls
      const stolen = await httpGet(s.client, '/both', { method: 'POST', body: 'seen-by-both' });
      // Then the thief's local command answered, and the watcher got the bytes
      expect(stolen.body).toBe('local-a: POST /both body=seen-by-both');
      await waitFor('the mirrored request', () => copiesOf(watcher, 'POST /both ').length === 1);
      // When the thief pauses, the agent's listener forwards connections to the app; the capture copies them, the
      // listener must not copy them again
      thief.send({ type: 'pause', port: 3000 });
      await thief.request({ type: 'ping', id: 1, sentAt: Date.now() }, ['pong']); // the pause is in effect
      expect((await httpGet(s.client, '/paused')).body).toBe('pod: GET /paused');
      await waitFor('the mirrored request while paused', () => copiesOf(watcher, 'GET /paused ').length > 0);
      // A second copy, were one made, would have come by now (capture batches ≤ 1 s)
      await new Promise((r) => setTimeout(r, 1500));
      expect(copiesOf(watcher, 'GET /paused ')).toHaveLength(1);
      // When the thief leaves, its rule goes; the capture stays and the pod answers again, still mirrored
      await unsubscribe(thief, stealing);
      await local.close();
      // The agent keeps its (empty) table
      expect((await s.net.devopRules()).filter((l) => /dport|redirect|REDIRECT/.test(l))).toEqual([]);
      expect(await captures(s.net)).toHaveLength(1);
      expect((await httpGet(s.client, '/after')).body).toBe('pod: GET /after');
      await waitFor('the mirrored request after the steal', () => copiesOf(watcher, 'GET /after ').length === 1);
      await unsubscribe(watcher, watching);
    },
  );

  test('an upload as large as the agent buffers for a copy reaches a reading session whole, through the capture', async () => {
    // Given a session mirroring port 3000 that reads its copies
    const session = await connectSession(s.control, { user: 'burst' });
    s.sessions.push(session);
    const id = await subscribe(session, 'mirror');
    // When a client uploads as much as the agent buffers for a copy (with the request's head), in one request, as fast
    // as the veth goes: the capture hands it over in one batch
    const body = Buffer.alloc(MIRROR_BUFFER_LIMIT - 1024, 'y').toString();
    const answer = await httpGet(s.client, '/burst', { method: 'POST', body });
    expect(answer.body).toBe(`pod: POST /burst body=${body}`);
    // Then the session received every byte of it, and no copy was dropped
    const copied = (): number => copiesOf(session, 'POST /burst ').reduce((n, b) => n + b.length, 0);
    await waitFor('the whole mirrored upload', () => copied() > body.length, 10_000);
    expect(copiesOf(session, 'POST /burst ')[0].toString().endsWith(body)).toBe(true);
    expect(session.messages.filter((m) => m.type === 'log' && /dropped|missed/.test(m.message))).toEqual([]);
    await unsubscribe(session, id);
  });

  test('a mirroring session that never reads does not slow the pod; its copy is dropped and it is told', async () => {
    // Given a session whose incoming streams are never read (its credit runs out)
    const stuck = await connectSession(s.control, { user: 'stuck' });
    s.sessions.push(stuck);
    stuck.mux.removeAllListeners('stream');
    stuck.mux.on('stream', (stream) => stream.on('error', () => undefined)); // never read: no credit goes back
    await subscribe(stuck, 'mirror');
    // When a client uploads far more than the tunnel's window plus the agent's mirror buffer
    const body = 'x'.repeat(4 * 1024 * 1024);
    const answer = await httpGet(s.client, '/big', { method: 'POST', body });
    // Then the pod got all of it and answered
    expect(answer.body).toBe(`pod: POST /big body=${body}`);
    // And the stuck session was told its copy was dropped
    await waitFor('the drop notice', () =>
      stuck.messages.some(
        (m) => m.type === 'log' && m.level === 'warn' && /copy of connection .* dropped/.test(m.message),
      ),
    );
  });

  test('kill -9 of the agent takes its capture with it', async () => {
    // Given a capture running for a mirroring session
    const session = await connectSession(s.control, { user: 'last' });
    s.sessions.push(session);
    await subscribe(session, 'mirror');
    expect(await captures(s.net)).toHaveLength(1);
    // When the agent (the process in the pod's netns) is killed with SIGKILL
    process.kill(s.agent.innerPid, 'SIGKILL');
    // Then no capture is left in the pod's netns
    await waitFor('the capture to exit after the agent died', async () => (await captures(s.net)).length === 0, 5000);
  });
});

describe.runIf(run)('agent: mirror through the agent (DEVOP_AGENT_MIRROR=proxy)', () => {
  const s = podWithAgent({ DEVOP_AGENT_MIRROR: 'proxy' });

  test(
    "the client gets the pod's answers; two mirroring sessions each receive the same request bytes; a redirect, " +
      'no capture',
    async () => {
      const probe = await connectSession(s.control, { user: 'probe' });
      s.sessions.push(probe);
      const id = await subscribe(probe, 'mirror');
      expect((await s.net.devopRules()).join('\n')).toMatch(/dport 3000/);
      expect(await captures(s.net)).toEqual([]);
      await unsubscribe(probe, id);
      await twoSessionsGetTheBytes(s);
      await waitFor('the log line naming why', () =>
        s.agent.lines.some(
          (l) => l.includes('mirror copies go through the agent') && l.includes('DEVOP_AGENT_MIRROR=proxy'),
        ),
      );
    },
  );
});

describe.runIf(run)('agent: mirror where the capture program is missing', () => {
  // The agent's bundle alone in a directory: no devop-capture next to it.
  const dir = mkdtempSync(join(tmpdir(), 'devop-no-capture-'));
  const bundle = join(dir, 'agent.cjs');
  copyFileSync(AGENT_BUNDLE, bundle);
  const s = podWithAgent({}, { bundle });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('mirrors through the agent instead, and says why in one log line', async () => {
    // Given a session mirroring :3000 on an agent that finds no capture program
    const session = await connectSession(s.control, { user: 'fallback' });
    s.sessions.push(session);
    await subscribe(session, 'mirror');
    // Then the port is redirected to the agent, and the log names the reason
    expect((await s.net.devopRules()).join('\n')).toMatch(/dport 3000/);
    const why = s.agent.lines.filter((l) => l.includes('mirror copies go through the agent'));
    expect(why).toEqual([expect.stringContaining(`the capture program ${join(dir, 'devop-capture')} is missing`)]);
    // And mirroring works as before: the pod answers, the session gets the bytes
    expect((await httpGet(s.client, '/fallback')).body).toBe('pod: GET /fallback');
    await waitFor('the mirrored request', () => copiesOf(session, 'GET /fallback ').length === 1);
  });
});
