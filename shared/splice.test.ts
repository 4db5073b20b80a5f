// The splice fast path (socket ↔ mux stream without the stream machinery) over real loopback sockets: byte-exact both
// ways with half-close, the bound a slow reader puts on the sender, the Writable fallback when credit runs out, reset.
import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { MAX_WINDOW, StreamResetError, createAgentMux, createClientMux, type MuxStream } from './mux.js';
import { MAX_DATA_FRAME } from './codec.js';
import { adoptOwnReads, connectOwnReads, MAX_BUFFER } from './own-reads.js';
import { spliceSocket } from './splice.js';
import { nextEvent, prng, until } from '../testkit/protocol-fixtures.js';
import { socketPair } from '../testkit/sockets.js';

/** The most a socket Node reads takes in one read (libuv's 64 KiB buffer). */
const NODE_READ = 64 * 1024;

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const fn of cleanups.splice(0)) fn();
});

/**
 * A loopback TCP pair [connecting end, accepted end] whose ends stay writable after the peer's FIN, so that half-close
 * can be observed; `own` names the end that reads into its own buffers (shared/own-reads.ts), as the CLI's do.
 */
async function halfOpenPair(own?: 'connecting' | 'accepted'): Promise<[net.Socket, net.Socket]> {
  if (!own) return socketPair(cleanups, { allowHalfOpen: true });
  const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: own === 'accepted' });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const accepted = new Promise<net.Socket>((r) => server.once('connection', r));
  const options = { port: (server.address() as net.AddressInfo).port, host: '127.0.0.1', allowHalfOpen: true };
  const client = own === 'connecting' ? connectOwnReads(options) : net.connect(options);
  const raw = await accepted;
  const serverSide = own === 'accepted' ? adoptOwnReads(raw, { allowHalfOpen: true }) : raw;
  await until(() => !client.connecting, 'the connection');
  server.close();
  cleanups.push(() => {
    client.destroy();
    serverSide.destroy();
  });
  return [client, serverSide];
}

/**
 * `count` agent streams and the client's ends of them, over one real connection (`agentConn`: the agent's socket);
 * the agent opens them, as for stolen connections.
 */
async function streamPairs(
  count: number,
): Promise<{ agentStreams: MuxStream[]; clientStreams: MuxStream[]; agentConn: net.Socket }> {
  const [a, b] = await socketPair(cleanups);
  const client = createClientMux(a);
  const agent = createAgentMux(b);
  cleanups.push(() => {
    client.close('test done');
    agent.close('test done');
  });
  const clientStreams: MuxStream[] = [];
  client.on('stream', (stream: MuxStream) => clientStreams.push(stream));
  const agentStreams = Array.from({ length: count }, (_, i) =>
    agent.openStream({ kind: 'incoming', port: 80, mode: 'steal', remoteAddress: '10.0.0.9', remotePort: 5555 + i }),
  );
  await until(() => clientStreams.length === count, 'the streams to open');
  return { agentStreams, clientStreams, agentConn: b };
}

/** One agent stream and the client's end of it. */
async function streamPair(): Promise<{ agentStream: MuxStream; clientStream: MuxStream }> {
  const { agentStreams, clientStreams } = await streamPairs(1);
  return { agentStream: agentStreams[0], clientStream: clientStreams[0] };
}

function collect(socket: net.Socket): { bytes: () => Buffer; ended: Promise<void> } {
  const parts: Buffer[] = [];
  socket.on('data', (d: Buffer) => parts.push(d));
  return { bytes: () => Buffer.concat(parts), ended: new Promise((r) => socket.once('end', r)) };
}

/** Writes `data` in chunks of random sizes (1 byte to 200 KiB), waiting for drain, then ends. */
async function writeInPieces(socket: net.Socket, data: Buffer, seed: number): Promise<void> {
  const rand = prng(seed);
  for (let off = 0; off < data.length; ) {
    const n = Math.min(data.length - off, 1 + Math.floor(rand() * 200 * 1024));
    if (!socket.write(data.subarray(off, off + n))) await nextEvent(socket, 'drain');
    off += n;
  }
  socket.end();
}

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

