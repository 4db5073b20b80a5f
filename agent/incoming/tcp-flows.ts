// Rebuilds the client→server byte stream of each TCP connection from captured segments (agent/incoming/pcap.ts): in
// order, with retransmits trimmed and a bounded out-of-order buffer. Pure (the caller passes the time), so synthetic
// segments test it.
import { TCP_FLAGS, type TcpSegment } from './pcap.js';

export interface FlowKey {
  src: string;
  srcPort: number;
  dst: string;
  dstPort: number;
}

/**
 * How a flow ended: `fin` the client finished sending, `rst` the client reset it, `hole` bytes are missing for good
 * (the capture dropped packets or cut one short), `gone` it ended without a close the capture saw (idle, tuple reused,
 * stopped).
 */
export type FlowEnd = 'fin' | 'rst' | 'hole' | 'gone';

export interface FlowHandlers<F> {
  /**
   * The client's first ACK: the handshake completed. Returns the flow's handle, or undefined to ignore the connection.
   */
  open(key: FlowKey): F | undefined;
  data(flow: F, bytes: Buffer): void;
  end(flow: F, how: FlowEnd): void;
}

export interface FlowLimits {
  /** Bytes a flow may hold beyond a gap; more means the gap is not a reordering but a loss. */
  maxOutOfOrder: number;
  /** A gap still open after this long is a loss (TCP would have retransmitted by then). */
  holeMs: number;
  /** A connection that sent nothing for this long is forgotten. */
  idleMs: number;
  /** A SYN whose handshake did not complete within this long is forgotten. */
  handshakeMs: number;
  /** Flows tracked at most; SYNs beyond it are not mirrored. */
  maxFlows: number;
}

interface Flow<F> {
  isn: number;
  /** Sequence number of the next byte to deliver (mod 2^32). */
  next: number;
  /** Set once the handshake completed (a flow whose open() said no is forgotten at once). */
  handle: F | undefined;
  finSeq: number | undefined;
  outOfOrder: Array<{ seq: number; data: Buffer }>;
  outOfOrderBytes: number;
  holeSince: number | undefined;
  lastSeen: number;
}

/** Signed distance from b to a in sequence space (RFC 1982 arithmetic on 32 bits). */
function seqDiff(a: number, b: number): number {
  return (a - b) | 0;
}

export class TcpReassembler<F> {
  private readonly flows = new Map<string, Flow<F>>();

  constructor(
    private readonly handlers: FlowHandlers<F>,
    private readonly limits: FlowLimits,
  ) {}

  get size(): number {
    return this.flows.size;
  }

  segment(seg: TcpSegment, now: number): void {
    const id = `${seg.src}:${seg.srcPort}>${seg.dst}:${seg.dstPort}`;
    const flow = this.flows.get(id);
    if (seg.flags & TCP_FLAGS.SYN) {
      if (seg.flags & TCP_FLAGS.ACK) return; // a SYN-ACK: an answer to a connection the pod made from this port
      if (flow?.isn === seg.seq) {
        flow.lastSeen = now; // a retransmitted SYN
        return;
      }
      if (flow) this.finish(id, flow, 'gone'); // the client reuses the tuple: its earlier connection is over
      if (this.flows.size >= this.limits.maxFlows) return;
      // Data on a SYN (TCP Fast Open) is not taken: the flow then has a gap and its copy is dropped, visibly.
      const next = (seg.seq + 1) >>> 0;
      this.flows.set(id, {
        isn: seg.seq,
        next,
        handle: undefined,
        finSeq: undefined,
        outOfOrder: [],
        outOfOrderBytes: 0,
        holeSince: undefined,
        lastSeen: now,
      });
      return;
    }
    if (!flow) return; // the connection began before the capture: not mirrored
    flow.lastSeen = now;
    if (seg.flags & TCP_FLAGS.RST) {
      this.finish(id, flow, 'rst');
      return;
    }
    if (flow.handle === undefined) {
      if (!(seg.flags & TCP_FLAGS.ACK)) return;
      flow.handle = this.handlers.open({ src: seg.src, srcPort: seg.srcPort, dst: seg.dst, dstPort: seg.dstPort });
      if (flow.handle === undefined) {
        this.flows.delete(id);
        return;
      }
    }
    if (!seg.complete) {
      this.finish(id, flow, 'hole');
      return;
    }
    if (seg.flags & TCP_FLAGS.FIN) flow.finSeq = (seg.seq + seg.payload.length) >>> 0;
    if (seg.payload.length > 0) this.accept(flow, flow.handle, seg.seq, seg.payload, now);
    if (flow.finSeq !== undefined && flow.next === flow.finSeq) this.finish(id, flow, 'fin');
    else if (flow.outOfOrderBytes > this.limits.maxOutOfOrder) this.finish(id, flow, 'hole');
  }

  /** Ends flows whose gap, handshake or silence lasted too long; call it about once a second. */
  sweep(now: number): void {
    for (const [id, flow] of this.flows) {
      if (flow.handle === undefined) {
        if (now - flow.lastSeen > this.limits.handshakeMs) this.flows.delete(id);
      } else if (flow.holeSince !== undefined && now - flow.holeSince > this.limits.holeMs)
        this.finish(id, flow, 'hole');
      else if (now - flow.lastSeen > this.limits.idleMs) this.finish(id, flow, 'gone');
    }
  }

  /** Ends every flow (the capture stops). */
  clear(): void {
    for (const [id, flow] of this.flows) this.finish(id, flow, 'gone');
  }

  private accept(flow: Flow<F>, handle: F, seq: number, data: Buffer, now: number): void {
    const offset = seqDiff(seq, flow.next);
    if (offset + data.length <= 0) return; // all of it was delivered already: a retransmit
    if (offset > 0) {
      // Copied: the capture's chunk it points into would otherwise stay alive with it.
      flow.outOfOrder.push({ seq, data: Buffer.from(data) });
      flow.outOfOrderBytes += data.length;
      flow.holeSince ??= now;
      return;
    }
    this.deliver(flow, handle, data.subarray(-offset));
    this.drain(flow, handle);
  }

  /** Delivers the buffered segments that the gap's filling made contiguous (trimming overlaps), in order. */
  private drain(flow: Flow<F>, handle: F): void {
    let progress = true;
    while (progress && flow.outOfOrder.length > 0) {
      progress = false;
      for (let i = 0; i < flow.outOfOrder.length; i++) {
        const { seq, data } = flow.outOfOrder[i];
        const offset = seqDiff(seq, flow.next);
        if (offset > 0) continue;
        flow.outOfOrder.splice(i, 1);
        flow.outOfOrderBytes -= data.length;
        if (offset + data.length > 0) this.deliver(flow, handle, data.subarray(-offset));
        progress = true;
        break;
      }
    }
    if (flow.outOfOrder.length === 0) flow.holeSince = undefined;
  }

  private deliver(flow: Flow<F>, handle: F, bytes: Buffer): void {
    flow.next = (flow.next + bytes.length) >>> 0;
    this.handlers.data(handle, bytes);
  }

  private finish(id: string, flow: Flow<F>, how: FlowEnd): void {
    this.flows.delete(id);
    if (flow.handle !== undefined) this.handlers.end(flow.handle, how);
  }
}
