// Unit tests of mirroring by packet capture, on synthetic captures: the pcap stream reader (link types, byte orders,
// records split across chunks), the TCP reassembler (order, retransmits, holes, FIN, RST, flows it must ignore), and
// what a session hears of a copy that had to be dropped.
import { PassThrough } from 'node:stream';
import { describe, expect, test } from 'vitest';
import type { TrafficEvent } from '../../shared/protocol.js';
import { createLog } from '../log.js';
import { MirroredConnection } from './mirror.js';
import type { IncomingOpen, PortSubscription } from './subscription.js';
import { LINKTYPE, PcapReader, TCP_FLAGS, type TcpSegment } from './pcap.js';
import { TcpReassembler, type FlowEnd, type FlowLimits } from './tcp-flows.js';

const { FIN, SYN, RST, ACK } = TCP_FLAGS;
const PSH = 0x08;

interface Packet {
  src?: string;
  dst?: string;
  srcPort?: number;
  dstPort?: number;
  seq: number;
  flags: number;
  payload?: string;
}

function ipv4Tcp(p: Packet): Buffer {
  const payload = Buffer.from(p.payload ?? '');
  const ip = Buffer.alloc(20);
  ip[0] = 0x45;
  ip.writeUInt16BE(40 + payload.length, 2);
  ip.writeUInt16BE(0x4000, 6); // don't fragment
  ip[8] = 64;
  ip[9] = 6;
  Buffer.from((p.src ?? '10.0.0.3').split('.').map(Number)).copy(ip, 12);
  Buffer.from((p.dst ?? '10.0.0.2').split('.').map(Number)).copy(ip, 16);
  const tcp = Buffer.alloc(20);
  tcp.writeUInt16BE(p.srcPort ?? 40000, 0);
  tcp.writeUInt16BE(p.dstPort ?? 3000, 2);
  tcp.writeUInt32BE(p.seq >>> 0, 4);
  tcp[12] = 5 << 4;
  tcp[13] = p.flags;
  return Buffer.concat([ip, tcp, payload]);
}

function ipv6Tcp(p: Packet & { nextHeader?: number }): Buffer {
  const payload = Buffer.from(p.payload ?? '');
  const ip = Buffer.alloc(40);
  ip[0] = 0x60;
  ip.writeUInt16BE(20 + payload.length, 4);
  ip[6] = p.nextHeader ?? 6;
  ip[7] = 64;
  const bytes = (text: string) => {
    const [head, tail = ''] = text.split('::');
    const groups = (part: string) => (part ? part.split(':').map((g) => Number.parseInt(g, 16)) : []);
    const all = [...groups(head), ...Array(8 - groups(head).length - groups(tail).length).fill(0), ...groups(tail)];
    const b = Buffer.alloc(16);
    for (const [i, g] of all.entries()) b.writeUInt16BE(g, i * 2);
    return b;
  };
  bytes(p.src ?? 'fd00:244::3').copy(ip, 8);
  bytes(p.dst ?? 'fd00:244::2').copy(ip, 24);
  const tcp = ipv4Tcp(p).subarray(20, 40);
  return Buffer.concat([ip, tcp, payload]);
}

/** An IPv6 TCP packet behind a hop-by-hop options header (next header 0): skipped, like a fragment. */
const IPV6_EXTENSION = ipv6Tcp({ seq: 1, flags: SYN, nextHeader: 0 });

/** Wraps an IP packet in a link-layer header of the given type (`etherType` 0x86dd for IPv6, `hatype` 772 for lo). */
function frame(
  linkType: number,
  ip: Buffer,
  opts: { etherType?: number; hatype?: number; pktType?: number; vlan?: boolean } = {},
): Buffer {
  const etherType = opts.etherType ?? 0x0800;
  switch (linkType) {
    case LINKTYPE.LINUX_SLL2: {
      const h = Buffer.alloc(20);
      h.writeUInt16BE(etherType, 0);
      h.writeUInt32BE(3, 4);
      h.writeUInt16BE(opts.hatype ?? 1, 8);
      h[10] = opts.pktType ?? 0;
      h[11] = 6;
      return Buffer.concat([h, ip]);
    }
    case LINKTYPE.LINUX_SLL: {
      const h = Buffer.alloc(16);
      h.writeUInt16BE(opts.pktType ?? 0, 0);
      h.writeUInt16BE(opts.hatype ?? 1, 2);
      h.writeUInt16BE(6, 4);
      h.writeUInt16BE(etherType, 14);
      return Buffer.concat([h, ip]);
    }
    case LINKTYPE.EN10MB: {
      const tag = opts.vlan ? Buffer.from([0x81, 0x00, 0x00, 0x07]) : Buffer.alloc(0);
      const type = Buffer.alloc(2);
      type.writeUInt16BE(etherType);
      const eth = Buffer.concat([Buffer.alloc(12, 0xaa), tag, type, ip]);
      // Ethernet pads frames to 60 bytes: the IP total length, not the frame's, ends the segment.
      return eth.length < 60 ? Buffer.concat([eth, Buffer.alloc(60 - eth.length, 0xee)]) : eth;
    }
    default:
      return ip;
  }
}

