// Mux over real TCP sockets: control messages, when frames are written, 1 000 concurrent byte-exact streams in both
// directions, flow control with a stalled reader, reset, half-close and connection loss. Bad input from the peer:
// mux-errors.test.ts.
import { createHash } from 'node:crypto';
import type net from 'node:net';
import { Duplex } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import {
  INITIAL_WINDOW,
  MuxClosedError,
  StreamResetError,
  createAgentMux,
  createClientMux,
  type AgentMux,
  type ClientMux,
  type MuxStream,
} from './mux.js';
import { FrameDecoder, FrameKind, encodeFrame } from './codec.js';
import type { ClientMessage, AgentMessage } from './protocol.js';
import { AGENT_SAMPLES, CLIENT_SAMPLES, nextEvent, prng, until } from '../testkit/protocol-fixtures.js';
import { socketPair } from '../testkit/sockets.js';

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const fn of cleanups.splice(0)) fn();
});

async function muxPair(
  window?: number,
): Promise<{ client: ClientMux; agent: AgentMux; sockets: [net.Socket, net.Socket] }> {
  const sockets = await socketPair(cleanups);
  const client = createClientMux(sockets[0], { window });
  const agent = createAgentMux(sockets[1], { window });
  cleanups.push(() => {
    client.close('test done');
    agent.close('test done');
  });
  return { client, agent, sockets };
}

const errorOf = (stream: NodeJS.EventEmitter): Promise<Error> => new Promise((r) => stream.once('error', r));

function readAll(stream: MuxStream): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    stream.on('data', (d: Buffer) => parts.push(d));
    stream.on('end', () => resolve(Buffer.concat(parts)));
    stream.on('error', reject);
  });
}

describe('mux control messages', () => {
  it('carries every message type in both directions, validated', async () => {
    // Given a connected client and agent
    const { client, agent } = await muxPair();
    const atAgent: ClientMessage[] = [];
    const atClient: AgentMessage[] = [];
    agent.on('message', (m) => atAgent.push(m));
    client.on('message', (m) => atClient.push(m));
    // When each side sends one message of every type
    for (const m of Object.values(CLIENT_SAMPLES)) client.send(m);
    for (const m of Object.values(AGENT_SAMPLES)) agent.send(m);
    // Then the peer receives them all, in order and equal
    await until(
      () =>
        atAgent.length === Object.keys(CLIENT_SAMPLES).length && atClient.length === Object.keys(AGENT_SAMPLES).length,
      'messages',
    );
    expect(atAgent).toEqual(Object.values(CLIENT_SAMPLES));
    expect(atClient).toEqual(Object.values(AGENT_SAMPLES));
  });

  it('refuses to send an invalid message (a bug on this side) and reports false once closed', async () => {
    const { client } = await muxPair();
    expect(() => client.send({ type: 'subscribe', id: 'x', port: 0 } as unknown as ClientMessage)).toThrow(
      /invalid client message/,
    );
    client.close('done');
    expect(client.send(CLIENT_SAMPLES.ping)).toBe(false);
  });
});

/** An agent mux on an in-memory connection that records each write; the test pushes what comes in (conn.push). */
function recordingAgentMux(): { agent: ReturnType<typeof createAgentMux>; conn: Duplex; writes: Buffer[] } {
  const writes: Buffer[] = [];
  const conn = new Duplex({
    read() {
      // Data is pushed by the test, never pulled.
    },
    write(chunk: Buffer, _enc, cb) {
      writes.push(chunk);
      cb();
    },
  });
  const agent = createAgentMux(conn);
  cleanups.push(() => agent.close('test done'));
  return { agent, conn, writes };
}

