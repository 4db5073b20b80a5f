// The agent's redirect listeners take only redirected connections. They bind every address of the pod netns (a
// redirect in nat PREROUTING delivers to the primary address of the interface the connection came in on, so a listener
// on 127.0.0.1 alone would get nothing), and a connection made to a listener's port directly — from the pod network,
// the node, or a process of the pod — is reset by the guard in the agent's owned nftables table.
import { execFile } from 'node:child_process';
import { connect } from 'node:net';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { FEATURES } from '../../shared/protocol.js';
import { requireRoot } from '../../testkit/root.js';
import { PodNet, sh, type AgentProc } from '../../testkit/netns.js';
import {
  connectSession,
  startLocalCommand,
  type LocalCommand,
  type TestSession,
} from '../../testkit/session-client.js';
import { httpGet } from '../../testkit/http.js';
import { waitFor } from '../../testkit/wait.js';

const exec = promisify(execFile);
const run = requireRoot('agent listener guard');

/** How long a dial may take before it counts as dropped (a reset comes back at once). */
const DIAL_TIMEOUT_MS = 3000;

/** One TCP connect to host:port from the test's own netns (the node): 'connected' or the error's code. */
function dial(host: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (result: string): void => {
      socket.destroy();
      resolve(result);
    };
    socket.setTimeout(DIAL_TIMEOUT_MS, () => done('timeout'));
    socket.once('connect', () => done('connected'));
    socket.once('error', (err: NodeJS.ErrnoException) => done(err.code ?? err.message));
  });
}

/** The same connect from inside network namespace `ns`. */
async function dialFrom(ns: string, host: string, port: number): Promise<string> {
  const script =
    'const s = require("node:net").connect({ host: process.argv[1], port: Number(process.argv[2]) });' +
    `s.setTimeout(${DIAL_TIMEOUT_MS}, () => { console.log("timeout"); process.exit(0); });` +
    's.once("connect", () => { console.log("connected"); process.exit(0); });' +
    's.once("error", (e) => { console.log(e.code); process.exit(0); });';
  const { stdout } = await exec('nsenter', [`--net=/run/netns/${ns}`, process.execPath, '-e', script, host, `${port}`]);
  return stdout.trim();
}

describe.runIf(run)('agent: redirect listeners take only redirected connections', () => {
  const net = new PodNet();
  let agent: AgentProc;
  let control: string;
  let client: string;
  let local: LocalCommand;
  let alice: TestSession;

  /** The listener port the redirect rule of `port` points at, from the agent's owned table. */
  async function listenerPortOf(port: number): Promise<number> {
    const match = new RegExp(`tcp dport ${port} redirect to :(\\d+)`).exec(await net.nftRuleset());
    if (!match) throw new Error(`no redirect rule for :${port} in the pod netns`);
    return Number(match[1]);
  }

  /** Every way a direct connection to `listenerPort` can come: the client's netns, the node, the pod's own netns. */
  async function directDials(listenerPort: number): Promise<Record<string, string>> {
    return {
      fromPodNetwork: await dialFrom(net.clientNs, net.podIP, listenerPort),
      fromNode: await dial(net.podIP, listenerPort),
      fromThePod: await dialFrom(net.podNs, '127.0.0.1', listenerPort),
    };
  }

  beforeAll(async () => {
    await net.setup();
    await net.startPod({ port: 3000 });
    agent = await net.startAgent();
    control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    client = await net.relay(net.clientNs, net.podIP, 3000);
    local = await startLocalCommand('local-alice');
    alice = await connectSession(control, { local, user: 'alice' });
  });
  afterAll(async () => {
    alice?.mux.close('test over');
    await local?.close();
    await net.teardown();
  });

  test('a direct connection to a steal listener is reset; stolen traffic to the app port still arrives', async () => {
    // Given alice steals :3000 whole
    expect((await alice.subscribe(3000, 'steal')).type).toBe('subscribed');
    const listenerPort = await listenerPortOf(3000);
    // When clients connect to the listener's port itself, from the pod network, the node and the pod
    const direct = await directDials(listenerPort);
    // Then each is reset (the listener binds every address: only the guard keeps them out)
    expect(direct).toEqual({ fromPodNetwork: 'ECONNREFUSED', fromNode: 'ECONNREFUSED', fromThePod: 'ECONNREFUSED' });
    // And the app's port is still stolen: a request from the pod network reaches alice's local command
    expect((await httpGet(client, '/stolen')).body).toBe('local-alice: GET /stolen');
  });

  test("a filtered steal's new listener is guarded too, and a closed listener's guard goes with it", async () => {
    // Given alice's whole steal ends and a filtered one takes its place (a new listener)
    const before = await listenerPortOf(3000);
    const sub = alice.messages.find((m) => m.type === 'subscribed') as { id: string };
    await alice.request({ type: 'unsubscribe', id: sub.id, port: 3000 }, ['unsubscribed']);
    expect(await net.nftRuleset()).not.toContain(`devop listener ${before}`);
    const filter = { header: 'x-user: ^alice$', match: 'all' as const };
    expect((await alice.subscribe(3000, 'steal', { filter })).type).toBe('subscribed');
    const listenerPort = await listenerPortOf(3000);
    // When a client of the pod network connects to the new listener's port directly
    const direct = await dialFrom(net.clientNs, net.podIP, listenerPort);
    // Then it is reset, while requests to the app's port are routed by the filter as before
    expect(direct).toBe('ECONNREFUSED');
    expect((await httpGet(client, '/mine', { headers: { 'x-user': 'alice' } })).body).toBe('local-alice: GET /mine');
    expect((await httpGet(client, '/theirs')).body).toBe('pod: GET /theirs');
  });
});

