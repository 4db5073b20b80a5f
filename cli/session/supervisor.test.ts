// Unit tests of the supervisor's parts: backoff, pod fate, and the SessionMux over real loopback sockets to fake agents
// — merged answers across tunnels, the steal-lock gate, replay of subscriptions on a (re)attached tunnel, pod-named
// events.
import { createServer, connect, type Server } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createAgentMux, createClientMux, type AgentMux } from '../../shared/mux.js';
import type { AgentMessage, ClientMessage } from '../../shared/protocol.js';
import type { ReportEvent, Reporter } from '../reporter.js';
import type { Member } from './member.js';
import { podChanges } from './pod-watch.js';
import { backoffDelay, podFate } from './supervisor.js';
import { SessionMux, type MemberLink } from './supervised-mux.js';
import { watchLiveness } from './tunnel-health.js';

describe('backoffDelay', () => {
  it('doubles from 100 ms and stays at 2 s', () => {
    expect([0, 1, 2, 3, 4, 5, 6, 50].map(backoffDelay)).toEqual([100, 200, 400, 800, 1600, 2000, 2000, 2000]);
  });
});

describe('podFate', () => {
  it('is gone when deleted, terminating, replaced (other uid) or finished', () => {
    const pod = (uid: string, extra: object = {}) => ({ metadata: { uid, ...extra }, status: { phase: 'Running' } });
    expect(podFate(pod('a'), 'a')).toBe('alive');
    expect(podFate(undefined, 'a')).toBe('gone');
    expect(podFate(pod('b'), 'a')).toBe('gone');
    expect(podFate(pod('a', { deletionTimestamp: new Date() }), 'a')).toBe('gone');
    expect(podFate({ metadata: { uid: 'a' }, status: { phase: 'Failed' } }, 'a')).toBe('gone');
  });
});

describe('podChanges', () => {
  const pod = (name: string, uid: string, ready = true, extra: object = {}) => ({
    metadata: { name, uid, ...extra },
    status: { phase: 'Running', conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }] },
  });
  const member = (podName: string, podUid: string, state: Member['state'] = 'up') =>
    ({ target: { podName, podUid }, state }) as unknown as Member;

  it('Given a member whose pod is deleted or replaced, Then it is cut, saying which', () => {
    const kept = member('a', 'ua');
    const deleted = member('b', 'ub');
    const replaced = member('c', 'uc');
    const { cut } = podChanges([pod('a', 'ua'), pod('c', 'other')], [kept, deleted, replaced], new Set(), false);
    expect(cut).toEqual([
      { member: deleted, deleted: true },
      { member: replaced, deleted: false },
    ]);
  });

  it('Given all pods, Then every Ready pod not yet a member nor joining is joined; one pod only: none', () => {
    const pods = [pod('a', 'ua'), pod('b', 'ub'), pod('c', 'uc', false), pod('d', 'ud')];
    const members = [member('a', 'ua'), member('gone', 'ug', 'gone')];
    expect(podChanges(pods, members, new Set(['d']), true).join).toEqual(['b']);
    expect(podChanges(pods, members, new Set(), false).join).toEqual([]);
  });
});

/** A fake agent on a real socket: records what the CLI sends and answers subscribes with `answer(msg)`. */
interface FakeAgent {
  link: MemberLink;
  seen: ClientMessage[];
  agentMux: AgentMux;
}