describe('mux writing', () => {
  it('writes a frame with nothing queued before it at once, before the event loop moves on', async () => {
    // Given a connected pair and a stream
    const { client, sockets } = await muxPair();
    const stream = client.openStream({ kind: 'outgoing', host: 'example.test', port: 80 });
    await new Promise((r) => setImmediate(r));
    // When a control message and stream bytes are sent
    const before = sockets[0].bytesWritten;
    client.send({ type: 'ping', id: 1, sentAt: 1 });
    const afterMessage = sockets[0].bytesWritten;
    stream.write(Buffer.from('GET / HTTP/1.1\r\n\r\n'));
    // Then each is handed to the socket within the call (a stolen request leaves before anything else runs)
    expect(afterMessage).toBeGreaterThan(before);
    expect(sockets[0].bytesWritten).toBeGreaterThan(afterMessage);
  });

  it('sends what the frames of one incoming chunk make in one write', async () => {
    // Given an agent mux on a connection that records each write, accepting every stream opened to it
    const { agent, conn, writes } = recordingAgentMux();
    agent.on('stream', (s) => s.accept());
    // When one chunk carries five OPEN frames
    const opens = [1, 3, 5, 7, 9].map((id) =>
      encodeFrame(FrameKind.OPEN, id, Buffer.from(JSON.stringify({ kind: 'outgoing', host: 'h', port: 1 }))),
    );
    conn.push(Buffer.concat(opens));
    await until(() => writes.length > 0, 'the answers');
    await new Promise((r) => setImmediate(r));
    // Then the five ACCEPTs left together, in one write
    expect(writes).toHaveLength(1);
    const kinds: number[] = [];
    new FrameDecoder((kind) => kinds.push(kind)).push(writes[0]);
    expect(kinds).toEqual([FrameKind.ACCEPT, FrameKind.ACCEPT, FrameKind.ACCEPT, FrameKind.ACCEPT, FrameKind.ACCEPT]);
  });

  it('sends the frames made in together() in one write, when it returns; a frame after it leaves at once', async () => {
    // Given an agent mux on a connection that records each write
    const { agent, writes } = recordingAgentMux();
    // When a stream is opened and announced inside together(), with a nested together() in it
    const incoming = { kind: 'incoming', port: 80, mode: 'steal', remoteAddress: '10.0.0.9', remotePort: 5 } as const;
    const stream = agent.together(() => {
      const opened = agent.openStream(incoming);
      expect(writes).toHaveLength(0); // held until together() returns
      agent.together(() => agent.send({ type: 'log', level: 'info', message: 'opened' }));
      expect(writes).toHaveLength(0);
      return opened;
    });
    // Then OPEN and the message left in one write, before together() returned
    expect(writes).toHaveLength(1);
    const kinds: number[] = [];
    new FrameDecoder((kind) => kinds.push(kind)).push(writes[0]);
    expect(kinds).toEqual([FrameKind.OPEN, FrameKind.CONTROL]);
    // And the stream's bytes afterwards are written at once, as any frame with nothing queued before it
    stream.write(Buffer.from('GET / HTTP/1.1\r\n\r\n'));
    expect(writes).toHaveLength(2);
    // And a throw inside together() still sends what was made before it
    expect(() =>
      agent.together(() => {
        agent.send({ type: 'log', level: 'info', message: 'before the throw' });
        throw new Error('boom');
      }),
    ).toThrow('boom');
    expect(writes).toHaveLength(3);
  });

  it('sends the frames of later callbacks in one event-loop turn together, after the first callback wrote at once', async () => {
    // Given an agent mux on a connection that records each write, with three stolen connections' streams open
    const { agent, writes } = recordingAgentMux();
    const incoming = { kind: 'incoming', port: 80, mode: 'steal', remoteAddress: '10.0.0.9', remotePort: 5 } as const;
    const streams = [1, 2, 3].map(() => agent.openStream(incoming));
    await new Promise((r) => setImmediate(r));
    writes.length = 0;
    // When three callbacks of one turn each send an answer (timers due together stand for the reads of three sockets
    // that one poll delivers)
    const seen: number[] = [];
    await new Promise<void>((resolve) => {
      for (const [i, stream] of streams.entries()) {
        setTimeout(() => {
          stream.write(Buffer.from(`HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n${i}`));
          seen.push(writes.length);
          if (i === streams.length - 1) setImmediate(resolve);
        }, 0);
      }
    });
    // Then the first answer was written within its callback, the other two waited for the end of the turn
    expect(seen).toEqual([1, 1, 1]);
    // And they left together, in one write
    expect(writes).toHaveLength(2);
    const frames: Array<[number, number]> = [];
    new FrameDecoder((kind, id) => frames.push([kind, id])).push(writes[1]);
    expect(frames).toEqual([
      [FrameKind.DATA, streams[1].id],
      [FrameKind.DATA, streams[2].id],
    ]);
  });
});

