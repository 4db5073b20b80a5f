// Tests of the mux dialer against a real Mux pair over a loopback socket, with an agent side that follows the agent's
// conventions (accept once connected / opened, reset with the errno, dnsResult by id): success and every failure
// mapping.
import { connect as netConnect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAgentMux, createClientMux, type AgentMux, type ClientMux, type MuxStream } from '../../shared/mux.js';
import { startTcpEcho, type Closable } from '../../testkit/outgoing.js';
import { DialError } from './dialer.js';
import { createMuxDialer, type DialledStream } from './mux-dialer.js';
import { startOutgoingProxy } from './proxy.js';
import { socketPair } from '../../testkit/sockets.js';

/** An agent stand-in: knows echo.default (→ 127.0.0.1) and one file. */
function serveAgentSide(mux: AgentMux): void {
  const names: Record<string, string> = { 'echo.default': '127.0.0.1' };
  mux.on('message', (msg) => {
    if (msg.type !== 'dnsResolve') return;
    const address = names[msg.name];
    if (address) mux.send({ type: 'dnsResult', id: msg.id, addresses: [{ address, family: 4 }] });
    else if (msg.name === 'flaky.default')
      mux.send({
        type: 'dnsResult',
        id: msg.id,
        addresses: [],
        error: { code: 'ESERVFAIL', message: 'queryA ESERVFAIL flaky.default' },
      });
    else
      mux.send({
        type: 'dnsResult',
        id: msg.id,
        addresses: [],
        error: { code: 'ENOTFOUND', message: `queryA ENOTFOUND ${msg.name}` },
      });
  });
  mux.on('stream', (stream) => {
    stream.on('error', () => undefined);
    const open = stream.open;
    if (open.kind === 'file') {
      if (open.path === '/etc/pod-only.txt') {
        stream.accept({ size: 11 });
        stream.end('pod content');
      } else stream.reset(`ENOENT: ${open.path}: no such file or directory`);
      return;
    }
    if (open.kind !== 'outgoing') return;
    if (open.host === 'firstbytes.default') {
      // A peer that connects only once the client's first bytes are here: an early connect's bytes come with it
      stream.once('readable', () => connectAndAccept(stream, '127.0.0.1', open.port));
      return;
    }
    const address = names[open.host];
    if (open.host === 'dnsdown.default') {
      // What the agent says when the pod's DNS server itself refuses
      stream.reset(`ECONNREFUSED: cannot resolve ${open.host} in the pod`);
      return;
    }
    if (!address) {
      stream.reset(`ENOTFOUND: cannot resolve ${open.host} in the pod`);
      return;
    }
    connectAndAccept(stream, address, open.port);
  });
}

/** What the agent does for an outgoing stream: connect, then accept with the pod-side addresses and join both ways. */
function connectAndAccept(stream: MuxStream, address: string, port: number): void {
  const socket = netConnect({ host: address, port });
  socket.once('error', (err: NodeJS.ErrnoException) => stream.reset(`${err.code}: ${address}:${port}: ${err.message}`));
  socket.once('connect', () => {
    stream.accept({
      remoteAddress: socket.remoteAddress,
      remotePort: socket.remotePort,
      localAddress: '10.1.2.3',
      localPort: 40000,
    });
    socket.pipe(stream);
    stream.pipe(socket);
  });
}

