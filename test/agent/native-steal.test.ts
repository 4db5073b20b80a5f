// The native data path in the agent: a session that joins devop-splice gets its whole steals from it (the port's rule
// points at devop-splice's listener), and everything devop-splice cannot do — pause, answer fallback, a session gone,
// devop-splice itself gone — puts the port back on the agent's own listener without losing a request; until it has, a
// CLI that vanished has devop-splice pass the port's connections to the pod.
import { readFileSync } from 'node:fs';
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
import { httpGet } from '../../testkit/http.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent native steal');
const NATIVE_FEATURES = [FEATURES.traffic, FEATURES.streamEvents, FEATURES.nativeSplice];

describe.runIf(run)('agent: whole steals through devop-splice', () => {
  const net = new PodNet();
  let pod: Proc;
  let agent: AgentProc;
  let control: string;
  let nativeRelay: string;
  let client: string;
  let local: LocalCommand;
  let session: TestSession;

  beforeAll(async () => {
    await net.setup();
    pod = await net.startPod({ port: 3000 });
    agent = await net.startAgent({ DEVOP_AGENT_NATIVE_PORT: '0' });
    control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    nativeRelay = await net.relay(net.podNs, '127.0.0.1', agent.nativePort ?? 0);
    client = await net.relay(net.clientNs, net.podIP, 3000);
    local = await startLocalCommand('local');
    session = await connectSession(control, { local, features: NATIVE_FEATURES });
    await session.joinNative(nativeRelay);
  });
  afterAll(async () => {
    session?.mux.close('test over');
    await local?.close();
    await net.teardown();
  });

  /** The listener port the nft rule of port 3000 redirects to. */
  const ruleTarget = async (): Promise<number | undefined> => {
    const rule = /tcp dport 3000 redirect to :(\d+)/.exec((await net.devopRules()).join('\n'));
    return rule ? Number(rule[1]) : undefined;
  };
  /** Answers one request from the client netns; says whether its stream came over the native connection. */
  const viaNative = async (path: string): Promise<boolean | 'pod'> => {
    const before = session.incoming.length;
    const { body } = await httpGet(client, path);
    if (body === `pod: GET ${path}`) return 'pod';
    expect(body).toBe(`local: GET ${path}`);
    expect(session.incoming.length).toBe(before + 1);
    return session.incoming[before].native;
  };

  test('the agent runs devop-splice and says so; a joined session gets its whole steal from it', async () => {
    // Given the agent's ready line and hello
    expect(agent.nativePort).toBeGreaterThan(0);
    const helloOk = session.messages.find((m) => m.type === 'helloOk');
    expect(helloOk?.type === 'helloOk' && helloOk.features).toContain(FEATURES.nativeSplice);
    // When the session steals port 3000 whole
    expect((await session.subscribe(3000, 'steal')).type).toBe('subscribed');
    await waitFor('the redirect rule', async () => (await ruleTarget()) !== undefined);
    // Then requests are answered locally over the native connection, with devop-splice's connection ids
    await waitFor('the port to move to devop-splice', async () => (await viaNative('/warm')) === true);
    expect(await viaNative('/native-a')).toBe(true);
    expect(await viaNative('/native-b')).toBe(true);
    const ids = session.incoming.filter((i) => i.native).map((i) => i.open.connId);
    expect(ids.every((id) => /^3000-n\d+$/.test(id ?? ''))).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    // And the pod saw none of them, and the agent sent no connection events for them (the client makes them)
    expect(net.podRequests(pod).filter((l) => l.includes('/native'))).toEqual([]);
    expect(session.traffic.filter((t) => t.kind === 'connection')).toEqual([]);
  });

  test('pause gives the port back to the pod; resume takes it to devop-splice again', async () => {
    const native = await ruleTarget();
    session.send({ type: 'pause', port: 3000 });
    await waitFor('the pod to answer while paused', async () => (await viaNative('/paused')) === 'pod');
    expect(await ruleTarget()).not.toBe(native);
    session.send({ type: 'resume', port: 3000 });
    await waitFor('devop-splice to take the port again', async () => (await viaNative('/resumed')) === true);
  });

  test('a steal with an answer fallback stays with the agent (only it can replay to the pod)', async () => {
    expect((await session.subscribe(3000, 'steal', { answerWithinMs: 5000 })).type).toBe('subscribed');
    await waitFor('the agent to take the port', async () => (await viaNative('/fallback')) === false);
    expect((await session.subscribe(3000, 'steal')).type).toBe('subscribed');
    await waitFor('devop-splice to take the port again', async () => (await viaNative('/whole-again')) === true);
  });

  test('when the native connection ends, the agent takes the steal back', async () => {
    session.native?.close('test: native connection gone');
    await waitFor('the agent to take the port', async () => (await viaNative('/after-native')) === false);
    // And a new native connection takes it over again
    await session.joinNative(nativeRelay);
    await waitFor('devop-splice to take the port again', async () => (await viaNative('/rejoined')) === true);
  });

  test("a disconnected session's port goes to the pod; its resume joins again and takes it back", async () => {
    session.mux.close('test: tunnel lost');
    await waitFor('the pod to answer', async () => (await viaNative('/while-away')) === 'pod');
    session = await connectSession(control, {
      local,
      features: NATIVE_FEATURES,
      resumeSessionId: session.sessionId,
    });
    await session.joinNative(nativeRelay);
    await waitFor('devop-splice to take the port again', async () => (await viaNative('/resumed-session')) === true);
  });

  test('a CLI that vanishes (no bye): until the agent moves its port back, devop-splice passes clients to the pod', async () => {
    await waitFor('devop-splice to serve the port', async () => (await viaNative('/before-vanish')) === true);
    const native = await ruleTarget();
    // Given an agent that is slow to move the port's rule back (stopped: the rule stays on devop-splice meanwhile)
    process.kill(agent.innerPid, 'SIGSTOP');
    try {
      // When both of the session's connections drop without a word (the CLI killed), and devop-splice sees its go
      session.socket.destroy();
      session.nativeSocket?.destroy();
      const tunnels = `ip netns exec ${net.podNs} ss -Htn state established '( sport = :${agent.nativePort} )'`;
      await waitFor("devop-splice's tunnel connection to close", async () => (await sh(tunnels)).trim() === '');
      // Then clients that come meanwhile are answered by the pod, through devop-splice, not refused
      const bodies = await Promise.all(
        [0, 1, 2, 3, 4, 5, 6, 7].map((i) => httpGet(client, `/vanish-${i}`).then((a) => a.body)),
      );
      expect(bodies).toEqual(bodies.map((_, i) => `pod: GET /vanish-${i}`));
      expect(await ruleTarget()).toBe(native);
    } finally {
      process.kill(agent.innerPid, 'SIGCONT');
    }
    // And once the agent has moved the rule, the session resumes and takes the port back
    await waitFor('the agent to move the rule', async () => (await ruleTarget()) !== native);
    session = await connectSession(control, { local, features: NATIVE_FEATURES, resumeSessionId: session.sessionId });
    await session.joinNative(nativeRelay);
    await waitFor('devop-splice to take the port again', async () => (await viaNative('/after-vanish')) === true);
  });

  test('when devop-splice dies, the agent takes the steal back and the port keeps answering', async () => {
    const pid = Number((await sh(`pgrep -P ${agent.innerPid} -f devop-splice`)).trim());
    expect(pid).toBeGreaterThan(0);
    process.kill(pid, 'SIGKILL');
    await waitFor('the agent', async () => (await viaNative('/after-death').catch(() => 'refused')) === false);
    expect(await viaNative('/still-stolen')).toBe(false);
    expect(net.podRequests(pod).filter((l) => l.includes('/still-stolen'))).toEqual([]);
  });

  test('devop-splice ends with its agent, however the agent ends (kill -9)', async () => {
    const other = await net.startAgent({ DEVOP_AGENT_NATIVE_PORT: '0' });
    const pid = Number((await sh(`pgrep -P ${other.innerPid} -f devop-splice`)).trim());
    expect(pid).toBeGreaterThan(0);
    process.kill(other.innerPid, 'SIGKILL');
    // (ended: gone, or a zombie its new parent has not reaped yet)
    const ended = (): boolean => {
      try {
        return / Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\)/, ''));
      } catch {
        return true;
      }
    };
    await waitFor('devop-splice to end with its agent', ended);
  });
});
