// Frame codec: every message kind round-trips, input split at any byte boundary decodes the same, and random or mutated
// frames end in a ProtocolError (never another exception, never a hang, never a buffer beyond one frame).
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_MAX_FRAME,
  FRAME_HEADER_SIZE,
  FrameDecoder,
  FrameEncoder,
  FrameKind,
  MAX_DATA_FRAME,
  ProtocolError,
  decodeCredit,
  decodeJson,
  encodeFrame,
} from './codec.js';
import { AgentMessage, ClientMessage, StreamAccept, StreamOpen, incomingOpen } from './protocol.js';
import { AGENT_SAMPLES, CLIENT_SAMPLES, STREAM_OPEN_SAMPLES, prng } from '../testkit/protocol-fixtures.js';

interface Decoded {
  kind: FrameKind;
  id: number;
  payload: Buffer;
}

/**
 * Decodes `chunks`, merging the pieces of one DATA frame as the mux would see them (consecutive bytes of one stream).
 */
function decodeAll(chunks: Buffer[], maxFrame = DEFAULT_MAX_FRAME): Decoded[] {
  const out: Decoded[] = [];
  let dataOpen = false;
  const decoder = new FrameDecoder((kind, id, payload) => {
    const last = out[out.length - 1];
    if (kind === FrameKind.DATA && dataOpen && last && last.kind === FrameKind.DATA && last.id === id) {
      last.payload = Buffer.concat([last.payload, payload]);
    } else {
      out.push({ kind, id, payload: Buffer.from(payload) });
    }
    dataOpen = kind === FrameKind.DATA;
  }, maxFrame);
  for (const c of chunks) decoder.push(c);
  decoder.end();
  return out;
}

const optionTags = (
  union: { def: { options: readonly { def: { shape: Record<string, unknown> } }[] } },
  key: string,
): string[] => union.def.options.map((o) => (o.def.shape[key] as { def: { values: string[] } }).def.values[0]).sort();

function sampleStream(): { wire: Buffer; expected: Decoded[] } {
  const frames: Decoded[] = [];
  const add = (kind: FrameKind, id: number, payload: Buffer = Buffer.alloc(0)): void => {
    frames.push({ kind, id, payload });
  };
  for (const msg of Object.values(CLIENT_SAMPLES)) add(FrameKind.CONTROL, 0, Buffer.from(JSON.stringify(msg)));
  for (const open of Object.values(STREAM_OPEN_SAMPLES)) add(FrameKind.OPEN, 3, Buffer.from(JSON.stringify(open)));
  add(FrameKind.DATA, 3, Buffer.from('hello, stream'));
  add(FrameKind.CREDIT, 3, Buffer.from([0, 4, 0, 0]));
  add(FrameKind.ACCEPT, 3, Buffer.from(JSON.stringify({ localPort: 1234 })));
  add(FrameKind.END, 3);
  add(FrameKind.RESET, 5, Buffer.from('ECONNREFUSED'));
  add(FrameKind.GOAWAY, 0, Buffer.from('bye'));
  const wire = Buffer.concat(frames.map((f) => encodeFrame(f.kind, f.id, f.payload)));
  return { wire, expected: frames };
}

