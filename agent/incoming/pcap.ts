// Reads the pcap stream that the capture writes (agent/native/capture.c; tcpdump's `-w -` is the same format) and
// decodes each record down to its TCP segment (over IPv4 or IPv6): the pure, I/O-free half of mirroring by packet
// capture (agent/incoming/capture.ts), so that synthetic captures can test it.

/** Link-layer header types of a pcap file (the `network` field of its global header). */
export const LINKTYPE = { EN10MB: 1, RAW: 101, LINUX_SLL: 113, LINUX_SLL2: 276 } as const;
export const TCP_FLAGS = { FIN: 0x01, SYN: 0x02, RST: 0x04, ACK: 0x10 } as const;

const KNOWN_LINKTYPES = new Set<number>(Object.values(LINKTYPE));
const GLOBAL_HEADER = 24;
const RECORD_HEADER = 16;
const MAGIC_MICROS = 0xa1b2c3d4;
const MAGIC_NANOS = 0xa1b23c4d;
/**
 * No record is larger than the largest snapshot length (tcpdump's too); a bigger length means the stream is corrupt.
 */
const MAX_RECORD = 262_144;
const ETHERTYPE_IPV4 = 0x0800;
const ETHERTYPE_IPV6 = 0x86dd;
const IS_IP = (type: number) => type === ETHERTYPE_IPV4 || type === ETHERTYPE_IPV6;
const ETHERTYPES_VLAN = new Set([0x8100, 0x88a8]);
/** Cooked headers: a packet this host sent (Linux PACKET_OUTGOING), and the loopback device's hardware type. */
const PACKET_OUTGOING = 4;
const ARPHRD_LOOPBACK = 772;
const IP_MORE_FRAGMENTS = 0x2000;
const IP_FRAGMENT_OFFSET = 0x1fff;

export interface TcpSegment {
  src: string;
  srcPort: number;
  dst: string;
  dstPort: number;
  seq: number;
  flags: number;
  payload: Buffer;
  /** False when the capture cut the packet short (snapshot length): its payload is missing bytes. */
  complete: boolean;
}

export class PcapReader {
  private pending: Buffer = Buffer.alloc(0);
  private format: { littleEndian: boolean; linkType: number } | undefined;

  /**
   * Feeds the next chunk of the stream; returns the TCP segments of the records it completed. Throws on a corrupt
   * stream.
   */
  push(chunk: Buffer): TcpSegment[] {
    const buf = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    let at = 0;
    if (!this.format) {
      if (buf.length < GLOBAL_HEADER) {
        this.pending = buf;
        return [];
      }
      this.format = readGlobalHeader(buf);
      at = GLOBAL_HEADER;
    }
    const { littleEndian, linkType } = this.format;
    const u32 = (offset: number): number => (littleEndian ? buf.readUInt32LE(offset) : buf.readUInt32BE(offset));
    const segments: TcpSegment[] = [];
    while (buf.length - at >= RECORD_HEADER) {
      const captured = u32(at + 8);
      if (captured > MAX_RECORD) throw new Error(`corrupt pcap stream: a record of ${captured} bytes`);
      if (buf.length - at - RECORD_HEADER < captured) break;
      const frame = buf.subarray(at + RECORD_HEADER, at + RECORD_HEADER + captured);
      const segment = decodeFrame(linkType, frame);
      if (segment) segments.push(segment);
      at += RECORD_HEADER + captured;
    }
    this.pending = buf.subarray(at);
    return segments;
  }
}

function readGlobalHeader(buf: Buffer): { littleEndian: boolean; linkType: number } {
  const magicLE = buf.readUInt32LE(0);
  const magicBE = buf.readUInt32BE(0);
  let littleEndian: boolean;
  if (magicLE === MAGIC_MICROS || magicLE === MAGIC_NANOS) littleEndian = true;
  else if (magicBE === MAGIC_MICROS || magicBE === MAGIC_NANOS) littleEndian = false;
  else throw new Error(`not a pcap stream (magic 0x${magicBE.toString(16)})`);
  // The upper bits of the link-type field may carry FCS information; the type is the lower 16.
  const linkType = (littleEndian ? buf.readUInt32LE(20) : buf.readUInt32BE(20)) & 0xffff;
  if (!KNOWN_LINKTYPES.has(linkType)) throw new Error(`pcap link type ${linkType} is not supported`);
  return { littleEndian, linkType };
}

