// Mux against a misbehaving peer: each kind of bad frame closes the connection with a typed ProtocolError and a GOAWAY
// naming the reason; mutated sessions never crash the process; a throwing listener does not corrupt decoding.
import type net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { FrameDecoder, FrameKind, encodeFrame } from './codec.js';
import {
  INITIAL_WINDOW,
  MuxClosedError,
  ProtocolError,
  createAgentMux,
  createClientMux,
  type AgentMux,
  type MuxStream,
} from './mux.js';
import {
  AGENT_SAMPLES,
  CLIENT_SAMPLES,
  STREAM_OPEN_SAMPLES,
  duplexPair,
  nextEvent,
  prng,
  until,
} from '../testkit/protocol-fixtures.js';
import { socketPair } from '../testkit/sockets.js';

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const fn of cleanups.splice(0)) fn();
});

describe('mux protocol errors', () => {
  /** A raw socket talking to an agent mux; collects what the mux sends back. */
  async function rawPeer(): Promise<{ raw: net.Socket; agent: AgentMux; goaway: Promise<string> }> {
    const [raw, sock] = await socketPair(cleanups);
    const agent = createAgentMux(sock);
    agent.on('stream', () => undefined); // accepted, never read
    const goaway = new Promise<string>((resolve) => {
      const decoder = new FrameDecoder((kind, _id, payload) => {
        if (kind === FrameKind.GOAWAY) resolve(payload.toString());
      });
      raw.on('data', (d: Buffer) => decoder.push(d));
      raw.on('error', () => undefined);
    });
    return { raw, agent, goaway };
  }

  const bad: Array<[string, () => Buffer, RegExp]> = [
    ['an oversized frame', () => Buffer.from([0x7f, 0xff, 0xff, 0xff, FrameKind.DATA, 0, 0, 0, 1]), /oversized frame/],
    ['an unknown frame kind', () => encodeFrame(42 as FrameKind, 1), /unknown frame kind/],
    ['a control message that is not JSON', () => encodeFrame(FrameKind.CONTROL, 0, Buffer.from('{')), /not JSON/],
    [
      'an invalid control message',
      () => encodeFrame(FrameKind.CONTROL, 0, Buffer.from('{"type":"hello"}')),
      /malformed control message/,
    ],
    [
      'an agent-only message from the client',
      () => encodeFrame(FrameKind.CONTROL, 0, Buffer.from(JSON.stringify(AGENT_SAMPLES.log))),
      /malformed control message/,
    ],
    [
      "a stream opened with the agent's parity",
      () => encodeFrame(FrameKind.OPEN, 2, Buffer.from('{"kind":"file","path":"/x"}')),
      /parity/,
    ],
    [
      'data beyond the credit',
      () =>
        Buffer.concat([
          encodeFrame(FrameKind.OPEN, 1, Buffer.from('{"kind":"file","path":"/x"}')),
          ...Array.from({ length: INITIAL_WINDOW / 65_536 + 1 }, () =>
            encodeFrame(FrameKind.DATA, 1, Buffer.alloc(65_536)),
          ),
        ]),
      /flow control violated/,
    ],
  ];
  for (const [what, bytes, reason] of bad) {
    it(`closes the connection with a ProtocolError on ${what}`, async () => {
      // Given an agent mux with an open stream on its connection
      const { raw, agent, goaway } = await rawPeer();
      const closed = nextEvent<Error>(agent, 'close');
      // When the peer sends the bad bytes
      raw.write(bytes());
      // Then the mux closes with a typed error naming the problem, and tells the peer why before hanging up
      const err = await closed;
      expect(err).toBeInstanceOf(ProtocolError);
      expect(err.message).toMatch(reason);
      expect(await goaway).toMatch(reason);
      await until(() => raw.readableEnded || raw.destroyed, 'the connection to end');
    });
  }

  it('closes with a ProtocolError when the connection ends inside a frame', async () => {
    const { raw, agent } = await rawPeer();
    const closed = nextEvent<Error>(agent, 'close');
    raw.end(encodeFrame(FrameKind.CONTROL, 0, Buffer.from(JSON.stringify(CLIENT_SAMPLES.ping))).subarray(0, 12));
    const err = await closed;
    expect(err).toBeInstanceOf(ProtocolError);
    expect(err.message).toMatch(/truncated frame/);
  });

  it('survives a listener that throws without corrupting the rest of the input', async () => {
    const [a, b] = await socketPair(cleanups);
    const client = createClientMux(a);
    const agent = createAgentMux(b);
    const seen: string[] = [];
    agent.on('message', (m) => {
      seen.push(m.type);
      if (m.type === 'ping') throw new Error('listener bug');
    });
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown): void => {
      uncaught.push(err);
    };
    process.prependListener('uncaughtException', onUncaught);
    cleanups.push(() => process.off('uncaughtException', onUncaught));
    client.send(CLIENT_SAMPLES.ping);
    client.send(CLIENT_SAMPLES.envRead);
    await until(() => seen.length === 2 && uncaught.length === 1, 'both messages and the rethrown error');
    expect(seen).toEqual(['ping', 'envRead']);
    expect(agent.closed).toBe(false);
  });
});