describe.runIf(run)("agent: the native data path's listeners take only redirected connections", () => {
  const net = new PodNet();
  let local: LocalCommand;
  let session: TestSession;
  let client: string;

  beforeAll(async () => {
    await net.setup();
    await net.startPod({ port: 3000 });
    const agent = await net.startAgent({ DEVOP_AGENT_NATIVE_PORT: '0' });
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    const nativeRelay = await net.relay(net.podNs, '127.0.0.1', agent.nativePort ?? 0);
    client = await net.relay(net.clientNs, net.podIP, 3000);
    local = await startLocalCommand('local');
    const features = [FEATURES.traffic, FEATURES.streamEvents, FEATURES.nativeSplice];
    session = await connectSession(control, { local, features });
    await session.joinNative(nativeRelay);
  });
  afterAll(async () => {
    session?.mux.close('test over');
    await local?.close();
    await net.teardown();
  });

  test("devop-splice's listener and the agent's own behind it both reset direct connections", async () => {
    // Given a whole steal of :3000 that devop-splice serves (the rule points at its listener)
    expect((await session.subscribe(3000, 'steal')).type).toBe('subscribed');
    await waitFor('the port to move to devop-splice', async () => {
      await httpGet(client, '/warm');
      return session.incoming.some((i) => i.native);
    });
    // When a client of the pod network connects to every port the pod netns listens on at every address, but the app's
    const listening = await sh(`ip netns exec ${net.podNs} ss -Htln`);
    // (IPv4 any, and IPv6 any: devop-splice's dual-stack socket and the agent's IPv6 twin)
    const any = /(?:0\.0\.0\.0|\*|\[::\]):(\d+)\s/g;
    const ports = [...new Set([...listening.matchAll(any)].map((m) => Number(m[1])))].filter((p) => p !== 3000);
    expect(ports.length).toBeGreaterThanOrEqual(2); // the agent's listener and devop-splice's
    const dials = await Promise.all(
      ports.flatMap((port) => [dialFrom(net.clientNs, net.podIP, port), dialFrom(net.clientNs, net.podIP6, port)]),
    );
    // Then each is reset, over IPv4 and IPv6, and the app's port is still stolen through devop-splice
    expect(dials).toEqual(ports.flatMap(() => ['ECONNREFUSED', 'ECONNREFUSED']));
    expect((await httpGet(client, '/stolen')).body).toBe('local: GET /stolen');
  });
});
