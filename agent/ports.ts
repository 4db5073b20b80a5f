// The agent's stolen/mirrored ports: subscriptions per port, port locks, and the redirect rule + listener that exist
// while a port has at least one subscription.
import { readFile } from 'node:fs/promises';
import { isUserError } from '../shared/errors.js';
import type { ClientMessage } from '../shared/protocol.js';
import { compileFilter, describeFilter } from './filter.js';
import { flushConnections } from './flush.js';
import type { AgentLog } from './log.js';
import { PortRedirect, type IncomingTarget, type PortSubscription } from './port-redirect.js';

type Subscribe = Extract<ClientMessage, { type: 'subscribe' }>;

export type SubscribeResult =
  | { ok: true }
  | { ok: false; reason: string; holder?: { user: string; host: string; since: string } };

/** Where the agent's redirect rules live: an owned nft table (agent/nft-owned.ts) or an iptables chain (agent/iptables.ts). */
export interface RedirectRules {
  addRedirect(port: number, listenerPort: number, skipSource?: string): Promise<void>;
  removeRedirect(port: number, listenerPort: number, skipSource?: string): Promise<void>;
  /** Removes every rule of the agent (idempotent). */
  remove(): Promise<void>;
}

interface PortEntry {
  redirect: PortRedirect;
  skipSource?: string;
}

/** The pod's default gateway from /proc/net/route (in the pod's netns): on most CNIs, where kubelet's probes come from. */
export async function defaultGateway(): Promise<string | undefined> {
  const text = await readFile('/proc/net/route', 'utf8').catch(() => '');
  for (const line of text.split('\n').slice(1)) {
    const [, dest, gateway] = line.trim().split(/\s+/);
    if (dest === '00000000' && gateway && gateway !== '00000000') {
      const n = parseInt(gateway, 16);
      return [n & 255, (n >> 8) & 255, (n >> 16) & 255, (n >>> 24) & 255].join('.');
    }
  }
  return undefined;
}

export class PortTable {
  private readonly ports = new Map<number, PortEntry>();
  /** Rule changes run one at a time: two subscribes for one port must not both create its listener. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly chain: RedirectRules | undefined,
    private readonly nodeIP: () => Promise<string | undefined>,
    private readonly log: AgentLog,
    /** DEVOP_AGENT_FLUSH_CONNECTIONS: false makes the agent ignore a session's flush request. */
    private readonly mayFlush = true,
  ) {}

  private serial<T>(job: () => Promise<T>): Promise<T> {
    const next = this.queue.then(job, job);
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Port numbers with their listener ports, for diagnostics and tests. */
  listeners(): Array<{ port: number; listenerPort: number; subscriptions: number }> {
    return [...this.ports].map(([port, e]) => ({ port, listenerPort: e.redirect.listenerPort, subscriptions: e.redirect.subs.length }));
  }

  subscribe(session: IncomingTarget, holder: { user: string; host: string }, msg: Subscribe): Promise<SubscribeResult> {
    return this.serial(async () => {
      if (!this.chain) return { ok: false as const, reason: 'this agent runs targetless: it has no pod ports to steal or mirror' };
      let match;
      try {
        match = msg.filter ? compileFilter(msg.filter) : undefined;
      } catch (err) {
        return { ok: false as const, reason: isUserError(err) ? `${err.message} (${err.hint})` : String(err) };
      }
      const entry = this.ports.get(msg.port);
      const others = (entry?.redirect.subs ?? []).filter((s) => s.session.sessionId !== session.sessionId && s.mode === 'steal');
      if (msg.mode === 'steal') {
        const clash = match ? others.find((s) => !s.match) : others[0];
        if (clash) {
          const since = clash.since.toISOString();
          return {
            ok: false as const,
            reason: `port ${msg.port} is stolen (${describeFilter(clash.filter)}) by ${clash.holder.user}@${clash.holder.host} since ${since}`,
            holder: { ...clash.holder, since },
          };
        }
      }
      const sub: PortSubscription = { id: msg.id, session, mode: msg.mode, filter: msg.filter, match, since: new Date(), paused: false, holder };
      if (entry) {
        // A session that subscribes again to a port replaces its own earlier subscription (e.g. switching steal ↔ mirror).
        const own = entry.redirect.subs.findIndex((s) => s.session.sessionId === session.sessionId);
        if (own >= 0) entry.redirect.subs.splice(own, 1);
        entry.redirect.subs.push(sub);
      } else {
        const redirect = new PortRedirect(msg.port, this.log);
        const listenerPort = await redirect.listen();
        const skipSource = msg.stealProbes ? undefined : await this.nodeIP();
        redirect.subs.push(sub);
        try {
          await this.chain.addRedirect(msg.port, listenerPort, skipSource);
        } catch (err) {
          redirect.close();
          return { ok: false as const, reason: `cannot install the redirect rule for port ${msg.port}: ${(err as Error).message}` };
        }
        this.ports.set(msg.port, { redirect, skipSource });
        // The rule is in place first, so a flushed client's reconnect is already stolen.
        if (msg.mode === 'steal' && msg.flush && this.mayFlush) await flushConnections(msg.port, this.log);
      }
      this.log.info('subscribed', { port: msg.port, mode: msg.mode, filter: describeFilter(msg.filter), session: session.sessionId, user: `${holder.user}@${holder.host}` });
      return { ok: true as const };
    });
  }

  /** Removes one subscription (by request id, or all of the session's on the port when id is undefined). */
  unsubscribe(sessionId: string, port: number, id?: string): Promise<boolean> {
    return this.serial(async () => {
      const entry = this.ports.get(port);
      if (!entry) return false;
      const before = entry.redirect.subs.length;
      const keep = entry.redirect.subs.filter((s) => !(s.session.sessionId === sessionId && (id === undefined || s.id === id)));
      entry.redirect.subs.splice(0, entry.redirect.subs.length, ...keep);
      if (keep.length === 0) await this.dropPort(port, entry);
      return keep.length !== before;
    });
  }

  /** Drops every subscription of a session (its end): ports with no one left lose their rule and listener. */
  async release(sessionId: string): Promise<void> {
    for (const port of [...this.ports.keys()]) await this.unsubscribe(sessionId, port);
  }

  setPaused(sessionId: string, paused: boolean, port?: number): void {
    for (const [p, entry] of this.ports) {
      if (port !== undefined && p !== port) continue;
      for (const s of entry.redirect.subs) if (s.session.sessionId === sessionId) s.paused = paused;
    }
  }

  private async dropPort(port: number, entry: PortEntry): Promise<void> {
    this.ports.delete(port);
    try {
      await this.chain?.removeRedirect(port, entry.redirect.listenerPort, entry.skipSource);
    } catch (err) {
      this.log.warn('could not remove redirect rule', { port, error: (err as Error).message });
    }
    entry.redirect.close();
    this.log.info('port released', { port });
  }

  /** Removes the chain and its jump first (agent shutdown): new connections go straight to the app, none meets a closed listener. */
  async removeRules(): Promise<void> {
    await this.serial(async () => this.chain?.remove());
  }

  /** Removes every rule and listener (agent shutdown). */
  async closeAll(): Promise<void> {
    await this.serial(async () => {
      for (const [port, entry] of [...this.ports]) {
        this.ports.delete(port);
        entry.redirect.close();
      }
      await this.chain?.remove();
    });
  }
}