function pcap(
  linkType: number,
  frames: Buffer[],
  opts: { bigEndian?: boolean; nanos?: boolean; snap?: number } = {},
): Buffer {
  const u32 = (v: number): Buffer => {
    const b = Buffer.alloc(4);
    if (opts.bigEndian) b.writeUInt32BE(v >>> 0);
    else b.writeUInt32LE(v >>> 0);
    return b;
  };
  const u16 = (v: number): Buffer => {
    const b = Buffer.alloc(2);
    if (opts.bigEndian) b.writeUInt16BE(v);
    else b.writeUInt16LE(v);
    return b;
  };
  const header = Buffer.concat([
    u32(opts.nanos ? 0xa1b23c4d : 0xa1b2c3d4),
    u16(2),
    u16(4),
    u32(0),
    u32(0),
    u32(opts.snap ?? 262144),
    u32(linkType),
  ]);
  const records = frames.map((f, i) => {
    const kept = f.subarray(0, opts.snap ?? f.length);
    return Buffer.concat([u32(1_700_000_000 + i), u32(i), u32(kept.length), u32(f.length), kept]);
  });
  return Buffer.concat([header, ...records]);
}

const simple = (s: TcpSegment) => ({
  src: s.src,
  srcPort: s.srcPort,
  dst: s.dst,
  dstPort: s.dstPort,
  seq: s.seq,
  flags: s.flags,
  payload: s.payload.toString(),
  complete: s.complete,
});

