// Mirror copies of a connection: the client's bytes go to each mirroring session a moment after they went to the app,
// coalesced, so that the copy never competes with the original exchange; a session that falls behind loses the copy,
// not the pod. The bytes come from the packet capture (agent/incoming/capture.ts) or, without it, from the agent's own
// forward.
import type { TrafficEvent } from '../../shared/protocol.js';
import type { AgentLog } from '../log.js';
import type { MirroredRequests } from './mirror-requests.js';
import { MirrorCopy } from './mirror-copy.js';
import type { PortSubscription } from './subscription.js';

export { MIRROR_BUFFER_LIMIT, MIRROR_COALESCE_MS, MirrorCopy } from './mirror-copy.js';

// The HTTP parsers of filtered mirrors (node:http, node:http2) load with the first filtered mirror: an agent that only
// mirrors whole ports, or steals, never pays their memory.
let requestsClass: typeof MirroredRequests | undefined;

/** Before a filtered mirror's first connection: loads agent/incoming/mirror-requests.ts. */
export async function loadFilteredMirror(): Promise<void> {
  requestsClass ??= (await import('./mirror-requests.js')).MirroredRequests;
}

/**
 * One client connection as the mirroring sessions see it: its open/close traffic events, and an `incoming` stream each
 * for whole-port mirrors, or a copy per matching request for filtered ones (agent/incoming/mirror-requests.ts).
 */
export class MirroredConnection {
  private readonly copies: Array<{ sub: PortSubscription; copy: MirrorCopy }>;
  private readonly requests: MirroredRequests | undefined;
  private readonly filtered: PortSubscription[];
  private readonly event: Omit<Extract<TrafficEvent, { kind: 'connection' }>, 'phase' | 'at'>;

  constructor(
    subs: PortSubscription[],
    port: number,
    connId: string,
    remote: { address: string; port: number },
    log: AgentLog,
  ) {
    this.event = {
      kind: 'connection',
      connId,
      port,
      remoteAddress: remote.address,
      remotePort: remote.port,
      to: 'pod',
    };
    this.filtered = subs.filter((s) => s.match && s.session.takesTraffic);
    // Loaded by PortTable.subscribe() before a filtered mirror counts.
    this.requests =
      this.filtered.length > 0 && requestsClass
        ? new requestsClass(this.filtered, { port, connId, remote, log })
        : undefined;
    for (const sub of this.filtered) sub.session.traffic({ ...this.event, phase: 'open', at: Date.now() });
    this.copies = subs.flatMap((sub) => {
      if (sub.match) return [];
      try {
        // The stream's OPEN and its traffic event leave in one write.
        const stream = sub.session.together(() => {
          const opened = sub.session.openIncoming({
            kind: 'incoming',
            port,
            mode: 'mirror',
            remoteAddress: remote.address,
            remotePort: remote.port,
            subscriptionId: sub.id,
          });
          sub.session.traffic({ ...this.event, phase: 'open', at: Date.now() });
          return opened;
        });
        stream.on('error', () => undefined);
        stream.resume(); // the local command's answers to a mirrored connection are dropped
        return [
          {
            sub,
            copy: new MirrorCopy(stream, (why) => {
              sub.session.warn(
                `mirror of :${port}: copy of connection ${connId} dropped (${why}); the pod was not affected`,
              );
              log.warn('mirror copy dropped', { port, connId, session: sub.session.sessionId, why });
            }),
          },
        ];
      } catch {
        return []; // that session's tunnel just went
      }
    });
  }

  /** No session took a copy. */
  get empty(): boolean {
    return this.copies.length === 0 && this.requests === undefined;
  }

  push(chunk: Buffer): void {
    for (const c of this.copies) c.copy.push(chunk);
    this.requests?.push(chunk);
  }

  /** The client finished sending. */
  end(): void {
    for (const c of this.copies) c.copy.end();
    this.requests?.end();
  }

  /** Bytes of the connection are missing for good: every copy goes, and each session is told why. */
  drop(why: string): void {
    for (const c of this.copies) c.copy.drop(why);
    this.requests?.close();
  }

  /** The connection is over: the copies end (or are reset with `resetReason`) and each session gets the close event. */
  close(bytes: { in: number; out?: number }, resetReason?: string): void {
    if (this.requests) {
      // The parser may still hold the last bytes it was given: it closes once it has read them.
      this.requests.finish();
      for (const sub of this.filtered)
        sub.session.traffic({ ...this.event, phase: 'close', bytesIn: bytes.in, bytesOut: bytes.out, at: Date.now() });
    }
    for (const c of this.copies) {
      if (resetReason) c.copy.reset(resetReason);
      else c.copy.end();
      c.sub.session.traffic({ ...this.event, phase: 'close', bytesIn: bytes.in, bytesOut: bytes.out, at: Date.now() });
    }
  }
}
