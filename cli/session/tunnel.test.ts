// agentRequest over both kinds of SessionTunnel — a direct mux and the supervised SessionMux — against a fake agent on
// a real loopback socket: the answer with the request's id comes back, and a closed tunnel is one clear error.
import { createServer, connect, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { isUserError } from '../../shared/errors.js';
import { createAgentMux, createClientMux, type AgentMux, type ClientMux } from '../../shared/mux.js';
import { SessionMux } from './supervised-mux.js';
import { agentRequest, type SessionTunnel } from './tunnel.js';

const servers: Server[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

/** A client mux connected to a fake agent that answers envRead with one variable (or never, when `silent`). */
async function directTunnel(silent = false): Promise<{ client: ClientMux; agent: AgentMux }> {
  let resolveAgent: (agent: AgentMux) => void = () => undefined;
  const accepted = new Promise<AgentMux>((resolve) => (resolveAgent = resolve));
  const server = createServer((socket) => {
    const agent = createAgentMux(socket);
    agent.on('message', (msg) => {
      if (msg.type === 'envRead' && !silent) agent.send({ type: 'env', id: msg.id, vars: { POD_NAME: 'web-0' } });
    });
    resolveAgent(agent);
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const socket = connect((server.address() as { port: number }).port, '127.0.0.1');
  await new Promise((r) => socket.once('connect', r));
  return { client: createClientMux(socket), agent: await accepted };
}

const nullReporter = { emit: () => undefined, capturesChildOutput: false, close: async () => undefined };

function readEnv(tunnel: SessionTunnel) {
  return agentRequest(tunnel, (id) => tunnel.send({ type: 'envRead', id }), ['env'], 'read the pod env');
}

describe('agentRequest', () => {
  it('gets the answer through a direct tunnel', async () => {
    // Given a direct tunnel to an agent
    const { client } = await directTunnel();
    // When the env is asked for, Then the agent's answer comes back
    expect(await readEnv(client)).toMatchObject({ type: 'env', vars: { POD_NAME: 'web-0' } });
    client.close('test over');
  });

  it('gets the answer through the supervised tunnel (its primary tunnel answers)', async () => {
    // Given a supervised tunnel holding one direct tunnel
    const { client } = await directTunnel();
    const supervised = new SessionMux(nullReporter);
    supervised.attach({ pod: 'web-0', mux: client }, { primary: true });
    // When the env is asked for through it, Then the agent's answer comes back
    expect(await readEnv(supervised)).toMatchObject({ type: 'env', vars: { POD_NAME: 'web-0' } });
    supervised.end();
  });

  it('fails with one line and a hint when the tunnel closes before the answer', async () => {
    // Given an agent that never answers
    const { client, agent } = await directTunnel(true);
    const answer = readEnv(client);
    // When the agent's end closes
    agent.close('agent gone');
    // Then the request fails with a UserError naming what was asked
    const err = await answer.catch((e: unknown) => e);
    expect(isUserError(err)).toBe(true);
    expect((err as Error).message).toMatch(/^the tunnel to the agent closed \(read the pod env\)/);
  });
});