describe('pcap stream', () => {
  const packets: Packet[] = [
    { seq: 100, flags: SYN },
    { seq: 101, flags: ACK | PSH, payload: 'GET / HTTP/1.1\r\n\r\n' },
  ];
  const expected = packets.map((p) => ({
    src: '10.0.0.3',
    srcPort: 40000,
    dst: '10.0.0.2',
    dstPort: 3000,
    seq: p.seq,
    flags: p.flags,
    payload: p.payload ?? '',
    complete: true,
  }));

  test.each([
    ['LINUX_SLL2', LINKTYPE.LINUX_SLL2],
    ['LINUX_SLL', LINKTYPE.LINUX_SLL],
    ['EN10MB', LINKTYPE.EN10MB],
    ['RAW', LINKTYPE.RAW],
  ])(
    'decodes IPv4 TCP segments of link type %s, in both byte orders, micro- and nanosecond files',
    (_name, linkType) => {
      for (const opts of [{}, { bigEndian: true }, { nanos: true }, { bigEndian: true, nanos: true }]) {
        // Given a capture of a SYN and a request
        const stream = pcap(
          linkType,
          packets.map((p) => frame(linkType, ipv4Tcp(p))),
          opts,
        );
        // When it is read in one chunk
        // Then both segments come out, with addresses, ports, sequence numbers, flags and the payload
        expect(new PcapReader().push(stream).map(simple)).toEqual(expected);
      }
    },
  );

  test('a record split across chunks (here: one byte at a time) is decoded once it is whole', () => {
    const stream = pcap(
      LINKTYPE.LINUX_SLL2,
      packets.map((p) => frame(LINKTYPE.LINUX_SLL2, ipv4Tcp(p))),
    );
    const reader = new PcapReader();
    const out: TcpSegment[] = [];
    for (let i = 0; i < stream.length; i++) out.push(...reader.push(stream.subarray(i, i + 1)));
    expect(out.map(simple)).toEqual(expected);
  });

  test('IPv6 extension headers, loopback, outgoing and non-TCP packets are skipped cleanly; VLAN tags and Ethernet padding are handled', () => {
    const udp = ipv4Tcp({ seq: 1, flags: 0 });
    udp[9] = 17;
    const frames = [
      frame(LINKTYPE.LINUX_SLL2, IPV6_EXTENSION, { etherType: 0x86dd }),
      frame(LINKTYPE.LINUX_SLL2, ipv4Tcp({ seq: 1, flags: SYN }), { hatype: 772 }),
      frame(LINKTYPE.LINUX_SLL2, ipv4Tcp({ seq: 2, flags: SYN }), { pktType: 4 }),
      frame(LINKTYPE.LINUX_SLL2, udp),
      frame(LINKTYPE.LINUX_SLL2, ipv4Tcp({ seq: 3, flags: ACK, payload: 'kept' })),
    ];
    expect(new PcapReader().push(pcap(LINKTYPE.LINUX_SLL2, frames)).map((s) => s.payload.toString())).toEqual(['kept']);
    expect(
      new PcapReader().push(
        pcap(LINKTYPE.LINUX_SLL, [frame(LINKTYPE.LINUX_SLL, ipv4Tcp({ seq: 1, flags: SYN }), { pktType: 4 })]),
      ),
    ).toEqual([]);
    expect(new PcapReader().push(pcap(LINKTYPE.RAW, [IPV6_EXTENSION]))).toEqual([]);
    const eth = pcap(LINKTYPE.EN10MB, [
      frame(LINKTYPE.EN10MB, ipv4Tcp({ seq: 9, flags: ACK, payload: 'x' }), { vlan: true }),
      frame(LINKTYPE.EN10MB, IPV6_EXTENSION, { etherType: 0x86dd }),
    ]);
    expect(new PcapReader().push(eth).map((s) => [s.seq, s.payload.toString()])).toEqual([[9, 'x']]);
  });

  test('IPv6 TCP segments are decoded, their addresses written as Node writes them (RFC 5952)', () => {
    // Given the raw records devop-capture writes, and an IPv6 packet in each link type tcpdump writes
    const syn = ipv6Tcp({ src: 'fd00:244:0:0:0:0:0:3', dst: 'fd00:244::2', seq: 7, flags: SYN });
    const data = ipv6Tcp({ src: '2001:db8:0:1:0:0:0:1', seq: 8, flags: ACK | PSH, payload: 'six' });
    const raw = new PcapReader().push(pcap(LINKTYPE.RAW, [syn, data])).map(simple);
    // Then each is a segment with its addresses and ports
    expect(raw).toEqual([
      {
        src: 'fd00:244::3',
        srcPort: 40000,
        dst: 'fd00:244::2',
        dstPort: 3000,
        seq: 7,
        flags: SYN,
        payload: '',
        complete: true,
      },
      {
        src: '2001:db8:0:1::1',
        srcPort: 40000,
        dst: 'fd00:244::2',
        dstPort: 3000,
        seq: 8,
        flags: ACK | PSH,
        payload: 'six',
        complete: true,
      },
    ]);
    for (const linkType of [LINKTYPE.LINUX_SLL2, LINKTYPE.LINUX_SLL, LINKTYPE.EN10MB]) {
      const segments = new PcapReader().push(pcap(linkType, [frame(linkType, data, { etherType: 0x86dd })]));
      expect(segments.map((s) => s.payload.toString())).toEqual(['six']);
    }
  });

  test('a packet cut short by the snapshot length is marked incomplete', () => {
    const stream = pcap(LINKTYPE.RAW, [ipv4Tcp({ seq: 5, flags: ACK, payload: 'abcdefgh' })], { snap: 44 });
    expect(new PcapReader().push(stream).map(simple)).toMatchObject([{ seq: 5, payload: 'abcd', complete: false }]);
  });

  test('a stream that is not pcap, or of a link type it cannot read, is refused', () => {
    expect(() => new PcapReader().push(Buffer.alloc(24, 0x11))).toThrow(/not a pcap stream/);
    expect(() => new PcapReader().push(pcap(105, []))).toThrow(/link type 105 is not supported/);
  });
});

