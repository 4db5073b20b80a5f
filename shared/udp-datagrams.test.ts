// The datagram framing of `udp` streams: boundaries survive any chunking, the peer travels with each datagram, and
// what cannot be a datagram is refused.
import { describe, expect, it } from 'vitest';
import { DatagramDecoder, DatagramFormatError, MAX_UDP_PAYLOAD, encodeDatagram } from './udp-datagrams.js';

describe('udp stream datagrams', () => {
  it('Given datagrams of 0, 1 and the largest size, When their bytes arrive 7 bytes at a time, Then each comes out whole, in order', () => {
    const sent = [
      { host: 'echo.default.svc.cluster.local', port: 9999, payload: Buffer.alloc(0) },
      { host: '', port: 53, payload: Buffer.from([7]) },
      { host: 'fd00::1', port: 1, payload: Buffer.alloc(MAX_UDP_PAYLOAD, 0xab) },
    ];
    const bytes = Buffer.concat(sent.map((d) => encodeDatagram(d) as Buffer));
    const decoder = new DatagramDecoder();
    const received = [];
    for (let i = 0; i < bytes.length; i += 7) received.push(...decoder.push(bytes.subarray(i, i + 7)));
    expect(received).toEqual(sent);
  });

  it('Given several datagrams in one chunk and one cut in two, Then the decoder returns the whole ones and keeps the rest', () => {
    const a = encodeDatagram({ host: '10.96.0.10', port: 53, payload: Buffer.from('a') }) as Buffer;
    const b = encodeDatagram({ host: '10.96.0.10', port: 53, payload: Buffer.from('bb') }) as Buffer;
    const decoder = new DatagramDecoder();
    const first = decoder.push(Buffer.concat([a, b.subarray(0, 4)]));
    expect(first.map((d) => d.payload.toString())).toEqual(['a']);
    expect(decoder.push(b.subarray(4)).map((d) => d.payload.toString())).toEqual(['bb']);
  });

  it('Given a payload over the bound or a host over 255 bytes, Then it is not encoded (the caller drops it)', () => {
    expect(encodeDatagram({ host: 'x', port: 1, payload: Buffer.alloc(MAX_UDP_PAYLOAD + 1) })).toBeUndefined();
    expect(encodeDatagram({ host: 'a'.repeat(256), port: 1, payload: Buffer.alloc(1) })).toBeUndefined();
    expect(encodeDatagram({ host: 'x', port: 70000, payload: Buffer.alloc(1) })).toBeUndefined();
  });

  it('Given a length too short for its host and port, Then the decoder throws a DatagramFormatError', () => {
    const decoder = new DatagramDecoder();
    expect(() => decoder.push(Buffer.from([0, 2, 5, 0]))).toThrow(DatagramFormatError);
    expect(() => new DatagramDecoder().push(Buffer.from([0, 0]))).toThrow(/cannot hold its host and port/);
  });
});
