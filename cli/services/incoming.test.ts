// Incoming streams reach 127.0.0.1:<local port> over a real mux on a real socket pair: steal answers go back, mirror
// answers are dropped, an unreachable local port resets the stream.
import { createServer, type AddressInfo, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createAgentMux, createClientMux, type AgentMux, type ClientMux, type MuxStream } from '../../shared/mux.js';
import { until } from '../../testkit/protocol-fixtures.js';
import { socketPair } from '../../testkit/sockets.js';
import { incomingStreamHandler } from './incoming.js';

function collect(stream: MuxStream): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    stream.setEncoding('utf8').on('data', (t: string) => (text += t));
    stream.on('end', () => resolve(text));
    stream.on('error', reject);
  });
}

describe('incoming streams', () => {
  const cleanups: (() => void)[] = [];
  afterEach(() => {
    for (const c of cleanups.splice(0)) c();
  });

  async function setup(): Promise<{
    agent: AgentMux;
    client: ClientMux;
    local: Server;
    localPort: number;
    received: string[];
  }> {
    const ends: Array<() => void> = [];
    const [a, b] = await socketPair(ends);
    const agent = createAgentMux(a);
    const client = createClientMux(b);
    const received: string[] = [];
    const local = createServer((s) => {
      let text = '';
      s.setEncoding('utf8').on('data', (t: string) => (text += t));
      s.on('end', () => {
        received.push(text);
        s.end(`answer to ${text}`);
      });
    });
    await new Promise<void>((r) => local.listen(0, '127.0.0.1', r));
    cleanups.push(() => {
      agent.close();
      client.close();
      local.close();
      for (const end of ends) end();
    });
    return { agent, client, local, localPort: (local.address() as AddressInfo).port, received };
  }

  it('steal: the local command answers through the stream', async () => {
    // Given the CLI maps pod port 3000 to the local server
    const { agent, client, localPort, received } = await setup();
    client.on('stream', incomingStreamHandler({ ports: [{ remote: 3000, local: localPort }] }));
    // When the agent opens a stolen connection and sends a request
    const stream = agent.openStream({
      kind: 'incoming',
      port: 3000,
      mode: 'steal',
      remoteAddress: '10.0.0.9',
      remotePort: 5555,
    });
    const answer = collect(stream);
    stream.end('GET /x');
    // Then the local server got it and its answer came back
    expect(await answer).toBe('answer to GET /x');
    expect(received).toEqual(['GET /x']);
  });

  it('steal: a connection the agent leaves to the stream (connId) is reported open, then closed with its bytes', async () => {
    // Given a handler that reports connections, for a pod
    const { agent, client, localPort } = await setup();
    const events: unknown[] = [];
    const handle = incomingStreamHandler({
      ports: [{ remote: 3000, local: localPort }],
      onConnection: (event, pod) => events.push({ ...event, pod }),
    });
    client.on('stream', (stream: MuxStream) => handle(stream, 'pod-a'));
    // When the agent opens one stolen connection with an id and one without
    const open = { kind: 'incoming', port: 3000, mode: 'steal', remoteAddress: '10.0.0.9', remotePort: 5555 } as const;
    const reported = agent.openStream({ ...open, connId: '3000-7' });
    const answer = collect(reported);
    reported.end('GET /reported');
    expect(await answer).toBe('answer to GET /reported');
    const unreported = agent.openStream(open);
    const second = collect(unreported);
    unreported.end('GET /not');
    await second;
    // Then only the first was reported: opened, and closed with the client's bytes in and the answer's out
    const at = expect.any(Number);
    const event = { kind: 'connection', connId: '3000-7', port: 3000, remoteAddress: '10.0.0.9', remotePort: 5555 };
    await until(() => events.length === 2, 'the open and close events');
    const [bytesIn, bytesOut] = ['GET /reported'.length, 'answer to GET /reported'.length];
    expect(events).toEqual([
      { ...event, to: 'local', phase: 'open', at, pod: 'pod-a' },
      { ...event, to: 'local', phase: 'close', bytesIn, bytesOut, at, pod: 'pod-a' },
    ]);
  });

  it('steal: the local command may end its side first and still receive what the client sends after that', async () => {
    // Given a local command that greets and shuts down its sending side at once, then reads until the client ends
    const { agent, client } = await setup();
    const late: string[] = [];
    const greeter = createServer((s) => {
      let text = '';
      s.setEncoding('utf8').on('data', (t: string) => (text += t));
      s.on('end', () => late.push(text));
      s.end('hello, then only listening');
    });
    await new Promise<void>((r) => greeter.listen(0, '127.0.0.1', r));
    cleanups.push(() => greeter.close());
    client.on(
      'stream',
      incomingStreamHandler({ ports: [{ remote: 3000, local: (greeter.address() as AddressInfo).port }] }),
    );
    // When the agent's stream has the greeting and the local command's end, and only then sends its data and ends
    const stream = agent.openStream({
      kind: 'incoming',
      port: 3000,
      mode: 'steal',
      remoteAddress: '10.0.0.9',
      remotePort: 5555,
    });
    expect(await collect(stream)).toBe('hello, then only listening');
    stream.end('data sent after the local end');
    // Then the local command received it (a half-open connection, as the client's own is)
    await until(() => late.length === 1, 'the local command to read to the end');
    expect(late).toEqual(['data sent after the local end']);
  });

  it('mirror: the local command gets the bytes, its answer is dropped', async () => {
    const { agent, client, localPort, received } = await setup();
    client.on('stream', incomingStreamHandler({ ports: [{ remote: 3000, local: localPort }] }));
    const stream = agent.openStream({
      kind: 'incoming',
      port: 3000,
      mode: 'mirror',
      remoteAddress: '10.0.0.9',
      remotePort: 5555,
    });
    const answer = collect(stream);
    stream.end('copy of GET /y');
    expect(await answer).toBe('');
    expect(received).toEqual(['copy of GET /y']);
  });

  it("mirror copy with answers (a filtered mirror's HTTP/2 copy): the local answer comes back for the agent", async () => {
    // Given a mirror stream whose OPEN asks for the answers (the agent's h2c client needs the local SETTINGS)
    const { agent, client, localPort, received } = await setup();
    client.on('stream', incomingStreamHandler({ ports: [{ remote: 3000, local: localPort }] }));
    const stream = agent.openStream({
      kind: 'incoming',
      port: 3000,
      mode: 'mirror',
      remoteAddress: '10.0.0.9',
      remotePort: 5555,
      answers: true,
    });
    // When the copy is sent
    const answer = collect(stream);
    stream.end('copy of GET /h2');
    // Then the local command got it and its answer came back on the stream
    expect(await answer).toBe('answer to copy of GET /h2');
    expect(received).toEqual(['copy of GET /h2']);
  });

  it('resets the stream when nothing listens on the local port, and says so', async () => {
    const { agent, client, local, localPort } = await setup();
    await new Promise<void>((r) => local.close(() => r()));
    const errors: string[] = [];
    client.on(
      'stream',
      incomingStreamHandler({ ports: [{ remote: 3000, local: localPort }], onError: (m) => errors.push(m) }),
    );
    const stream = agent.openStream({
      kind: 'incoming',
      port: 3000,
      mode: 'steal',
      remoteAddress: '10.0.0.9',
      remotePort: 5555,
    });
    await expect(collect(stream)).rejects.toMatchObject({ reason: 'ECONNREFUSED' });
    expect(errors).toEqual([`local connection to 127.0.0.1:${localPort} failed: ECONNREFUSED`]);
  });
});