describe('TCP reassembly', () => {
  const limits: FlowLimits = { maxOutOfOrder: 64, holeMs: 2000, idleMs: 60_000, handshakeMs: 10_000, maxFlows: 4 };

  function harness(open: () => boolean = () => true) {
    const log: string[] = [];
    const flows = new TcpReassembler<string>(
      {
        open: (key) => (open() ? `${key.src}:${key.srcPort}` : undefined),
        data: (flow, bytes) => log.push(`${flow} data ${bytes.toString()}`),
        end: (flow, how: FlowEnd) => log.push(`${flow} end ${how}`),
      },
      limits,
    );
    const seg = (p: Packet, now = 0): void => {
      const payload = Buffer.from(p.payload ?? '');
      flows.segment(
        {
          src: p.src ?? '10.0.0.3',
          srcPort: p.srcPort ?? 40000,
          dst: '10.0.0.2',
          dstPort: 3000,
          seq: p.seq >>> 0,
          flags: p.flags,
          payload,
          complete: true,
        },
        now,
      );
    };
    return { log, flows, seg };
  }
  const handshake = (seg: (p: Packet) => void, isn = 1000): void => {
    seg({ seq: isn, flags: SYN });
    seg({ seq: isn + 1, flags: ACK });
  };

  test('bytes come out in order: out-of-order segments wait, retransmits and overlaps are trimmed, FIN ends the flow', () => {
    const { log, flows, seg } = harness();
    handshake(seg);
    seg({ seq: 1001, flags: ACK, payload: 'hello ' });
    seg({ seq: 1011, flags: ACK, payload: 'world' }); // ahead of a gap
    seg({ seq: 1001, flags: ACK, payload: 'hello ' }); // a retransmit of what was delivered
    seg({ seq: 1004, flags: ACK, payload: 'lo big ' }); // overlaps the delivered bytes, fills the gap
    seg({ seq: 1016, flags: ACK | FIN });
    expect(log).toEqual([
      '10.0.0.3:40000 data hello ',
      '10.0.0.3:40000 data big ',
      '10.0.0.3:40000 data world',
      '10.0.0.3:40000 end fin',
    ]);
    expect(flows.size).toBe(0);
  });

  test('a FIN that arrives before the last bytes waits for them; sequence numbers wrap around 2^32', () => {
    const { log, seg } = harness();
    handshake(seg, 0xfffffffd);
    seg({ seq: 0x100000002, flags: ACK | FIN }); // after 'abcd', which wraps
    seg({ seq: 0xfffffffe, flags: ACK, payload: 'abcd' });
    expect(log).toEqual(['10.0.0.3:40000 data abcd', '10.0.0.3:40000 end fin']);
  });

  test('a gap that is never filled drops the flow: when the buffer beyond it overflows, or after holeMs', () => {
    const overflow = harness();
    handshake(overflow.seg);
    overflow.seg({ seq: 1101, flags: ACK, payload: 'x'.repeat(65) });
    expect(overflow.log).toEqual(['10.0.0.3:40000 end hole']);

    const timed = harness();
    handshake(timed.seg);
    timed.seg({ seq: 1001, flags: ACK, payload: 'ok' });
    timed.seg({ seq: 1010, flags: ACK, payload: 'later' }, 100);
    timed.flows.sweep(2000);
    expect(timed.log).toEqual(['10.0.0.3:40000 data ok']);
    timed.flows.sweep(2101);
    expect(timed.log).toEqual(['10.0.0.3:40000 data ok', '10.0.0.3:40000 end hole']);
  });

  test('RST resets the flow; an incomplete packet is a hole', () => {
    const { log, flows, seg } = harness();
    handshake(seg);
    seg({ seq: 1001, flags: ACK | RST });
    handshake((p) => seg({ ...p, srcPort: 40001 }));
    flows.segment(
      {
        src: '10.0.0.3',
        srcPort: 40001,
        dst: '10.0.0.2',
        dstPort: 3000,
        seq: 1001,
        flags: ACK,
        payload: Buffer.from('ab'),
        complete: false,
      },
      0,
    );
    expect(log).toEqual(['10.0.0.3:40000 end rst', '10.0.0.3:40001 end hole']);
  });

  test(
    'ignored: connections without a SYN, handshakes that never complete, SYN-ACKs, flows nobody wants, SYNs ' +
      'beyond maxFlows',
    () => {
      const { log, flows, seg } = harness();
      seg({ seq: 5000, flags: ACK, payload: 'already open' });
      seg({ seq: 7000, flags: SYN | ACK, srcPort: 40002 });
      seg({ seq: 7001, flags: ACK, srcPort: 40002, payload: 'answer' });
      seg({ seq: 8000, flags: SYN, srcPort: 40003 }, 0);
      expect(flows.size).toBe(1);
      flows.sweep(10_001);
      expect(flows.size).toBe(0);
      for (let port = 41000; port < 41010; port++) seg({ seq: 1, flags: SYN, srcPort: port });
      expect(flows.size).toBe(limits.maxFlows);
      expect(log).toEqual([]);

      const unwanted = harness(() => false);
      handshake(unwanted.seg);
      unwanted.seg({ seq: 1001, flags: ACK, payload: 'nobody mirrors this' });
      expect(unwanted.log).toEqual([]);
      expect(unwanted.flows.size).toBe(0);
    },
  );

  test('a retransmitted SYN keeps the flow; a new SYN on the tuple ends the old one; idle flows and clear() end them', () => {
    const { log, flows, seg } = harness();
    handshake(seg);
    seg({ seq: 1000, flags: SYN });
    seg({ seq: 1001, flags: ACK, payload: 'a' });
    handshake(seg, 5000);
    seg({ seq: 5001, flags: ACK, payload: 'b' });
    handshake((p) => seg({ ...p, srcPort: 40001 }));
    flows.sweep(60_001);
    handshake((p) => seg({ ...p, srcPort: 40002 }));
    flows.clear();
    expect(log).toEqual([
      '10.0.0.3:40000 data a',
      '10.0.0.3:40000 end gone',
      '10.0.0.3:40000 data b',
      '10.0.0.3:40000 end gone',
      '10.0.0.3:40001 end gone',
      '10.0.0.3:40002 end gone',
    ]);
  });
});