describe('mux fuzz', () => {
  it('closes with a ProtocolError or carries on, for 500 mutated sessions, never crashing', async () => {
    // Given a valid session byte stream: hello, stream opens, data, credit, half-close, reset
    const session = Buffer.concat([
      encodeFrame(FrameKind.CONTROL, 0, Buffer.from(JSON.stringify(CLIENT_SAMPLES.hello))),
      encodeFrame(FrameKind.OPEN, 1, Buffer.from(JSON.stringify(STREAM_OPEN_SAMPLES.outgoing))),
      encodeFrame(FrameKind.DATA, 1, Buffer.alloc(3000, 1)),
      encodeFrame(FrameKind.OPEN, 3, Buffer.from(JSON.stringify(STREAM_OPEN_SAMPLES.file))),
      encodeFrame(FrameKind.CREDIT, 3, Buffer.from([0, 1, 0, 0])),
      encodeFrame(FrameKind.END, 1),
      encodeFrame(FrameKind.CONTROL, 0, Buffer.from(JSON.stringify(CLIENT_SAMPLES.subscribe))),
      encodeFrame(FrameKind.RESET, 3, Buffer.from('cancelled')),
      encodeFrame(FrameKind.CONTROL, 0, Buffer.from(JSON.stringify(CLIENT_SAMPLES.bye))),
    ]);
    const rand = prng(7);
    let protocolErrors = 0;
    for (let i = 0; i < 500; i++) {
      // When a mutated copy (bytes flipped, cut, or garbage inserted) reaches an agent mux that reads its streams
      const input = Buffer.from(session);
      for (let k = 0, n = 1 + Math.floor(rand() * 3); k < n; k++)
        input[Math.floor(rand() * input.length)] = Math.floor(rand() * 256);
      const [peer, conn] = duplexPair();
      const agent = createAgentMux(conn);
      let closeReason = null as Error | undefined | null;
      agent.on('close', (err) => {
        closeReason = err;
      });
      agent.on('stream', (s: MuxStream) => s.resume());
      agent.on('message', () => undefined);
      peer.on('data', () => undefined);
      peer.write(rand() < 0.2 ? input.subarray(0, Math.floor(rand() * input.length)) : input);
      peer.end();
      // Then the mux ends either cleanly or with a typed error; nothing else is thrown
      await until(() => closeReason !== null, `case ${i} to end`);
      if (closeReason instanceof ProtocolError) protocolErrors++;
      else expect(closeReason).toBeInstanceOf(MuxClosedError);
      expect(agent.streamCount).toBe(0);
    }
    // Most flips land in the 3 000 data bytes (still a valid session); the rest must have been caught.
    expect(protocolErrors).toBeGreaterThan(100);
  });
});