describe('codec round trip', () => {
  it('round-trips every ClientMessage type through a CONTROL frame', () => {
    // Given one sample per ClientMessage type (the fixture type makes the compiler demand every type)
    expect(Object.keys(CLIENT_SAMPLES).sort()).toEqual(optionTags(ClientMessage, 'type'));
    for (const msg of Object.values(CLIENT_SAMPLES)) {
      // When it is framed and decoded
      const [frame] = decodeAll([
        encodeFrame(FrameKind.CONTROL, 0, Buffer.from(JSON.stringify(ClientMessage.parse(msg)))),
      ]);
      // Then the validated message equals the original
      expect(frame.kind).toBe(FrameKind.CONTROL);
      expect(decodeJson(frame.payload, ClientMessage, 'control message')).toEqual(msg);
    }
  });

  it('round-trips every AgentMessage type through a CONTROL frame', () => {
    expect(Object.keys(AGENT_SAMPLES).sort()).toEqual(optionTags(AgentMessage, 'type'));
    for (const msg of Object.values(AGENT_SAMPLES)) {
      const [frame] = decodeAll([
        encodeFrame(FrameKind.CONTROL, 0, Buffer.from(JSON.stringify(AgentMessage.parse(msg)))),
      ]);
      expect(decodeJson(frame.payload, AgentMessage, 'control message')).toEqual(msg);
    }
  });

  it('round-trips every StreamOpen kind and a StreamAccept', () => {
    expect(Object.keys(STREAM_OPEN_SAMPLES).sort()).toEqual(optionTags(StreamOpen, 'kind'));
    for (const open of Object.values(STREAM_OPEN_SAMPLES)) {
      const [frame] = decodeAll([encodeFrame(FrameKind.OPEN, 9, Buffer.from(JSON.stringify(open)))]);
      expect(frame.id).toBe(9);
      expect(decodeJson(frame.payload, StreamOpen, 'stream header')).toEqual(open);
    }
    const [accept] = decodeAll([encodeFrame(FrameKind.ACCEPT, 9, Buffer.from('{"size":10}'))]);
    expect(decodeJson(accept.payload, StreamAccept, 'ACCEPT')).toEqual({ size: 10 });
  });

  it('round-trips DATA byte-exact, CREDIT, END, RESET and GOAWAY', () => {
    const data = Buffer.from(Array.from({ length: 70_000 }, (_, i) => (i * 31) & 0xff));
    const frames = decodeAll([
      encodeFrame(FrameKind.DATA, 2, data.subarray(0, MAX_DATA_FRAME)),
      encodeFrame(FrameKind.CREDIT, 2, Buffer.from([0, 0, 1, 0])),
      encodeFrame(FrameKind.END, 2),
      encodeFrame(FrameKind.RESET, 4, Buffer.from('ENOENT')),
      encodeFrame(FrameKind.GOAWAY, 0, Buffer.from('done')),
    ]);
    expect(frames.map((f) => f.kind)).toEqual([
      FrameKind.DATA,
      FrameKind.CREDIT,
      FrameKind.END,
      FrameKind.RESET,
      FrameKind.GOAWAY,
    ]);
    expect(frames[0].payload.equals(data.subarray(0, MAX_DATA_FRAME))).toBe(true);
    expect(decodeCredit(frames[1].payload)).toBe(256);
    expect(frames[3].payload.toString()).toBe('ENOENT');
  });

  it('FrameEncoder output equals encodeFrame output, small payloads packed and large ones by reference', () => {
    // Given a mix of small and large frames
    const big = Buffer.alloc(100_000, 7);
    const enc = new FrameEncoder();
    enc.frame(FrameKind.CREDIT, 1, Buffer.from([0, 0, 0, 9]));
    enc.frame(FrameKind.DATA, 1, Buffer.from('small'));
    enc.frame(FrameKind.DATA, 1, big);
    enc.frame(FrameKind.END, 1);
    // When the encoder is drained
    const out = enc.take();
    // Then the bytes are the same as frame-by-frame encoding, the large payload was not copied, and it is empty after
    const expected = Buffer.concat([
      encodeFrame(FrameKind.CREDIT, 1, Buffer.from([0, 0, 0, 9])),
      encodeFrame(FrameKind.DATA, 1, Buffer.from('small')),
      encodeFrame(FrameKind.DATA, 1, big),
      encodeFrame(FrameKind.END, 1),
    ]);
    expect(Buffer.concat(out).equals(expected)).toBe(true);
    expect(out).toContain(big);
    expect(out.length).toBe(3);
    expect(enc.take()).toEqual([]);
  });

  it('FrameEncoder keeps earlier output intact when its slab fills up', () => {
    const enc = new FrameEncoder();
    const taken: Buffer[] = [];
    const expected: Buffer[] = [];
    for (let i = 0; i < 20_000; i++) {
      const payload = Buffer.from(`msg-${i}`);
      enc.frame(FrameKind.DATA, 1 + (i % 7) * 2, payload);
      expected.push(encodeFrame(FrameKind.DATA, 1 + (i % 7) * 2, payload));
      if (i % 333 === 0) taken.push(...enc.take());
    }
    taken.push(...enc.take());
    expect(Buffer.concat(taken).equals(Buffer.concat(expected))).toBe(true);
  });
});