describe('mirror copies', () => {
  test(
    "a dropped copy resets the session's stream and tells the session why; the close event still counts the " + 'bytes',
    async () => {
      // Given one mirroring session
      const told: string[] = [];
      const traffic: TrafficEvent[] = [];
      const opened: IncomingOpen[] = [];
      const resets: string[] = [];
      const stream = Object.assign(new PassThrough(), { reset: (reason: string) => resets.push(reason) });
      const written: Buffer[] = [];
      stream.on('data', (chunk: Buffer) => written.push(chunk));
      const session = {
        sessionId: 's1',
        takesTraffic: true,
        connected: true,
        reportsStreams: false,
        native: false,
        openIncoming: (open: IncomingOpen) => {
          opened.push(open);
          return stream;
        },
        traffic: (e: TrafficEvent) => traffic.push(e),
        together: <T>(fn: () => T): T => fn(),
        warn: (m: string) => told.push(m),
      };
      const sub: PortSubscription = {
        id: 'sub-1',
        session,
        mode: 'mirror',
        since: new Date(),
        paused: false,
        holder: { user: 'u', host: 'h' },
      };
      const conn = new MirroredConnection(
        [sub],
        3000,
        '3000-m1',
        { address: '10.0.0.3', port: 40000 },
        createLog('warn', () => undefined),
      );
      // When bytes arrive, then the copy loses bytes for good, then the connection closes
      conn.push(Buffer.from('GET / HTTP/1.1\r\n'));
      conn.drop('the packet capture missed some of its packets: the agent fell behind');
      conn.close({ in: 16 });
      // Then the session got the stream, a reset, one notice naming the connection and the reason, and open/close
      // events
      expect(opened).toEqual([
        {
          kind: 'incoming',
          port: 3000,
          mode: 'mirror',
          remoteAddress: '10.0.0.3',
          remotePort: 40000,
          subscriptionId: 'sub-1',
        },
      ]);
      expect(resets).toEqual([
        'mirror copy dropped: the packet capture missed some of its packets: the agent fell behind',
      ]);
      expect(told).toEqual([
        'mirror of :3000: copy of connection 3000-m1 dropped (the packet capture missed some of its packets: ' +
          'the agent fell behind); the pod was not affected',
      ]);
      expect(traffic.map((e) => e.kind === 'connection' && [e.phase, e.bytesIn, e.bytesOut])).toEqual([
        ['open', undefined, undefined],
        ['close', 16, undefined],
      ]);
      // And nothing of the dropped copy reached the stream (it would have, 2 ms after the push, had it been kept)
      await new Promise((r) => setTimeout(r, 20));
      expect(written).toEqual([]);
    },
  );
});
