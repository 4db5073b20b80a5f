// Test fixtures for the protocol: one sample of every message type and stream kind (the compiler insists on all of
// them), a seeded PRNG, in-memory socket pairs (loopback TCP pairs: sockets.ts) and polling helpers. Used by the
// protocol tests (shared/, cli/services) only.
import { Duplex } from 'node:stream';
import type { AgentMessage, ClientMessage, StreamOpen } from '../shared/protocol.js';

type ByType<U extends { type: string }> = { [K in U['type']]: Extract<U, { type: K }> };
type ByKind<U extends { kind: string }> = { [K in U['kind']]: Extract<U, { kind: K }> };

export const CLIENT_SAMPLES: ByType<ClientMessage> = {
  hello: {
    type: 'hello',
    protocolVersion: 1,
    token: 'tok-ß-✓',
    client: { user: 'alice', host: 'laptop', pid: 4242, devopVersion: '0.1.0' },
    resumeSessionId: 'sess-1',
    features: ['steal'],
  },
  ping: { type: 'ping', id: 7, sentAt: 1700000000123.5 },
  pong: { type: 'pong', id: 8, sentAt: 1700000000124 },
  subscribe: {
    type: 'subscribe',
    id: 'sub-1',
    port: 3000,
    mode: 'steal',
    filter: { header: 'x-devop-user: alice', path: '^/api', method: 'GET', match: 'any' },
    flush: true,
    stealProbes: false,
    answerWithinMs: 4000,
  },
  unsubscribe: { type: 'unsubscribe', id: 'sub-1', port: 3000 },
  pause: { type: 'pause', port: 3000 },
  resume: { type: 'resume' },
  dnsResolve: { type: 'dnsResolve', id: 'dns-1', name: 'kubernetes.default.svc', family: 4 },
  envRead: { type: 'envRead', id: 'env-1' },
  nativeJoin: { type: 'nativeJoin', token: 'sess-1' },
  bye: { type: 'bye', reason: 'ctrl-c' },
};

export const AGENT_SAMPLES: ByType<AgentMessage> = {
  helloOk: {
    type: 'helloOk',
    protocolVersion: 1,
    agentVersion: '0.1.0',
    sessionId: 'sess-1',
    features: ['steal', 'mirror', 'http-filter'],
    target: { pid: 123, containerId: 'containerd://abc', podIP: '10.0.0.5' },
  },
  pong: { type: 'pong', id: 7, sentAt: 1700000000123.5 },
  ping: { type: 'ping', id: 1, sentAt: 5 },
  nativeJoined: { type: 'nativeJoined' },
  subscribed: { type: 'subscribed', id: 'sub-1', port: 3000, mode: 'mirror' },
  refused: {
    type: 'refused',
    id: 'sub-2',
    port: 3000,
    reason: 'port stolen by another session',
    holder: { user: 'bob', host: 'desk', since: '2026-01-01T00:00:00Z' },
    hint: 'wait until the other session ends',
  },
  unsubscribed: { type: 'unsubscribed', id: 'sub-1', port: 3000 },
  dnsResult: {
    type: 'dnsResult',
    id: 'dns-1',
    addresses: [
      { address: '10.96.0.1', family: 4 },
      { address: 'fd00::1', family: 6 },
    ],
  },
  env: { type: 'env', id: 'env-1', vars: { HOME: '/root', EMPTY: '', 'WEIRD=NAME': 'ü\n' } },
  traffic: {
    type: 'traffic',
    event: {
      kind: 'response',
      requestId: 'r1',
      port: 3000,
      status: 200,
      durationMs: 1.5,
      bytes: 42,
      to: 'local',
      at: 1,
    },
  },
  log: { type: 'log', level: 'warn', message: 'iptables-legacy in use' },
  error: { type: 'error', id: 'dns-1', code: 'not_found', message: 'no such host', hint: 'check the name' },
  bye: { type: 'bye', reason: 'agent shutting down' },
};

export const STREAM_OPEN_SAMPLES: ByKind<StreamOpen> = {
  incoming: {
    kind: 'incoming',
    port: 3000,
    mode: 'steal',
    remoteAddress: '10.0.0.9',
    remotePort: 51234,
    subscriptionId: 'sub-1',
    request: { method: 'GET', path: '/api/v1/llamas?x=1', headers: { host: 'farm', 'set-cookie': ['a=1', 'b=2'] } },
  },
  outgoing: { kind: 'outgoing', host: 'db.default.svc', port: 5432 },
  file: { kind: 'file', path: '/var/run/secrets/kubernetes.io/serviceaccount/token' },
  udp: { kind: 'udp' },
};

/** Deterministic PRNG (mulberry32) so that a failing fuzz case can be replayed from its seed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Two connected in-memory Duplex ends (what one writes, the other reads), for tests that need no kernel socket. */
export function duplexPair(): [Duplex, Duplex] {
  let a: Duplex;
  let b: Duplex;
  const make = (peer: () => Duplex): Duplex =>
    new Duplex({
      read() {
        // Data is pushed by the peer's write, never pulled.
      },
      write(chunk: Buffer, _enc, cb) {
        peer().push(chunk);
        cb();
      },
      final(cb) {
        peer().push(null);
        cb();
      },
    });
  a = make(() => b);
  b = make(() => a);
  return [a, b];
}

/** Polls `cond` until true, with a generous deadline (the machine is shared): never a fixed sleep. */
export async function until(cond: () => boolean, what: string, deadlineMs = 30_000): Promise<void> {
  const end = Date.now() + deadlineMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export const nextEvent = <T>(emitter: NodeJS.EventEmitter, event: string): Promise<T> =>
  new Promise((r) => emitter.once(event, r));
