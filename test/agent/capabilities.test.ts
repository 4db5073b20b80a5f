// The agent with exactly the capabilities its manifest asks for (every feature works), and with one of them taken away
// (the feature that needs it fails with one line naming the capability; the others keep working).
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { AGENT_CAPABILITIES, agentCapabilities, type AgentCapability } from '../../shared/agent-contract.js';
import { requireRoot } from '../../testkit/root.js';
import { httpGet } from '../../testkit/http.js';
import { PodNet, type AgentProc } from '../../testkit/netns.js';
import { connectSession, startLocalCommand, type LocalCommand } from '../../testkit/session-client.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent capabilities');

function without(...dropped: AgentCapability[]): AgentCapability[] {
  return AGENT_CAPABILITIES.filter((c) => !dropped.includes(c));
}

function logged(agent: AgentProc, msg: string): Array<Record<string, unknown>> {
  return agent.lines.flatMap((l) => {
    try {
      const entry = JSON.parse(l) as Record<string, unknown>;
      return entry.msg === msg ? [entry] : [];
    } catch {
      return [];
    }
  });
}

/**
 * The agent's last `subscribed` log line once it is about `mode`: the answer comes over the session's socket, the log
 * line over the agent's stdout, and either can arrive first.
 */
function loggedSubscription(agent: AgentProc, mode: string): Promise<Record<string, unknown>> {
  return waitFor(`the agent's log line for the ${mode} subscription`, () => {
    const last = logged(agent, 'subscribed').at(-1);
    return last?.mode === mode ? last : undefined;
  });
}

