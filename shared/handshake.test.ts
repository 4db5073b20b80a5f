// The hello/helloOk handshake over a real socket: success, a wrong token, a version mismatch either way, no answer.
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { UserError } from './errors.js';
import { acceptHello, checkHello, clientHello } from './handshake.js';
import { createAgentMux, createClientMux, type AgentMux, type ClientMux } from './mux.js';
import { PROTOCOL_VERSION, type AgentMessage } from './protocol.js';
import { CLIENT_SAMPLES, duplexPair } from '../testkit/protocol-fixtures.js';

const client = { user: 'alice', host: 'laptop', pid: 1, devopVersion: '0.1.0' };
const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const fn of cleanups.splice(0)) fn();
});

async function pair(): Promise<{ cli: ClientMux; agent: AgentMux }> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const accepted = new Promise<net.Socket>((r) => server.once('connection', r));
  const sock = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
  const agentSock = await accepted;
  server.close();
  const cli = createClientMux(sock);
  const agent = createAgentMux(agentSock);
  cleanups.push(() => {
    cli.close();
    agent.close();
  });
  return { cli, agent };
}

async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a rejection');
}

describe('handshake', () => {
  it('exchanges hello and helloOk when version and token match', async () => {
    // Given an agent that expects token "s3cret"
    const { cli, agent } = await pair();
    const accepted = acceptHello(agent, {
      token: 's3cret',
      agentVersion: '0.1.0',
      features: ['steal'],
      target: { pid: 42 },
      sessionId: () => 'sess-9',
    });
    // When the CLI says hello with that token
    const ok = await clientHello(cli, { token: 's3cret', client });
    // Then both sides agree on the session
    expect(ok).toEqual({
      type: 'helloOk',
      protocolVersion: PROTOCOL_VERSION,
      agentVersion: '0.1.0',
      sessionId: 'sess-9',
      features: ['steal'],
      target: { pid: 42 },
    });
    const { hello } = await accepted;
    expect(hello.client).toEqual(client);
    expect(hello.token).toBe('s3cret');
  });

  it('refuses a wrong token: the CLI gets a UserError with a hint, the agent closes', async () => {
    const { cli, agent } = await pair();
    const refused = rejection(acceptHello(agent, { token: 'right', agentVersion: '0.1.0', features: [] }));
    const err = await rejection(clientHello(cli, { token: 'wrong', client }));
    expect(err).toBeInstanceOf(UserError);
    expect(err.message).toBe('the agent refused this session token');
    expect((err as UserError).hint).toMatch(/another devop session/);
    expect((await refused).message).toMatch(/token/);
    expect(agent.closed).toBe(true);
  });

  it('reports a protocol version mismatch in either direction as a UserError naming both versions', async () => {
    // An old CLI talking to this agent
    const first = await pair();
    const refused = rejection(acceptHello(first.agent, { token: 't', agentVersion: '0.1.0', features: [] }));
    const answer = new Promise<AgentMessage>((r) => first.cli.once('message', r));
    first.cli.send({ ...CLIENT_SAMPLES.hello, token: 't', protocolVersion: PROTOCOL_VERSION + 1 });
    expect(await answer).toMatchObject({ type: 'error', code: 'version_mismatch' });
    expect((await refused).message).toMatch(/protocol version/);
    // This CLI talking to an agent of another version
    const second = await pair();
    second.agent.once('message', () => {
      second.agent.send({
        type: 'helloOk',
        protocolVersion: PROTOCOL_VERSION + 1,
        agentVersion: '9.0.0',
        sessionId: 's',
        features: [],
      });
    });
    const err = await rejection(clientHello(second.cli, { token: 't', client }));
    expect(err).toBeInstanceOf(UserError);
    expect(err.message).toBe(
      `the agent speaks protocol version ${PROTOCOL_VERSION + 1}, this devop speaks ${PROTOCOL_VERSION}`,
    );
    expect((err as UserError).hint).toMatch(/agent image/);
  });

  it('gives up with a UserError when the agent does not answer or the tunnel closes', async () => {
    const silent = await pair();
    const err = await rejection(clientHello(silent.cli, { token: 't', client, timeoutMs: 200 }));
    expect(err).toBeInstanceOf(UserError);
    expect(err.message).toMatch(/did not answer the handshake/);
    const closing = await pair();
    closing.agent.once('message', () => closing.agent.close('shutting down'));
    const closed = await rejection(clientHello(closing.cli, { token: 't', client }));
    expect(closed.message).toMatch(/closed during the handshake.*shutting down/);
  });

  it('works over a connection without writev (as a WebSocket stream is)', async () => {
    const [a, b] = duplexPair();
    const cli = createClientMux(a);
    const agent = createAgentMux(b);
    cleanups.push(() => {
      cli.close();
      agent.close();
    });
    agent.on('stream', (s) => s.pipe(s));
    const accepted = acceptHello(agent, { token: 't', agentVersion: '0.1.0', features: [] });
    await clientHello(cli, { token: 't', client });
    await accepted;
    const s = cli.openStream({ kind: 'outgoing', host: 'echo', port: 7 });
    const parts: Buffer[] = [];
    s.on('data', (d: Buffer) => parts.push(d));
    const ended = new Promise((r) => s.once('end', r));
    const payload = Buffer.alloc(1024 * 1024, 3);
    s.end(payload);
    await ended;
    expect(Buffer.concat(parts).equals(payload)).toBe(true);
  });

  it('checkHello names the problem without touching the connection', () => {
    expect(checkHello({ ...CLIENT_SAMPLES.hello, token: 'a' }, 'a')).toBeNull();
    expect(checkHello({ ...CLIENT_SAMPLES.hello, token: 'a' }, 'b')?.code).toBe('bad_token');
    expect(checkHello({ ...CLIENT_SAMPLES.hello, token: 'a', protocolVersion: 0 }, 'a')?.code).toBe('version_mismatch');
  });
});