const servers: Server[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

async function fakeAgent(
  pod: string,
  answer: (msg: Extract<ClientMessage, { type: 'subscribe' }>) => AgentMessage = (m) => ({
    type: 'subscribed',
    id: m.id,
    port: m.port,
    mode: m.mode,
  }),
  pong = true,
): Promise<FakeAgent> {
  const seen: ClientMessage[] = [];
  let agentMux: AgentMux | undefined;
  const server = createServer((socket) => {
    agentMux = createAgentMux(socket);
    agentMux.on('message', (msg) => {
      seen.push(msg);
      if (msg.type === 'subscribe') agentMux!.send(answer(msg));
      if (msg.type === 'unsubscribe') agentMux!.send({ type: 'unsubscribed', id: msg.id, port: msg.port });
      if (msg.type === 'ping' && pong) agentMux!.send({ type: 'pong', id: msg.id, sentAt: msg.sentAt });
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const socket = connect((server.address() as { port: number }).port, '127.0.0.1');
  await new Promise((r) => socket.once('connect', r));
  const mux = createClientMux(socket);
  await until(() => agentMux !== undefined);
  return { link: { pod, mux }, seen, agentMux: agentMux! };
}

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

function recorder(): Reporter & { events: ReportEvent[] } {
  const events: ReportEvent[] = [];
  return { events, emit: (e) => events.push(e), capturesChildOutput: false, close: async () => undefined };
}

/**
 * Sends a request through the SessionMux and waits for the one answer with its id (as agentRequest in tunnel.ts does).
 */
function request(
  mux: SessionMux,
  msg: Extract<ClientMessage, { type: 'subscribe' | 'unsubscribe' }>,
): Promise<AgentMessage> {
  return new Promise((resolve) => {
    const onMessage = (m: AgentMessage): void => {
      if ('id' in m && m.id === msg.id) {
        mux.off('message', onMessage);
        resolve(m);
      }
    };
    mux.on('message', onMessage);
    mux.send(msg);
  });
}

const steal = (id: string, port = 8080): Extract<ClientMessage, { type: 'subscribe' }> => ({
  type: 'subscribe',
  id,
  port,
  mode: 'steal',
  flush: true,
  stealProbes: false,
});

describe('SessionMux', () => {
  it("opens outgoing streams to IPv4 addresses on the agent's native connection, the rest on the tunnel", async () => {
    // Given a tunnel whose agent joined a native connection (two fake agents: one each)
    const [tunnel, native] = await Promise.all([fakeAgent('pod-a'), fakeAgent('pod-a')]);
    const opened = (agent: FakeAgent): string[] => {
      const seen: string[] = [];
      agent.agentMux.on('stream', (s) => seen.push(JSON.stringify(s.open)));
      return seen;
    };
    const [viaTunnel, viaNative] = [opened(tunnel), opened(native)];
    const mux = new SessionMux(recorder());
    mux.attach({ ...tunnel.link, native: native.link.mux });
    // When streams of each kind are opened
    mux.openStream({ kind: 'outgoing', host: '10.1.2.3', port: 5432 }).on('error', () => undefined);
    mux.openStream({ kind: 'outgoing', host: 'db.prod.svc', port: 5432 }).on('error', () => undefined);
    mux.openStream({ kind: 'outgoing', host: 'fd00::1', port: 80 }).on('error', () => undefined);
    mux.openStream({ kind: 'file', path: '/etc/hosts' }).on('error', () => undefined);
    // Then only the outgoing connection to an IPv4 address went to the native connection
    await until(() => viaNative.length + viaTunnel.length === 4);
    expect(viaNative).toEqual([JSON.stringify({ kind: 'outgoing', host: '10.1.2.3', port: 5432 })]);
    expect(viaTunnel.map((o) => JSON.parse(o).host ?? JSON.parse(o).path)).toEqual([
      'db.prod.svc',
      'fd00::1',
      '/etc/hosts',
    ]);
    // And once the native connection is gone, the tunnel takes those too
    native.link.mux.close('gone');
    mux.openStream({ kind: 'outgoing', host: '10.1.2.4', port: 5432 }).on('error', () => undefined);
    await until(() => viaTunnel.length === 4);
    expect(JSON.parse(viaTunnel[3]).host).toBe('10.1.2.4');
    mux.end();
  });

  it('sends a subscribe to every tunnel and answers once when all subscribed', async () => {
    const [a, b] = await Promise.all([fakeAgent('pod-a'), fakeAgent('pod-b')]);
    const mux = new SessionMux(recorder());
    mux.attach(a.link);
    mux.attach(b.link);
    const answers: AgentMessage[] = [];
    mux.on('message', (m) => answers.push(m));
    expect(await request(mux, steal('s1'))).toEqual({ type: 'subscribed', id: 's1', port: 8080, mode: 'steal' });
    expect(a.seen.map((m) => m.type)).toEqual(['subscribe']);
    expect(b.seen.map((m) => m.type)).toEqual(['subscribe']);
    await new Promise((r) => setTimeout(r, 50));
    expect(answers.filter((m) => m.type === 'subscribed')).toHaveLength(1);
    mux.end();
  });

  it('answers refused when one pod refuses, forgets that subscription and returns its lock', async () => {
    const a = await fakeAgent('pod-a');
    const b = await fakeAgent('pod-b', (m) => ({
      type: 'refused',
      id: m.id,
      port: m.port,
      reason: 'port 8080 is stolen by bob@box',
      holder: { user: 'bob', host: 'box', since: '2026-01-01T00:00:00Z' },
    }));
    const returned: number[] = [];
    const mux = new SessionMux(recorder(), undefined, (port) => returned.push(port));
    mux.attach(a.link);
    mux.attach(b.link);
    const answer = await request(mux, steal('s1'));
    expect(answer).toMatchObject({ type: 'refused', reason: 'port 8080 is stolen by bob@box' });
    expect(returned).toEqual([8080]);
    expect(mux.sentSubscriptions().size).toBe(0);
    mux.end();
  });

  it('refuses through the gate (the steal lock) without asking any agent', async () => {
    const a = await fakeAgent('pod-a');
    const mux = new SessionMux(recorder(), async (m) => ({
      type: 'refused',
      id: m.id,
      port: m.port,
      reason: 'held by carol@ws',
    }));
    mux.attach(a.link);
    expect(await request(mux, steal('s1'))).toMatchObject({ type: 'refused', reason: 'held by carol@ws' });
    await new Promise((r) => setTimeout(r, 50));
    expect(a.seen).toEqual([]);
    mux.end();
  });

  it('replays subscriptions and pause state on a tunnel attached later, and tells a resumed one what was given up', async () => {
    const a = await fakeAgent('pod-a');
    const mux = new SessionMux(recorder());
    mux.attach(a.link);
    await request(mux, steal('s1', 8080));
    await request(mux, steal('s2', 9090));
    mux.send({ type: 'pause', port: 9090 });
    const before = mux.sentSubscriptions();
    await request(mux, { type: 'unsubscribe', id: 's2', port: 9090 });
    // A new tunnel (a joined pod) gets the live subscription and the pause; a resumed one also hears about port 9090.
    const fresh = await fakeAgent('pod-b');
    mux.attach(fresh.link, { previouslySent: before });
    await until(() => fresh.seen.length >= 3);
    expect(fresh.seen).toEqual([
      { type: 'unsubscribe', id: 's2', port: 9090 },
      steal('s1', 8080),
      { type: 'pause', port: 9090 },
    ]);
    mux.end();
  });

  it('a subscription made while paused (a mode switch) is paused right behind it; not after resume', async () => {
    const a = await fakeAgent('pod-a');
    const mux = new SessionMux(recorder());
    mux.attach(a.link);
    await request(mux, steal('s1'));
    mux.send({ type: 'pause' });
    await request(mux, { type: 'unsubscribe', id: 's1', port: 8080 });
    await request(mux, steal('s2'));
    await until(() => a.seen.length >= 5);
    expect(a.seen.slice(3, 5)).toEqual([steal('s2'), { type: 'pause', port: 8080 }]);
    mux.send({ type: 'resume' });
    await request(mux, steal('s3'));
    await new Promise((r) => setTimeout(r, 50));
    expect(a.seen.slice(5)).toEqual([{ type: 'resume' }, steal('s3')]);
    mux.end();
  });

  it('reports traffic with the pod it came from, and stops waiting for a tunnel that is detached', async () => {
    const rec = recorder();
    const a = await fakeAgent('pod-a');
    const silent = await fakeAgent('pod-b', () => ({ type: 'log', level: 'info', message: 'no answer' }));
    const mux = new SessionMux(rec);
    mux.attach(a.link);
    mux.attach(silent.link);
    a.agentMux.send({
      type: 'traffic',
      event: {
        kind: 'connection',
        connId: 'c1',
        port: 8080,
        remoteAddress: '10.0.0.9',
        remotePort: 5555,
        to: 'local',
        phase: 'open',
        at: 1,
      },
    });
    await until(() => rec.events.some((e) => e.type === 'connection'));
    expect(rec.events.find((e) => e.type === 'connection')).toMatchObject({
      pod: 'pod-a',
      remote: '10.0.0.9:5555',
      state: 'open',
    });
    const pending = request(mux, steal('s1'));
    await until(() => silent.seen.length === 1);
    mux.detach(silent.link);
    expect(await pending).toMatchObject({ type: 'subscribed', id: 's1' });
    mux.end();
  });

  it('answers a subscribe only once an agent holds the port, even when its tunnel is lost before the answer', async () => {
    // Given a subscribe sent on the session's only tunnel, whose agent does not answer
    const silent = await fakeAgent('pod-a', () => ({ type: 'log', level: 'info', message: 'no answer' }));
    const mux = new SessionMux(recorder());
    mux.attach(silent.link);
    let answer: AgentMessage | undefined;
    const pending = request(mux, steal('s1')).then((m) => (answer = m));
    await until(() => silent.seen.length === 1);
    // When that tunnel is lost (the supervisor reconnects)
    mux.detach(silent.link);
    await new Promise((r) => setTimeout(r, 100));
    // Then the subscribe is not answered: no agent holds the port, so "stealing" would not be true yet
    expect(answer).toBeUndefined();
    // When the new tunnel attaches, it gets the subscription again, and its agent's answer is the answer
    const back = await fakeAgent('pod-a');
    mux.attach(back.link);
    expect(await pending).toEqual({ type: 'subscribed', id: 's1', port: 8080, mode: 'steal' });
    expect(back.seen.map((m) => m.type)).toEqual(['subscribe']);
    // And a subscribe sent while no tunnel is up waits the same way
    mux.detach(back.link);
    let second: AgentMessage | undefined;
    const waiting = request(mux, steal('s2', 8081)).then((m) => (second = m));
    await new Promise((r) => setTimeout(r, 100));
    expect(second).toBeUndefined();
    const third = await fakeAgent('pod-a');
    mux.attach(third.link);
    expect(await waiting).toEqual({ type: 'subscribed', id: 's2', port: 8081, mode: 'steal' });
    mux.end();
  });

  it('a subscribe made while no tunnel comes back is answered as recorded after 10 s (replayed when one does)', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const mux = new SessionMux(recorder());
      let answer: AgentMessage | undefined;
      void request(mux, steal('s1')).then((m) => (answer = m));
      await vi.advanceTimersByTimeAsync(9_900);
      expect(answer).toBeUndefined();
      await vi.advanceTimersByTimeAsync(200);
      expect(answer).toEqual({ type: 'subscribed', id: 's1', port: 8080, mode: 'steal' });
      expect(mux.sentSubscriptions()).toEqual(new Map([[8080, 's1']]));
      mux.end();
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('watchLiveness', () => {
  it('measures RTT while the agent answers pings', async () => {
    const a = await fakeAgent('pod-a');
    const rtts: number[] = [];
    let stalled = false;
    const stop = watchLiveness(a.link.mux, {
      pingMs: 20,
      stallMs: 300,
      onRtt: (ms) => rtts.push(ms),
      onStall: () => (stalled = true),
    });
    await until(() => rtts.length >= 5);
    await new Promise((r) => setTimeout(r, 400));
    stop();
    expect(stalled).toBe(false);
    expect(a.link.mux.closed).toBe(false);
    a.link.mux.close();
  });

  it('declares a silent tunnel stalled and closes it', async () => {
    const a = await fakeAgent('pod-a', undefined, false);
    let silentFor = 0;
    const closed = new Promise<Error | undefined>((r) => a.link.mux.once('close', r));
    watchLiveness(a.link.mux, { pingMs: 20, stallMs: 200, onStall: (ms) => (silentFor = ms) });
    await closed;
    expect(silentFor).toBeGreaterThan(200);
    expect(a.seen.filter((m) => m.type === 'ping').length).toBeGreaterThan(3);
  });
});