describe.runIf(run)('agent: the capabilities its manifest asks for', () => {
  const net = new PodNet();
  let client: string;
  let local: LocalCommand;

  beforeAll(async () => {
    await net.setup();
    await net.startPod({ port: 3000, env: { FROM_POD: 'yes' } });
    client = await net.relay(net.clientNs, net.podIP, 3000);
    local = await startLocalCommand('local');
  });
  afterAll(async () => {
    await local?.close();
    await net.teardown();
  });
  // A test that fails half-way leaves neither its agent nor the agent's rules to the next one.
  const agents: AgentProc[] = [];
  afterEach(async () => {
    for (const agent of agents.splice(0)) {
      try {
        process.kill(agent.pid, 'SIGTERM');
      } catch {
        // Already gone: the test ended it.
      }
    }
    await waitFor("the agent's rules to go", async () => (await net.devopRules()).length === 0);
  });
  async function startAgent(...args: Parameters<PodNet['startAgent']>): Promise<AgentProc> {
    const agent = await net.startAgent(...args);
    agents.push(agent);
    return agent;
  }

  async function session(agent: AgentProc) {
    return connectSession(await net.relay(net.podNs, '127.0.0.1', agent.port), { local });
  }

  test('with exactly those: job mode enters the netns, steals, mirrors by capture, reads env and files', async () => {
    const agent = await startAgent({}, { capabilities: AGENT_CAPABILITIES });
    const s = await session(agent);
    expect((await s.subscribe(3000, 'steal')).type).toBe('subscribed');
    expect((await httpGet(client, '/stolen')).body).toBe('local: GET /stolen');
    expect((await s.subscribe(3000, 'mirror')).type).toBe('subscribed');
    expect(await loggedSubscription(agent, 'mirror')).toMatchObject({ via: 'capture' });
    expect((await httpGet(client, '/mirrored')).body).toBe('pod: GET /mirrored');
    const env = await s.request({ type: 'envRead', id: 'e' }, ['env']);
    expect(env.vars.FROM_POD).toBe('yes');
    const file = s.mux.openStream({ kind: 'file', path: '/etc/hosts' });
    file.end();
    const chunks: Buffer[] = [];
    await new Promise((resolve, reject) =>
      file
        .on('error', reject)
        .on('end', resolve)
        .on('data', (c: Buffer) => chunks.push(c)),
    );
    expect(Buffer.concat(chunks).toString()).toContain(`${net.podIP} pod`);
    process.kill(agent.pid, 'SIGTERM');
    await waitFor("the agent's rules to go", async () => (await net.devopRules()).length === 0);
  });

  test("with an ephemeral container's set (no SYS_ADMIN): steals, mirrors by capture, reads env and files", async () => {
    // Given the capabilities the manifest gives an ephemeral agent of a mirroring session: no SYS_ADMIN, which only
    // entering the netns needs (an ephemeral container is in it already)
    const capabilities = agentCapabilities('ephemeral', true);
    expect(capabilities).not.toContain('SYS_ADMIN');
    const agent = await startAgent({ DEVOP_AGENT_MODE: 'ephemeral' }, { inPodNetns: true, capabilities });
    const s = await session(agent);
    // Then every feature works
    expect((await s.subscribe(3000, 'steal')).type).toBe('subscribed');
    expect((await httpGet(client, '/stolen')).body).toBe('local: GET /stolen');
    expect((await s.subscribe(3000, 'mirror')).type).toBe('subscribed');
    expect(await loggedSubscription(agent, 'mirror')).toMatchObject({ via: 'capture' });
    expect((await httpGet(client, '/mirrored')).body).toBe('pod: GET /mirrored');
    const env = await s.request({ type: 'envRead', id: 'e' }, ['env']);
    expect(env.vars.FROM_POD).toBe('yes');
    const file = s.mux.openStream({ kind: 'file', path: '/etc/hosts' });
    file.end();
    const chunks: Buffer[] = [];
    await new Promise((resolve, reject) =>
      file
        .on('error', reject)
        .on('end', resolve)
        .on('data', (c: Buffer) => chunks.push(c)),
    );
    expect(Buffer.concat(chunks).toString()).toContain(`${net.podIP} pod`);
    process.kill(agent.pid, 'SIGTERM');
    await waitFor("the agent's rules to go", async () => (await net.devopRules()).length === 0);
  });

  test('without NET_ADMIN: stealing is refused with one line naming it; mirroring by capture still works', async () => {
    const agent = await startAgent({}, { capabilities: without('NET_ADMIN') });
    const s = await session(agent);
    const refused = await s.subscribe(3000, 'steal');
    expect(refused).toMatchObject({ type: 'refused' });
    const { reason, hint } = refused as { reason: string; hint?: string };
    expect(reason).toBe("the agent's container lacks CAP_NET_ADMIN, which stealing :3000 needs");
    expect(hint).toMatch(/^allow NET_ADMIN in the agent's securityContext/);
    expect(`${reason}${hint}`).not.toContain('\n');
    expect((await s.subscribe(3000, 'mirror')).type).toBe('subscribed');
    expect((await httpGet(client, '/copy')).body).toBe('pod: GET /copy');
    process.kill(agent.pid, 'SIGTERM');
  });

  test('without NET_RAW: mirror copies come through the agent, and the log says which capability is missing', async () => {
    const agent = await startAgent({}, { capabilities: without('NET_RAW') });
    const s = await session(agent);
    expect((await s.subscribe(3000, 'mirror')).type).toBe('subscribed');
    expect(await loggedSubscription(agent, 'mirror')).toMatchObject({ via: 'redirect' });
    expect(String(logged(agent, 'mirror copies go through the agent')[0]?.why)).toMatch(
      /lacks CAP_NET_RAW, which a packet capture needs/,
    );
    expect((await httpGet(client, '/proxied')).body).toBe('pod: GET /proxied');
    process.kill(agent.pid, 'SIGTERM');
    await waitFor("the agent's rules to go", async () => (await net.devopRules()).length === 0);
  });

  test('without SYS_ADMIN: a job-mode agent stops before it is ready, with one line naming it', async () => {
    await expect(net.startAgent({}, { capabilities: without('SYS_ADMIN') })).rejects.toThrow(
      /lacks CAP_SYS_ADMIN, which entering the target pod's network namespace needs/,
    );
  });

  test('without SYS_PTRACE: reading a file of the target is refused with one line naming it; stealing still works', async () => {
    // As an ephemeral container: already in the netns, so only the reads through the target's /proc entries need it.
    const agent = await startAgent(
      { DEVOP_AGENT_MODE: 'ephemeral' },
      { inPodNetns: true, capabilities: without('SYS_PTRACE') },
    );
    const s = await session(agent);
    const file = s.mux.openStream({ kind: 'file', path: '/etc/hostname' });
    file.end();
    const read = new Promise((resolve, reject) => file.on('error', reject).on('end', resolve).resume());
    await expect(read).rejects.toThrow(
      /lacks CAP_SYS_PTRACE, which reading \/etc\/hostname in the target container needs/,
    );
    expect((await s.subscribe(3000, 'steal')).type).toBe('subscribed');
    expect((await httpGet(client, '/still')).body).toBe('local: GET /still');
    process.kill(agent.pid, 'SIGTERM');
    await waitFor("the agent's rules to go", async () => (await net.devopRules()).length === 0);
  });
});