describe('mux streams', () => {
  it('carries 1 000 concurrent streams of 1 B – 4 MiB in both directions byte-exact', async () => {
    // Given a pool of random bytes; each stream sends a different slice of it each way (so mixed-up streams differ)
    const { client, agent } = await muxPair();
    const rand = prng(1000);
    const MAX = 4 * 1024 * 1024;
    const pool = Buffer.alloc(MAX + 65_536);
    for (let i = 0; i < pool.length; i += 4) pool.writeUInt32LE(Math.floor(rand() * 2 ** 32), i);
    // Sizes are log-uniform in [1 B, 4 MiB] so that every order of magnitude occurs; the extremes are included.
    const size = (i: number): number =>
      i === 0 ? 1 : i === 1 ? MAX : Math.max(1, Math.min(MAX, Math.floor(Math.exp(rand() * Math.log(MAX)))));
    const plan = Array.from({ length: 1000 }, (_, i) => ({
      out: { offset: Math.floor(rand() * 65_536), size: size(i) },
      back: { offset: Math.floor(rand() * 65_536), size: size(i + 2) },
    }));
    const slice = (p: { offset: number; size: number }): Buffer => pool.subarray(p.offset, p.offset + p.size);
    const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

    /** Writes `data` in random-sized pieces with backpressure, then half-closes. */
    const writeAll = (stream: MuxStream, data: Buffer, seed: number): void => {
      const r = prng(seed);
      let off = 0;
      const go = (): void => {
        while (off < data.length) {
          const n = Math.min(data.length - off, 1 + Math.floor(r() * 128 * 1024));
          const ok = stream.write(data.subarray(off, off + n));
          off += n;
          if (!ok) {
            stream.once('drain', go);
            return;
          }
        }
        stream.end();
      };
      go();
    };
    /** Hashes what arrives; resolves with the digest and length at end. */
    const digest = (stream: MuxStream): Promise<{ sha: string; length: number }> =>
      new Promise((resolve, reject) => {
        const h = createHash('sha256');
        let length = 0;
        stream.on('data', (d: Buffer) => {
          h.update(d);
          length += d.length;
        });
        stream.on('end', () => resolve({ sha: h.digest('hex'), length }));
        stream.on('error', reject);
      });

    // The acceptor of stream #i (named in its header) checks the opener's bytes and sends its own back.
    const received: Array<Promise<void>> = [];
    const accept = (stream: MuxStream, index: number): void => {
      const p = plan[index];
      received.push(
        digest(stream).then((got) => {
          expect(got).toEqual({ sha: sha(slice(p.out)), length: p.out.size });
        }),
      );
      writeAll(stream, slice(p.back), index + 7);
    };
    agent.on('stream', (s) => accept(s, Number((s.open as { host: string }).host.slice(1))));
    client.on('stream', (s) => accept(s, Number((s.open as { remoteAddress: string }).remoteAddress.slice(1))));

    // When half the streams are opened by the client and half by the agent, all at once
    const opened = plan.map((p, i) => {
      const stream =
        i % 2 === 0
          ? client.openStream({ kind: 'outgoing', host: `s${i}`, port: 80 })
          : agent.openStream({ kind: 'incoming', port: 3000, mode: 'steal', remoteAddress: `s${i}`, remotePort: 1 });
      const back = digest(stream);
      writeAll(stream, slice(p.out), i);
      return back.then((got) => expect(got).toEqual({ sha: sha(slice(p.back)), length: p.back.size }));
    });

    // Then every byte arrives, in order, on the right stream, both ways, and every stream is released afterwards
    await Promise.all(opened);
    await until(() => received.length === 1000, 'all streams accepted');
    await Promise.all(received);
    await until(() => client.streamCount === 0 && agent.streamCount === 0, 'streams released');
  }, 120_000);

  it.each([INITIAL_WINDOW, 1024 * 1024])(
    'leaves a writer whose reader stalls with at most one window (%i B) buffered on each side',
    async (window) => {
      // Given a stream whose receiving end does not read
      const { client, agent, sockets } = await muxPair(window);
      const incoming = nextEvent<MuxStream>(agent, 'stream');
      const stream = client.openStream({ kind: 'outgoing', host: 'slow', port: 1 });
      const reader = await incoming;
      const total = 16 * 1024 * 1024;
      const chunk = Buffer.alloc(32 * 1024, 1);
      let accepted = 0;
      const pump = (): void => {
        while (accepted < total) {
          accepted += chunk.length;
          if (!stream.write(chunk)) {
            stream.once('drain', pump);
            return;
          }
        }
        stream.end();
      };
      // When the writer writes as fast as backpressure lets it
      pump();
      await until(() => stream.sendCredit === 0 && reader.readableLength === window, 'the window to fill');
      // Then, once it stops, the receiver holds one window and the sender holds at most one window
      let stable = 0;
      let last = -1;
      while (stable < 20) {
        await new Promise((r) => setTimeout(r, 10));
        const now = accepted + reader.readableLength + stream.writableLength + sockets[0].writableLength;
        stable = now === last ? stable + 1 : 0;
        last = now;
      }
      const inFlight = accepted - reader.readableLength; // accepted by write() but not delivered to the reader's buffer
      expect(reader.readableLength).toBe(window);
      expect(stream.writableLength).toBeLessThanOrEqual(window);
      expect(inFlight).toBeLessThanOrEqual(window);
      expect(accepted).toBeLessThan(total);
      console.log(
        `stalled reader: receiver buffers ${reader.readableLength} B, sender buffers ${stream.writableLength} B ` +
          `(window ${window} B)`,
      );
      // And when the reader resumes, everything arrives
      const rest = readAll(reader);
      const all = await rest;
      expect(all.length).toBe(total);
    },
  );

  it('keeps data flowing to a reader that takes small bites with read(n)', async () => {
    // Given a 2 MiB transfer (8 windows) and a reader that reads 1000 bytes per call
    const { client, agent } = await muxPair();
    const incoming = nextEvent<MuxStream>(agent, 'stream');
    const data = Buffer.from(Array.from({ length: 2 * 1024 * 1024 }, (_, i) => (i * 7 + (i >> 11)) & 0xff));
    const stream = client.openStream({ kind: 'file', path: '/big' });
    stream.end(data);
    const reader = await incoming;
    const parts: Buffer[] = [];
    let ended = false;
    reader.once('end', () => {
      ended = true;
    });
    // One small read per event-loop turn (a reader that never drains its buffer in one go)
    const done = new Promise<void>((resolve) => {
      const bite = (): void => {
        const piece = reader.read(1000) as Buffer | null;
        if (piece) parts.push(piece);
        else if (reader.readableLength > 0) parts.push(reader.read() as Buffer);
        if (ended) resolve();
        else setImmediate(bite);
      };
      bite();
    });
    // When it keeps reading; Then every byte arrives in order
    await done;
    expect(Buffer.concat(parts).equals(data)).toBe(true);
  });

  it('resets: the peer sees the reason, the connection and other streams go on', async () => {
    // Given an open stream from the client
    const { client, agent } = await muxPair();
    agent.on('stream', (s) => {
      if ((s.open as { host: string }).host === 'refused') s.reset('ECONNREFUSED');
      else {
        s.accept({ remotePort: 80 });
        s.pipe(s);
      }
    });
    const refused = client.openStream({ kind: 'outgoing', host: 'refused', port: 80 });
    // When the agent resets it
    const err = await errorOf(refused);
    // Then the client's stream errors with the reason, and a new stream on the same connection works
    expect(err).toBeInstanceOf(StreamResetError);
    expect((err as StreamResetError).reason).toBe('ECONNREFUSED');
    const echo = client.openStream({ kind: 'outgoing', host: 'echo', port: 80 });
    const accepted = nextEvent(echo, 'accepted');
    echo.end('still alive');
    expect(await accepted).toEqual({ remotePort: 80 });
    expect((await readAll(echo)).toString()).toBe('still alive');
  });

  it('resets from the opener mid-transfer and via destroy(err)', async () => {
    const { client, agent } = await muxPair();
    const streams: MuxStream[] = [];
    agent.on('stream', (s) => streams.push(s));
    const a = client.openStream({ kind: 'outgoing', host: 'a', port: 1 });
    const b = client.openStream({ kind: 'outgoing', host: 'b', port: 1 });
    a.write(Buffer.alloc(1000));
    b.write(Buffer.alloc(1000));
    await until(() => streams.length === 2, 'two streams');
    const errA = errorOf(streams[0]);
    const errB = errorOf(streams[1]);
    // When one is reset and the other destroyed with an error
    a.reset('user cancelled');
    b.destroy(new Error('local socket closed'));
    b.on('error', () => undefined);
    // Then the agent's streams see both reasons, and both sides forget the streams
    expect(((await errA) as StreamResetError).reason).toBe('user cancelled');
    expect(((await errB) as StreamResetError).reason).toBe('local socket closed');
    await until(() => client.streamCount === 0 && agent.streamCount === 0, 'streams released');
  });

  it('resets streams the peer opens beyond the stream limit, and accepts new ones once others end', async () => {
    const sockets = await socketPair(cleanups);
    const client = createClientMux(sockets[0]);
    const agent = createAgentMux(sockets[1], { maxStreams: 2 });
    cleanups.push(() => {
      client.close();
      agent.close();
    });
    const held: MuxStream[] = [];
    agent.on('stream', (s) => held.push(s));
    const [a, b, c] = [0, 1, 2].map(() => client.openStream({ kind: 'outgoing', host: 'h', port: 1 }));
    const err = await errorOf(c);
    expect((err as StreamResetError).reason).toBe('too many open streams (limit 2)');
    expect(held.length).toBe(2);
    a.destroy();
    await until(() => agent.streamCount === 1, 'a slot to free up');
    const d = client.openStream({ kind: 'outgoing', host: 'h', port: 1 });
    await until(() => held.length === 3, 'the new stream to arrive');
    expect(held[2].id).toBe(d.id);
    expect(b.destroyed).toBe(false);
  });

  it('half-closes: each direction ends on its own', async () => {
    // Given a request/response exchange where the client half-closes first
    const { client, agent } = await muxPair();
    agent.on('stream', (s) => {
      void readAll(s).then((req) => {
        // the agent can still write after the client's end
        s.write('response to ');
        s.end(req);
      });
    });
    const stream = client.openStream({ kind: 'outgoing', host: 'h', port: 1 });
    const response = readAll(stream);
    // When the client writes and ends its side
    stream.end('request');
    // Then the agent sees the end, answers, and the client reads the whole answer; both forget the stream
    expect((await response).toString()).toBe('response to request');
    await until(() => client.streamCount === 0 && agent.streamCount === 0, 'streams released');
  });

  it('ends every open stream with an error when the connection closes or is cut', async () => {
    // Given 10 open streams each way
    const { client, agent } = await muxPair();
    const agentStreams: MuxStream[] = [];
    agent.on('stream', (s) => agentStreams.push(s));
    const clientStreams = Array.from({ length: 10 }, (_, i) =>
      client.openStream({ kind: 'outgoing', host: `h${i}`, port: 1 }),
    );
    await until(() => agentStreams.length === 10, 'streams open');
    const clientErrors = clientStreams.map(errorOf);
    const agentErrors = agentStreams.map(errorOf);
    const agentClosed = nextEvent<Error | undefined>(agent, 'close');
    const clientClosed = nextEvent<Error | undefined>(client, 'close');
    // When the client closes the connection with a reason
    client.close('user pressed ctrl-c');
    // Then every stream on both sides errors, and the agent learns the reason
    for (const e of await Promise.all(clientErrors)) expect(e).toBeInstanceOf(MuxClosedError);
    for (const e of await Promise.all(agentErrors)) expect((e as MuxClosedError).reason).toBe('user pressed ctrl-c');
    expect(await clientClosed).toBeUndefined();
    expect(((await agentClosed) as MuxClosedError).message).toMatch(/user pressed ctrl-c/);

    // And a cut connection (no goodbye) does the same
    const second = await muxPair();
    const s2 = second.client.openStream({ kind: 'outgoing', host: 'x', port: 1 });
    const e2 = errorOf(s2);
    const closed2 = nextEvent<Error>(second.client, 'close');
    second.sockets[1].destroy();
    expect(await e2).toBeInstanceOf(MuxClosedError);
    expect(await closed2).toBeInstanceOf(MuxClosedError);
    const late = second.client.openStream({ kind: 'outgoing', host: 'late', port: 1 });
    expect(await errorOf(late)).toBeInstanceOf(MuxClosedError);
  });
});