describe('codec decoding split input', () => {
  it('decodes the same frames whatever byte boundary the input is split at', () => {
    // Given a byte stream holding every frame kind and every message type
    const { wire, expected } = sampleStream();
    // When it arrives in two pieces, split at each possible offset
    for (let cut = 0; cut <= wire.length; cut++) {
      const frames = decodeAll([wire.subarray(0, cut), wire.subarray(cut)]);
      // Then the frames are exactly the ones sent
      expect(frames).toEqual(expected);
    }
  });

  it('decodes input that arrives one byte at a time or in random pieces', () => {
    const { wire, expected } = sampleStream();
    const bytes = Array.from({ length: wire.length }, (_, i) => wire.subarray(i, i + 1));
    expect(decodeAll(bytes)).toEqual(expected);
    const rand = prng(42);
    for (let round = 0; round < 50; round++) {
      const pieces: Buffer[] = [];
      for (let off = 0; off < wire.length; ) {
        const n = 1 + Math.floor(rand() * 200);
        pieces.push(wire.subarray(off, off + n));
        off += n;
      }
      expect(decodeAll(pieces)).toEqual(expected);
    }
  });
});

describe('codec rejects bad input', () => {
  const header = (length: number, kind: number, id: number): Buffer => {
    const h = Buffer.alloc(FRAME_HEADER_SIZE);
    h.writeUInt32BE(length, 0);
    h[4] = kind;
    h.writeUInt32BE(id, 5);
    return h;
  };
  const errorOf = (chunks: Buffer[], maxFrame?: number): unknown => {
    try {
      decodeAll(chunks, maxFrame);
    } catch (err) {
      return err;
    }
    return undefined;
  };

  it('rejects an oversized frame from its header alone, before buffering its payload', () => {
    const decoder = new FrameDecoder(() => undefined, 1024);
    expect(() => decoder.push(header(1025, FrameKind.DATA, 1))).toThrow(ProtocolError);
    expect(() => decoder.push(header(1025, FrameKind.DATA, 1))).not.toThrow(); // dead after the first error
    expect(decoder.bufferedBytes).toBe(0);
    expect(String(errorOf([header(DEFAULT_MAX_FRAME + 1, FrameKind.CONTROL, 0)]))).toMatch(/oversized frame/);
  });

  it('rejects a truncated frame at end of input', () => {
    const full = encodeFrame(FrameKind.CONTROL, 0, Buffer.from(JSON.stringify(CLIENT_SAMPLES.ping)));
    for (const cut of [1, FRAME_HEADER_SIZE - 1, FRAME_HEADER_SIZE, full.length - 1]) {
      const err = errorOf([full.subarray(0, cut)]);
      expect(err).toBeInstanceOf(ProtocolError);
      expect(String(err)).toMatch(/truncated frame/);
    }
  });

  it('rejects malformed frames with a reason', () => {
    const cases: Array<[Buffer, RegExp]> = [
      [header(0, 99, 1), /unknown frame kind 99/],
      [header(0, FrameKind.DATA, 0), /on stream 0/],
      [Buffer.concat([header(2, FrameKind.CONTROL, 7), Buffer.from('{}')]), /must be on stream 0/],
      [Buffer.concat([header(3, FrameKind.CREDIT, 1), Buffer.alloc(3)]), /CREDIT payload must be 4 bytes/],
      [Buffer.concat([header(1, FrameKind.END, 1), Buffer.alloc(1)]), /END with a 1-byte payload/],
      [header(0, FrameKind.CONTROL, 0), /empty CONTROL/],
      [header(5000, FrameKind.RESET, 1), /reason exceeds/],
    ];
    for (const [bytes, reason] of cases) {
      const err = errorOf([bytes]);
      expect(err).toBeInstanceOf(ProtocolError);
      expect(String(err)).toMatch(reason);
    }
    expect(() => decodeJson(Buffer.from('{nope'), ClientMessage, 'control message')).toThrow(/not JSON/);
    expect(() =>
      decodeJson(Buffer.from('{"type":"subscribe","id":"a","port":99999}'), ClientMessage, 'control message'),
    ).toThrow(ProtocolError);
    expect(() => decodeJson(Buffer.from('{"type":"launchMissiles"}'), ClientMessage, 'control message')).toThrow(
      /malformed control message/,
    );
    expect(() => decodeCredit(Buffer.alloc(4))).toThrow(/CREDIT of 0/);
  });
});