/** The IP packet inside a link-layer frame, or -1 for anything the mirror skips (ARP, loopback, outgoing). */
function ipOffset(linkType: number, frame: Buffer): number {
  switch (linkType) {
    case LINKTYPE.LINUX_SLL2:
      if (frame.length < 20 || frame.readUInt16BE(8) === ARPHRD_LOOPBACK || frame[10] === PACKET_OUTGOING) return -1;
      return IS_IP(frame.readUInt16BE(0)) ? 20 : -1;
    case LINKTYPE.LINUX_SLL:
      if (frame.length < 16 || frame.readUInt16BE(0) === PACKET_OUTGOING || frame.readUInt16BE(2) === ARPHRD_LOOPBACK)
        return -1;
      return IS_IP(frame.readUInt16BE(14)) ? 16 : -1;
    case LINKTYPE.EN10MB: {
      let at = 12;
      while (frame.length >= at + 2 && ETHERTYPES_VLAN.has(frame.readUInt16BE(at))) at += 4;
      return frame.length >= at + 2 && IS_IP(frame.readUInt16BE(at)) ? at + 2 : -1;
    }
    default: // RAW: the frame is the IP packet
      return frame.length > 0 ? 0 : -1;
  }
}

/** Decodes one captured frame; undefined unless it is an unfragmented TCP segment over IPv4 or IPv6. */
export function decodeFrame(linkType: number, frame: Buffer): TcpSegment | undefined {
  const ip = ipOffset(linkType, frame);
  if (ip >= 0 && frame.length >= ip + 40 && frame[ip] >> 4 === 6) return decodeIPv6(frame, ip);
  if (ip < 0 || frame.length < ip + 20 || frame[ip] >> 4 !== 4 || frame[ip + 9] !== 6) return undefined;
  const ipHeader = (frame[ip] & 0x0f) * 4;
  const total = frame.readUInt16BE(ip + 2);
  // Fragments carry no (or half a) TCP segment: skipped, so the flow sees a gap (TCP normally avoids fragmenting).
  if (frame.readUInt16BE(ip + 6) & (IP_MORE_FRAGMENTS | IP_FRAGMENT_OFFSET)) return undefined;
  const tcp = ip + ipHeader;
  if (frame.length < tcp + 20) return undefined;
  // The IP total length, not the frame's, ends the segment: Ethernet pads short frames.
  return tcpSegment(frame, tcp, ip + total, {
    src: `${frame[ip + 12]}.${frame[ip + 13]}.${frame[ip + 14]}.${frame[ip + 15]}`,
    dst: `${frame[ip + 16]}.${frame[ip + 17]}.${frame[ip + 18]}.${frame[ip + 19]}`,
  });
}

/** The TCP segment at `tcp` that IP says ends at `end`, between these addresses; undefined when its header is bad. */
function tcpSegment(
  frame: Buffer,
  tcp: number,
  end: number,
  ends: { src: string; dst: string },
): TcpSegment | undefined {
  const tcpHeader = (frame[tcp + 12] >> 4) * 4;
  if (tcpHeader < 20 || end < tcp + tcpHeader) return undefined;
  return {
    ...ends,
    srcPort: frame.readUInt16BE(tcp),
    dstPort: frame.readUInt16BE(tcp + 2),
    seq: frame.readUInt32BE(tcp + 4),
    flags: frame[tcp + 13],
    payload: frame.subarray(Math.min(tcp + tcpHeader, frame.length), Math.min(end, frame.length)),
    complete: frame.length >= end,
  };
}

/**
 * An IPv6 packet's TCP segment, when TCP is the next header (no extension headers: a fragment header, for one, would
 * come first; such packets are skipped and the flow sees a gap, as with IPv4 fragments).
 */
function decodeIPv6(frame: Buffer, ip: number): TcpSegment | undefined {
  if (frame[ip + 6] !== 6) return undefined;
  const tcp = ip + 40;
  const end = tcp + frame.readUInt16BE(ip + 4); // the payload length: what follows the fixed header
  if (frame.length < tcp + 20) return undefined;
  return tcpSegment(frame, tcp, end, {
    src: ipv6Text(frame.subarray(ip + 8, ip + 24)),
    dst: ipv6Text(frame.subarray(ip + 24, ip + 40)),
  });
}

/** 16 bytes as RFC 5952 text (what Node's remoteAddress shows): lower-case, the longest run of zero groups as `::`. */
export function ipv6Text(bytes: Buffer): string {
  const groups = Array.from({ length: 8 }, (_, i) => bytes.readUInt16BE(i * 2));
  let best = { at: -1, length: 1 };
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > best.length) best = { at: i, length: j - i };
    i = j === i ? i + 1 : j;
  }
  const text = (from: number, to: number) =>
    groups
      .slice(from, to)
      .map((g) => g.toString(16))
      .join(':');
  if (best.at < 0) return text(0, 8);
  return `${text(0, best.at)}::${text(best.at + best.length, 8)}`;
}
