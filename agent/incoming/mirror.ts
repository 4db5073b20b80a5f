// Mirror copies of a connection: the client's bytes go to each mirroring session a moment after they went to the app,
// coalesced, so that the copy never competes with the original exchange; a session that falls behind loses the copy,
// not the pod. The bytes come from the packet capture (agent/incoming/capture.ts) or, without it, from the agent's own
// forward.
import type { TrafficEvent } from '../../shared/protocol.js';
import type { AgentLog } from '../log.js';
import type { IncomingStream, PortSubscription } from './subscription.js';

/**
 * A copy is abandoned once this many bytes wait for the session: the copy must never slow the original exchange, and a
 * copy with a hole in it is worthless, so the whole copy of that connection goes (and the session is told).
 */
export const MIRROR_BUFFER_LIMIT = 1024 * 1024;
/**
 * Copies are sent this long after the bytes arrived: by then the app has usually answered, so waking the tunnel (and
 * the CLI behind it) for the copy does not delay the answer on a busy node. Mirror answers are dropped, so nothing
 * waits.
 */
export const MIRROR_COALESCE_MS = 2;

export class MirrorCopy {
  dropped = false;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly stream: IncomingStream,
    private readonly onDrop: (why: string) => void,
  ) {}

  push(chunk: Buffer): void {
    if (this.dropped) return;
    if (this.stream.destroyed || this.stream.writableLength + this.pendingBytes + chunk.length > MIRROR_BUFFER_LIMIT) {
      this.drop('the tunnel did not keep up');
      return;
    }
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    this.timer ??= setTimeout(() => this.flush(), MIRROR_COALESCE_MS);
  }

  /** The client finished sending: send what is left and half-close the copy. */
  end(): void {
    if (this.dropped || this.stream.writableEnded || this.stream.destroyed) return;
    this.flush();
    this.stream.end();
  }

  /** Abandons the copy (the session cannot keep up, or bytes are missing): its stream is reset and the session told. */
  drop(why: string): void {
    if (this.dropped) return;
    this.abandon(`mirror copy dropped: ${why}`);
    this.onDrop(why);
  }

  /** The client reset its connection: so is the copy. */
  reset(reason: string): void {
    if (!this.dropped && !this.stream.destroyed) this.abandon(reason);
  }

  private abandon(reason: string): void {
    this.dropped = true;
    clearTimeout(this.timer);
    this.pending = [];
    this.pendingBytes = 0;
    if (this.stream.reset) this.stream.reset(reason);
    else this.stream.destroy();
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.dropped || this.pending.length === 0) return;
    const data = this.pending.length === 1 ? this.pending[0] : Buffer.concat(this.pending, this.pendingBytes);
    this.pending = [];
    this.pendingBytes = 0;
    this.stream.write(data);
  }
}

/**
 * One client connection as the mirroring sessions see it: an `incoming` stream each, and its open/close traffic events.
 */
export class MirroredConnection {
  private readonly copies: Array<{ sub: PortSubscription; copy: MirrorCopy }>;
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
    this.copies = subs.flatMap((sub) => {
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
    return this.copies.length === 0;
  }

  push(chunk: Buffer): void {
    for (const c of this.copies) c.copy.push(chunk);
  }

  /** The client finished sending. */
  end(): void {
    for (const c of this.copies) c.copy.end();
  }

  /** Bytes of the connection are missing for good: every copy goes, and each session is told why. */
  drop(why: string): void {
    for (const c of this.copies) c.copy.drop(why);
  }

  /** The connection is over: the copies end (or are reset with `resetReason`) and each session gets the close event. */
  close(bytes: { in: number; out?: number }, resetReason?: string): void {
    for (const c of this.copies) {
      if (resetReason) c.copy.reset(resetReason);
      else c.copy.end();
      c.sub.session.traffic({ ...this.event, phase: 'close', bytesIn: bytes.in, bytesOut: bytes.out, at: Date.now() });
    }
  }
}