describe('codec fuzz', () => {
  /** What the mux does with each frame's payload, so that validation errors are part of the fuzzed surface. */
  const validate = (kind: FrameKind, _id: number, payload: Buffer): void => {
    if (kind === FrameKind.CONTROL) decodeJson(payload, ClientMessage, 'control message');
    else if (kind === FrameKind.OPEN) decodeJson(payload, StreamOpen, 'stream header', incomingOpen);
    else if (kind === FrameKind.ACCEPT) decodeJson(payload, StreamAccept, 'ACCEPT');
    else if (kind === FrameKind.CREDIT) decodeCredit(payload);
  };

  /** Feeds `input` in random pieces; returns 'ok' if it decoded completely, the error otherwise. */
  function feed(input: Buffer, rand: () => number, maxFrame: number): 'ok' | unknown {
    const decoder = new FrameDecoder(validate, maxFrame);
    try {
      for (let off = 0; off < input.length; ) {
        const n = 1 + Math.floor(rand() * 64);
        decoder.push(input.subarray(off, off + n));
        expect(decoder.bufferedBytes).toBeLessThanOrEqual(maxFrame + FRAME_HEADER_SIZE);
        off += n;
      }
      decoder.end();
      return 'ok';
    } catch (err) {
      return err;
    }
  }

  it('turns thousands of random and mutated frames into ProtocolErrors, never another exception', () => {
    const rand = prng(20261122);
    const maxFrame = 4096;
    const { wire } = sampleStream();
    const valid = [
      ...Object.values(CLIENT_SAMPLES).map((m) => encodeFrame(FrameKind.CONTROL, 0, Buffer.from(JSON.stringify(m)))),
      ...Object.values(STREAM_OPEN_SAMPLES).map((o) => encodeFrame(FrameKind.OPEN, 1, Buffer.from(JSON.stringify(o)))),
      encodeFrame(FrameKind.CREDIT, 1, Buffer.from([0, 0, 0, 1])),
      wire,
    ];
    let errors = 0;
    let decoded = 0;
    const cases = 5000;
    for (let i = 0; i < cases; i++) {
      let input: Buffer;
      const mode = i % 4;
      if (mode === 0) {
        // random bytes
        input = Buffer.from(Array.from({ length: 1 + Math.floor(rand() * 300) }, () => Math.floor(rand() * 256)));
      } else if (mode === 1) {
        // a valid frame with a few random bytes flipped (header or payload)
        input = Buffer.from(valid[Math.floor(rand() * valid.length)]);
        for (let k = 0, flips = 1 + Math.floor(rand() * 4); k < flips; k++)
          input[Math.floor(rand() * input.length)] = Math.floor(rand() * 256);
      } else if (mode === 2) {
        // a valid frame cut short, or with garbage appended
        const frame = valid[Math.floor(rand() * valid.length)];
        input =
          rand() < 0.5
            ? frame.subarray(0, Math.floor(rand() * frame.length))
            : Buffer.concat([frame, Buffer.from([Math.floor(rand() * 256)])]);
      } else {
        // a random header with a plausible length and kind, then random payload
        const len = Math.floor(rand() * 2 * maxFrame);
        const h = Buffer.alloc(FRAME_HEADER_SIZE);
        h.writeUInt32BE(len, 0);
        h[4] = Math.floor(rand() * 10);
        h.writeUInt32BE(Math.floor(rand() * 4), 5);
        input = Buffer.concat([
          h,
          Buffer.from(Array.from({ length: Math.min(len, 64) }, () => Math.floor(rand() * 256))),
        ]);
      }
      const outcome = feed(input, rand, maxFrame);
      if (outcome === 'ok') {
        decoded++;
      } else {
        // Then every failure is the typed error, with a reason
        if (!(outcome instanceof ProtocolError))
          throw new Error(`case ${i}: ${String(outcome)} for ${input.toString('hex')}`);
        expect(outcome.message.length).toBeGreaterThan(0);
        errors++;
      }
    }
    expect(errors + decoded).toBe(cases);
    expect(errors).toBeGreaterThan(cases * 0.8);
  });
});
