// Mirror by packet capture: one capture process per mirrored port (devop-capture, agent/native/capture.c), in the pod's
// netns (the agent's own), copies the packets that clients send to the port; the agent rebuilds each connection's bytes
// (agent/incoming/pcap.ts, agent/incoming/tcp-flows.ts) and sends them to the mirroring sessions. The agent is not in
// the pod's data path: when it falls behind, the kernel drops captured packets (that connection's copy is dropped and
// its sessions told), never the pod's.
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { dirname, join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import type { AgentLog } from '../log.js';
import { MirroredConnection } from './mirror.js';
import { PcapReader } from './pcap.js';
import type { PortSubscription } from './subscription.js';
import { TcpReassembler, type FlowEnd, type FlowLimits } from './tcp-flows.js';

/**
 * The capture's receive buffer per port (KiB; the kernel doubles it). It absorbs bursts while the capture or the agent
 * is busy; when it overflows the kernel drops captured packets, never the pod's. It is kernel memory, used only while
 * packets wait, not pages mapped into the agent. 2 MiB holds twice what the agent buffers for one copy
 * (MIRROR_BUFFER_LIMIT): an upload that fits that buffer, sent at veth speed, arrives in one batch and is copied
 * whole (test/agent/mirror.test.ts); a larger one arriving at once loses its copy, never the pod its bytes.
 */
export const CAPTURE_BUFFER_KIB = 2048;
export const FLOW_LIMITS: FlowLimits = {
  maxOutOfOrder: 256 * 1024,
  // TCP retransmits a segment the network lost within its retransmission timeout (200 ms at least, 1 s at first): a
  // gap still open after 2 s was lost by the capture, which nothing retransmits.
  holeMs: 2000,
  // Generous: a keep-alive connection may idle for long and still carry requests; forgetting it ends its copy.
  idleMs: 30 * 60_000,
  // Linux gives up a connect after ~127 s of SYN retries.
  handshakeMs: 3 * 60_000,
  // As many as one session may hold streams (shared/mux.ts MAX_STREAMS).
  maxFlows: 10_000,
};
const SWEEP_MS = 1000;
/**
 * The capture says "listening on" once its filter is in place; starting takes a millisecond, this is for a loaded node.
 */
const START_TIMEOUT_MS = 10_000;
const HOLE_NOTICE = 'the packet capture missed some of its packets: the agent fell behind';

/** The capture program: next to the agent's bundle (/opt/devop in the image, dist/ in a checkout). */
export function captureProgram(): string {
  return join(dirname(process.argv[1] ?? '.'), 'devop-capture');
}

/**
 * devop-capture's arguments: the port, the receive buffer, and a source not to capture (the node: kubelet's probes).
 * What it takes is fixed in its kernel filter: packets that arrive at the port from outside (not lo: what the pod sends
 * itself was never mirrored), IPv4 TCP; it reads them in batches (at most every 100 ms while they come), so the
 * capture and the agent do not wake once per packet (per-packet wake-ups cost the pod +28–35 % p50 in bench/steal.ts
 * on a 2-core machine), and a copy reaches the session at most ~0.1 s after the bytes reached the app.
 */
export function captureArgs(port: number, skipSource?: string): string[] {
  return [String(port), String(CAPTURE_BUFFER_KIB), ...(skipSource ? [skipSource] : [])];
}

interface CapturedConnection {
  mirrored: MirroredConnection;
  bytesIn: number;
}

export class PortCapture {
  private readonly child: ChildProcessByStdio<Writable, Readable, Readable>;
  private readonly reader = new PcapReader();
  private readonly flows: TcpReassembler<CapturedConnection>;
  private readonly sweeper: NodeJS.Timeout;
  private readonly stderr: string[] = [];
  private readonly started: Promise<void>;
  private closed = false;
  private nextConn = 0;

  /**
   * `subs` is the port's subscription list (agent/incoming/ports.ts); `onFail` hears of a capture that stopped by
   * itself.
   */
  constructor(
    readonly port: number,
    private readonly subs: PortSubscription[],
    private readonly log: AgentLog,
    opts: { skipSource?: string; onFail: (reason: string) => void },
  ) {
    this.flows = new TcpReassembler<CapturedConnection>(
      {
        open: (key) => this.open(key.src, key.srcPort),
        data: (c, bytes) => this.data(c, bytes),
        end: (c, how) => this.end(c, how),
      },
      FLOW_LIMITS,
    );
    // It ends when its stdin closes (close(), or the agent's end however it comes) and by a parent-death signal.
    this.child = spawn(captureProgram(), captureArgs(port, opts.skipSource), { stdio: ['pipe', 'pipe', 'pipe'] });
    this.child.stdin.on('error', () => undefined);
    this.child.stdout.on('data', (chunk: Buffer) => this.packets(chunk));
    this.sweeper = setInterval(() => this.flows.sweep(Date.now()), SWEEP_MS);
    this.sweeper.unref();
    let listening = (): void => undefined;
    let gone = (): void => undefined;
    this.started = new Promise<void>((resolve, reject) => {
      listening = resolve;
      gone = () => reject(new Error(this.reason()));
      this.child.once('error', (err: NodeJS.ErrnoException) =>
        reject(err.code === 'ENOENT' ? new Error(`the capture program ${captureProgram()} is missing`) : err),
      );
      setTimeout(
        () => reject(new Error(`the packet capture did not start within ${START_TIMEOUT_MS / 1000} s`)),
        START_TIMEOUT_MS,
      ).unref();
    });
    this.started.catch(() => undefined); // start() reports it
    let lineBuf = '';
    this.child.stderr.on('data', (chunk: Buffer) => {
      const lines = (lineBuf + chunk.toString()).split('\n');
      lineBuf = lines.pop() ?? '';
      for (const line of lines) {
        this.stderr.push(line);
        if (line.includes('listening on')) listening();
      }
      this.stderr.splice(0, this.stderr.length - 5);
    });
    // The capture is gone once both of its pipes closed (then its last words, on stderr, have been read).
    let pipes = 2;
    const closed = (): void => {
      if (--pipes > 0) return;
      gone();
      if (this.closed) {
        this.log.info('capture stopped', {
          port,
          counts: this.stderr.filter((l) => l.includes('packets')).join('; '),
        });
        return;
      }
      this.stop();
      void this.started.then(
        () => opts.onFail(this.reason()),
        () => undefined,
      );
    };
    this.child.stdout.once('close', closed);
    this.child.stderr.once('close', closed);
  }

  /** Resolves once the capture runs (its filter is in place); rejects with the reason it could not start. */
  start(): Promise<void> {
    return this.started.catch((err: Error) => {
      this.close();
      throw err;
    });
  }

  /** Stops the capture: it sees its stdin close (failing that, its next write meets a closed pipe); open copies end. */
  close(): void {
    if (this.closed) return;
    this.stop();
    this.child.stdin.end();
    this.child.stdout.destroy();
  }

  private stop(): void {
    this.closed = true;
    clearInterval(this.sweeper);
    this.flows.clear();
  }

  private reason(): string {
    return this.stderr.join('; ') || 'the packet capture exited';
  }

  private packets(chunk: Buffer): void {
    if (this.closed) return;
    try {
      const now = Date.now();
      for (const segment of this.reader.push(chunk)) this.flows.segment(segment, now);
    } catch (err) {
      this.log.error('capture stream unreadable', { port: this.port, error: (err as Error).message });
      this.child.stdin.end();
    }
  }

  private open(address: string, port: number): CapturedConnection | undefined {
    const mirrors = this.subs.filter((s) => s.mode === 'mirror' && s.session.takesTraffic && !s.paused);
    if (mirrors.length === 0) return undefined;
    const mirrored = new MirroredConnection(
      mirrors,
      this.port,
      `${this.port}-m${++this.nextConn}`,
      { address, port },
      this.log,
    );
    return mirrored.empty ? undefined : { mirrored, bytesIn: 0 };
  }

  private data(conn: CapturedConnection, bytes: Buffer): void {
    conn.bytesIn += bytes.length;
    conn.mirrored.push(bytes);
  }

  /** Only the client's packets are captured: bytes out (the pod's answers) are not counted. */
  private end(conn: CapturedConnection, how: FlowEnd): void {
    if (how === 'hole') conn.mirrored.drop(HOLE_NOTICE);
    conn.mirrored.close({ in: conn.bytesIn }, how === 'rst' ? 'client connection reset' : undefined);
  }
}