describe('mux dialer (real Mux, agent conventions)', () => {
  const closers: (() => Promise<void>)[] = [];
  let clientMux: ClientMux;
  let agentMux: AgentMux;
  let echo: Closable;

  beforeAll(async () => {
    echo = await startTcpEcho();
    const ends: Array<() => void> = [];
    const [clientEnd, agentEnd] = await socketPair(ends);
    for (const socket of [clientEnd, agentEnd]) socket.on('error', () => undefined);
    closers.push(async () => {
      for (const end of ends) end();
    });
    clientMux = createClientMux(clientEnd);
    agentMux = createAgentMux(agentEnd);
    serveAgentSide(agentMux);
  });
  afterAll(async () => {
    clientMux?.close();
    agentMux?.close();
    for (const close of closers) await close();
    await echo.close();
  });

  it('connects through an outgoing stream and carries the pod-side addresses of the accept', async () => {
    const dialer = createMuxDialer(clientMux);
    const stream = (await dialer.connect('echo.default', echo.port)) as DialledStream;
    expect(stream).toMatchObject({
      remoteAddress: '127.0.0.1',
      remotePort: echo.port,
      localAddress: '10.1.2.3',
      localPort: 40000,
    });
    const back = new Promise<string>((resolve) => {
      let got = '';
      stream.on('data', (chunk: Buffer) => (got += chunk.toString()));
      stream.on('end', () => resolve(got));
    });
    stream.end('round trip');
    expect(await back).toBe('round trip');
  });

  it('maps resets to DialError codes: ENOTFOUND, ECONNREFUSED, ENOENT, EAI_AGAIN', async () => {
    const dialer = createMuxDialer(clientMux);
    await expect(dialer.connect('nosuch.default', 80)).rejects.toMatchObject({ name: 'DialError', code: 'ENOTFOUND' });
    await expect(dialer.connect('echo.default', 9)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    await expect(dialer.readFile('/etc/missing')).rejects.toMatchObject({ code: 'ENOENT' });
    // A DNS server that refuses is a name failure to retry, not a refused connection to the destination
    await expect(dialer.connect('dnsdown.default', 80)).rejects.toMatchObject({ code: 'EAI_AGAIN' });
  });

  it('an early connect resolves before the agent accepted, and its first bytes travel with the connect', async () => {
    // Given a peer that accepts only after the client's first bytes arrived (a connect that waited would never send)
    const dialer = createMuxDialer(clientMux);
    const stream = (await dialer.connect('firstbytes.default', echo.port, { early: true })) as MuxStream;
    expect(stream.acceptedInfo).toBeNull();
    const back = new Promise<string>((resolve) => {
      let got = '';
      stream.on('data', (chunk: Buffer) => (got += chunk.toString()));
      stream.on('end', () => resolve(got));
    });
    // When the caller writes at once
    stream.end('sent before the accept');
    // Then the bytes went out with the connect, and the answer comes back through the connection
    expect(await back).toBe('sent before the accept');
    expect(stream.acceptedInfo).toMatchObject({ localAddress: '10.1.2.3' });
  });

  it('an early connect that fails emits dialError with the errno, and the stream errors', async () => {
    const dialer = createMuxDialer(clientMux);
    for (const [host, port, code] of [
      ['nosuch.default', 80, 'ENOTFOUND'],
      ['echo.default', 9, 'ECONNREFUSED'],
    ] as const) {
      const stream = await dialer.connect(host, port, { early: true });
      const dialError = new Promise<unknown>((resolve) => stream.once('dialError', resolve));
      const streamError = new Promise<unknown>((resolve) => stream.once('error', resolve));
      expect(await dialError, host).toMatchObject({ name: 'DialError', code });
      expect(await streamError, host).toBeInstanceOf(Error);
    }
  });

  it('reads a file stream to the end', async () => {
    const dialer = createMuxDialer(clientMux);
    expect((await dialer.readFile('/etc/pod-only.txt')).toString()).toBe('pod content');
  });

  it('resolves names with dnsResolve; unknown names are ENOTFOUND, server failures EAI_AGAIN', async () => {
    const dialer = createMuxDialer(clientMux);
    expect(await dialer.lookup('echo.default')).toEqual([{ address: '127.0.0.1', family: 4 }]);
    await expect(dialer.lookup('nosuch.default')).rejects.toMatchObject({ code: 'ENOTFOUND' });
    await expect(dialer.lookup('flaky.default')).rejects.toMatchObject({ code: 'EAI_AGAIN' });
  });

  it('serves the local proxy: SOCKS clients get the pod-side bound address', async () => {
    const proxy = await startOutgoingProxy({ dialer: createMuxDialer(clientMux), secret: 'mux-test' });
    try {
      const socket = netConnect({ port: proxy.port, host: '127.0.0.1' });
      const name = Buffer.from('echo.default');
      // username/password (RFC 1929) devop:mux-test, then CONNECT echo.default
      socket.write(
        Buffer.concat([
          Buffer.from([5, 1, 2, 1, 5]),
          Buffer.from('devop'),
          Buffer.from([8]),
          Buffer.from('mux-test'),
          Buffer.from([5, 1, 0, 3, name.length]),
          name,
          Buffer.from([echo.port >> 8, echo.port & 0xff]),
        ]),
      );
      const reply = await new Promise<Buffer>((resolve) => {
        let got = Buffer.alloc(0);
        socket.on('data', (chunk: Buffer) => {
          got = Buffer.concat([got, chunk]);
          if (got.length >= 14) resolve(got);
        });
      });
      socket.destroy();
      // 10.1.2.3:40000 is what the agent said its end of the connection is
      expect([...reply.subarray(4, 14)]).toEqual([5, 0, 0, 1, 10, 1, 2, 3, 40000 >> 8, 40000 & 0xff]);
    } finally {
      await proxy.close();
    }
  });

  it('fails fast with ENOTCONN once the tunnel is closed', async () => {
    // Given a client mux whose connection is closed
    const ends: Array<() => void> = [];
    const [clientEnd, agentEnd] = await socketPair(ends);
    for (const socket of [clientEnd, agentEnd]) socket.on('error', () => undefined);
    closers.push(async () => {
      for (const end of ends) end();
    });
    const mux = createClientMux(clientEnd);
    const dialer = createMuxDialer(mux);
    mux.close('test over');
    const err = await dialer.connect('echo.default', 80).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DialError);
    expect((err as DialError).code).toBe('ENOTCONN');
    await expect(dialer.lookup('echo.default')).rejects.toMatchObject({ code: 'ENOTCONN' });
  });
});
