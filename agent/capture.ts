// Mirror by packet capture: one tcpdump per mirrored port, in the pod's netns (the agent's own), copies the packets
// that clients send to the port; the agent rebuilds each connection's bytes (agent/pcap.ts, agent/tcp-flows.ts) and
// sends them to the mirroring sessions. The agent is not in the pod's data path: when it falls behind, the kernel drops
// captured packets (that connection's copy is dropped and its sessions told), never the pod's.
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import type { AgentLog } from './log.js';
import { MirroredConnection } from './mirror.js';
import { PcapReader } from './pcap.js';
import type { PortSubscription } from './subscription.js';
import { TcpReassembler, type FlowEnd, type FlowLimits } from './tcp-flows.js';

/**
 * The kernel's capture ring per port (tcpdump -B, KiB). It absorbs bursts while tcpdump or the agent is busy; when it
 * overflows the kernel drops captured packets, never the pod's. The whole ring is mapped into tcpdump and counts in the
 * agent's RSS from the start (8 MiB made tcpdump 13.7 MiB, 2 MiB 7.8). 2 MiB holds twice what the agent buffers for
 * one copy (MIRROR_BUFFER_LIMIT) while the tunnel drains it: a 1 MiB upload at veth speed is copied whole
 * (test/agent/mirror.test.ts), which 1 MiB of ring is not.
 */
export const CAPTURE_BUFFER_KIB = 2048;
/** The largest IPv4 packet: receive offload can hand the pod packets far above the MTU, each must be captured whole. */
export const CAPTURE_SNAPLEN = 65_535;
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
/** tcpdump says "listening on" once its filter is in place; starting takes milliseconds, this is for a loaded node. */
const START_TIMEOUT_MS = 10_000;
const HOLE_NOTICE = 'the packet capture missed some of its packets: the agent fell behind';

/**
 * What is captured: packets that arrive at the port from outside (`inbound`; not lo, ifindex 1 in every netns: what the
 * pod sends itself was never mirrored), IPv4 only, optionally not from one source (the node: kubelet's probes). The
 * whole filter runs in the kernel, so other traffic costs the agent nothing.
 */
export function captureFilter(port: number, skipSource?: string): string {
  return (
    `inbound and ip and tcp dst port ${port} and not ifindex ` +
    `1${skipSource ? ` and not src host ${skipSource}` : ''}`
  );
}

/**
 * tcpdump's arguments: all interfaces; the pcap stream on stdout, flushed per packet (-U); whole packets; no name
 * lookups. The direction is in the filter (`inbound`, run by the kernel) rather than -Q in, which libpcap 1.10 applies
 * in user space. Without --immediate-mode libpcap reads the ring in blocks (TPACKET_V3) and a block waits up to 1 s for
 * more packets: copies arrive up to a second late, but tcpdump and the agent wake about once a second, not once per
 * packet, and so take next to no CPU from the pod at the moment it answers (per-packet wake-ups cost the pod +28–35 %
 * p50 in bench/steal.ts on a 2-core machine).
 * `-Z root`: tcpdump stays the agent's user instead of dropping to its own, which would take CAP_SETUID to switch and
 * CAP_KILL for the agent to stop it again; it only resets its groups (CAP_SETGID). It runs with the agent's
 * capabilities either way, so dropping would protect nothing.
 */
export function tcpdumpArgs(port: number, skipSource?: string): string[] {
  return [
    '-Z',
    'root',
    '-i',
    'any',
    '-U',
    '-w',
    '-',
    '-s',
    String(CAPTURE_SNAPLEN),
    '-B',
    String(CAPTURE_BUFFER_KIB),
    '-n',
    captureFilter(port, skipSource),
  ];
}

/**
 * tcpdump runs under a watchdog shell that holds a pipe from the agent on its stdin: however the agent ends (kill -9
 * included) the pipe closes and the shell kills tcpdump. A parent-death signal would not do: tcpdump changes its
 * credentials after opening the capture (-Z), which clears it. Only tcpdump keeps the stdout/stderr pipes, so their end
 * means tcpdump is gone.
 */
const WATCHDOG = [
  "command -v tcpdump >/dev/null || { echo 'tcpdump is not installed' >&2; exit 127; }",
  'tcpdump "$@" &',
  'exec >/dev/null 2>&1',
  'read -r _',
  'kill $!',
].join('\n');

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

  /** `subs` is the port's subscription list (agent/ports.ts); `onFail` hears of a capture that stopped by itself. */
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
    this.child = spawn('sh', ['-c', WATCHDOG, 'devop-capture', ...tcpdumpArgs(port, opts.skipSource)], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.child.stdin.on('error', () => undefined);
    this.child.stdout.on('data', (chunk: Buffer) => this.packets(chunk));
    this.sweeper = setInterval(() => this.flows.sweep(Date.now()), SWEEP_MS);
    this.sweeper.unref();
    let listening = (): void => undefined;
    let gone = (): void => undefined;
    this.started = new Promise<void>((resolve, reject) => {
      listening = resolve;
      gone = () => reject(new Error(this.reason()));
      this.child.once('error', reject);
      setTimeout(
        () => reject(new Error(`tcpdump did not start within ${START_TIMEOUT_MS / 1000} s`)),
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
    // tcpdump is gone once both of its pipes closed (then its last words, on stderr, have been read).
    let pipes = 2;
    const closed = (): void => {
      if (--pipes > 0) return;
      gone();
      this.child.stdin.end(); // the watchdog's turn to go
      if (this.closed) {
        this.log.info('capture stopped', {
          port,
          tcpdump: this.stderr.filter((l) => l.includes('packets')).join('; '),
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

  /** Resolves once tcpdump captures (its filter is in place); rejects with the reason it could not start. */
  start(): Promise<void> {
    return this.started.catch((err: Error) => {
      this.close();
      throw err;
    });
  }

  /**
   * Stops the capture: tcpdump goes (its watchdog kills it; failing that, its next write meets a closed pipe), open
   * copies end.
   */
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
    return this.stderr.filter((l) => !l.includes('data link type')).join('; ') || 'tcpdump exited';
  }

  private packets(chunk: Buffer): void {
    if (this.closed) return;
    try {
      const now = Date.now();
      for (const segment of this.reader.push(chunk)) this.flows.segment(segment, now);
    } catch (err) {
      this.log.warn('capture stream unreadable', { port: this.port, error: (err as Error).message });
      this.child.stdin.end();
    }
  }

  private open(address: string, port: number): CapturedConnection | undefined {
    const mirrors = this.subs.filter((s) => s.mode === 'mirror' && s.session.connected && !s.paused);
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