describe.each([
  ['read by Node', false],
  ['with their own reads', true],
])('spliceSocket, sockets %s', (_, own) => {
  const spliced = (end: 'connecting' | 'accepted'): 'connecting' | 'accepted' | undefined => (own ? end : undefined);

  it('carries bytes both ways, byte-exact and in order, and passes each half-close on', async () => {
    // Given a client connection spliced to an agent stream, and the stream's other end spliced to a local command
    const { agentStream, clientStream } = await streamPair();
    const [clientApp, clientSide] = await halfOpenPair(spliced('accepted'));
    const [localSide, localApp] = await halfOpenPair(spliced('connecting'));
    clientSide.pause(); // as the CLI's port-forward holds a client while it dials: the splice must start it flowing
    spliceSocket(agentStream, clientSide);
    spliceSocket(clientStream, localSide);
    const atLocal = collect(localApp);
    const atClient = collect(clientApp);
    // When the client sends 6 MiB and ends, and only then the local command answers 5 MiB and ends
    const request = randomBytes(6 * 1024 * 1024);
    const answer = randomBytes(5 * 1024 * 1024);
    await writeInPieces(clientApp, request, 1);
    await atLocal.ended;
    await writeInPieces(localApp, answer, 2);
    await atClient.ended;
    // Then each side received exactly what the other sent, and the streams closed on both ends
    expect(sha(atLocal.bytes())).toBe(sha(request));
    expect(sha(atClient.bytes())).toBe(sha(answer));
    await until(() => agentStream.destroyed && clientStream.destroyed, 'both stream ends to close');
  });

  it('holds the sender to one window while the socket it delivers to is not read, then delivers everything', async () => {
    // Given an agent stream whose client end is spliced to a local command that does not read
    const { agentStream, clientStream } = await streamPair();
    const [localSide, localApp] = await halfOpenPair(spliced('connecting'));
    spliceSocket(clientStream, localSide);
    localApp.pause();
    // When the agent side writes more than the largest window and the kernel's buffers can hold (the window may grow
    // to MAX_WINDOW while the kernel takes bytes fast: on a loaded machine a slow first round trip makes a burst look
    // like a long path's, and with 32 MiB the sender then never ran out of credit)
    const data = randomBytes(2 * MAX_WINDOW);
    const sending = (async () => {
      for (let off = 0; off < data.length; off += 256 * 1024) {
        if (!agentStream.write(data.subarray(off, off + 256 * 1024))) await nextEvent(agentStream, 'drain');
      }
      agentStream.end();
    })();
    // Then the sender stops at its credit and the local socket buffers at most one window in user space (the window
    // may have grown while the kernel's buffers took bytes at memory speed; it stops growing once nothing is taken)
    await until(
      () => agentStream.sendCredit === 0 && agentStream.writableLength > 0,
      'the sender to run out of credit',
    );
    let [stable, last] = [0, -1];
    await until(() => {
      stable = localSide.writableLength === last && agentStream.sendCredit === 0 ? stable + 1 : 0;
      last = localSide.writableLength;
      return stable >= 20;
    }, 'the local socket to stop taking bytes, the sender out of credit');
    const window = clientStream.receiveWindow;
    let buffered = 0;
    for (let i = 0; i < 20; i++) {
      buffered = Math.max(buffered, localSide.writableLength);
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(agentStream.sendCredit).toBe(0);
    expect(clientStream.receiveWindow).toBe(window);
    expect(buffered).toBeLessThanOrEqual(window + MAX_DATA_FRAME);
    // And once the local command reads, every byte arrives in order
    const atLocal = collect(localApp);
    localApp.resume();
    await Promise.all([sending, atLocal.ended]);
    expect(sha(atLocal.bytes())).toBe(sha(data));
  });

  it('keeps the order when the peer has not granted credit yet: the rest waits in the Writable side', async () => {
    // Given a client connection spliced to an agent stream whose client end does not read yet
    const { agentStream, clientStream } = await streamPair();
    const [clientApp, clientSide] = await halfOpenPair(spliced('accepted'));
    spliceSocket(agentStream, clientSide);
    clientStream.pause();
    // When the client sends 3 MiB (twelve windows) in small and large pieces
    const data = randomBytes(3 * 1024 * 1024);
    const sending = writeInPieces(clientApp, data, 3);
    // Then the agent stream runs out of credit and the client socket stops reading, holding the rest (what it read
    // and could not send is at most one read: 64 KiB from Node, MAX_BUFFER of its own, plus the Writable side's bound;
    // a socket Node reads also reads ahead into its Readable buffer after pause(), until a read crosses its high-water
    // mark, which a busy machine reaches when several reads are ready at once)
    await until(() => agentStream.sendCredit === 0, 'the sender to run out of credit');
    for (let stable = 0, last = -1; stable < 10; ) {
      await new Promise((r) => setTimeout(r, 10));
      stable = clientSide.bytesRead === last ? stable + 1 : 0;
      last = clientSide.bytesRead;
    }
    expect(clientSide.bytesRead).toBeLessThan(data.length);
    expect(clientSide.bytesRead - agentStream.bytesSent).toBeLessThanOrEqual(
      own ? MAX_BUFFER : NODE_READ + agentStream.writableHighWaterMark + clientSide.readableHighWaterMark + NODE_READ,
    );
    // And once the client end reads, all bytes arrive, in order, followed by the end
    const parts: Buffer[] = [];
    clientStream.on('data', (d: Buffer) => parts.push(d));
    const ended = nextEvent(clientStream, 'end');
    clientStream.resume();
    await Promise.all([sending, ended]);
    expect(sha(Buffer.concat(parts))).toBe(sha(data));
  });

  it('carries 16 connections intact while the tunnel backs up and drains again', async () => {
    // Given 16 local connections spliced to their streams, and a tunnel whose agent end stops reading for a while
    // (what the connection has not written yet must not be read into again)
    const { agentStreams, clientStreams, agentConn } = await streamPairs(16);
    const apps: net.Socket[] = [];
    for (const stream of clientStreams) {
      const [localSide, localApp] = await halfOpenPair(spliced('connecting'));
      spliceSocket(stream, localSide);
      apps.push(localApp);
    }
    const received = agentStreams.map((stream) => {
      const parts: Buffer[] = [];
      stream.on('data', (d: Buffer) => parts.push(d));
      return { bytes: () => Buffer.concat(parts), ended: nextEvent(stream, 'end') };
    });
    agentConn.pause();
    // When each local command answers 2 MiB and ends, and the agent end reads again 200 ms later
    const answers = apps.map(() => randomBytes(2 * 1024 * 1024));
    const sending = Promise.all(apps.map((app, i) => writeInPieces(app, answers[i], 10 + i)));
    await new Promise((r) => setTimeout(r, 200));
    agentConn.resume();
    await Promise.all([sending, ...received.map((r) => r.ended)]);
    // Then every stream carried its own bytes, in order
    for (const [i, r] of received.entries()) expect(sha(r.bytes())).toBe(sha(answers[i]));
  });

  it("passes the peer's reset to the caller as an error, after the bytes that came before it", async () => {
    // Given a spliced agent stream that has delivered some bytes to its socket
    const { agentStream, clientStream } = await streamPair();
    const [clientApp, clientSide] = await halfOpenPair(spliced('accepted'));
    spliceSocket(agentStream, clientSide);
    const atClient = collect(clientApp);
    clientStream.write(Buffer.from('partial answer'));
    await until(() => atClient.bytes().length === 14, 'the first bytes');
    // When the client end resets the stream
    const failed = nextEvent<Error>(agentStream, 'error');
    clientStream.reset('local command crashed');
    // Then the agent stream errors with the reason (the caller tears the socket down), and the bytes were not altered
    const err = await failed;
    expect(err).toBeInstanceOf(StreamResetError);
    expect((err as StreamResetError).reason).toBe('local command crashed');
    expect(atClient.bytes().toString()).toBe('partial answer');
  });
});
