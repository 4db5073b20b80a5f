// The agent's stolen/mirrored ports: subscriptions per port, port locks, and what each port needs for them — a redirect
// rule + listener while it has a steal, a packet capture while it has mirrors (or, without capture, the redirect
// again).
import { readFile } from '../fs-calls.js';
import { AGENT_ENV, type AgentCapability } from '../../shared/agent-contract.js';
import { isUserError } from '../../shared/errors.js';
import { effectiveCapabilities, missingCapabilityError } from '../capabilities.js';
import type { ClientMessage } from '../../shared/protocol.js';
import { flushConnections } from './flush.js';
import { loadFilteredMirror } from './mirror.js';
import { PortCapture } from './capture.js';
import type { AgentLog } from '../log.js';
import type { NativeSplice } from '../native/native-splice.js';
import { PortRedirect } from './port-redirect.js';
import { describeFilter, type IncomingTarget, type PortSubscription, type RequestMatcher } from './subscription.js';

type Subscribe = Extract<ClientMessage, { type: 'subscribe' }>;

export type SubscribeResult =
  | { ok: true }
  | { ok: false; reason: string; hint?: string; holder?: { user: string; host: string; since: string } };

/**
 * Where the agent's redirect rules live: an owned nft table (agent/native/nft-owned.ts) or an iptables chain
 * (agent/incoming/iptables.ts).
 */
export interface RedirectRules {
  addRedirect(port: number, listenerPort: number, skipSource?: string): Promise<void>;
  removeRedirect(port: number, listenerPort: number, skipSource?: string): Promise<void>;
  /**
   * Lets a listener take only redirected connections (the listeners bind every address: a redirect delivers to the
   * primary address of the interface a connection came in on). Resolves false where the rules cannot say it.
   */
  guardListener(listenerPort: number): Promise<boolean>;
  /** Removes the guard of a listener that closed. */
  unguardListener(listenerPort: number): Promise<void>;
  /** Removes every rule of the agent (idempotent). */
  remove(): Promise<void>;
}

/**
 * Where mirror copies come from: a packet capture (the agent stays out of the pod's path), or the agent's own forward.
 */
export type MirrorPath = 'capture' | 'proxy';

interface PortEntry {
  /** The port's subscriptions, shared in place with its listener and its capture. */
  subs: PortSubscription[];
  /**
   * The redirect rule and its listener: while the port has a steal, or mirrors without a capture. The rule points at
   * the listener, or at devop-splice's (`native`) while the port's connections all go whole to one native session.
   */
  redirect?: { listener: PortRedirect; skipSource?: string; native?: NativeRoute };
  /** The packet capture that makes the mirror copies: while the port has mirrors (and capture works). */
  capture?: PortCapture;
}

/** A port whose rule points at devop-splice: the steal it serves there, and its listener there. */
interface NativeRoute {
  sub: PortSubscription;
  key: string;
  listenerPort: number;
}

/** What devop-splice puts in a stream's OPEN unquoted: subscription ids the CLI makes are of this kind. */
const NATIVE_SUBSCRIPTION_ID = /^[\w.:-]{1,200}$/;

/**
 * The steal devop-splice can serve on its own: the one that takes every new connection of the port whole (as
 * PortRedirect chooses), of a session on the native path that reports connections itself, with no answer fallback.
 */
function nativeSteal(subs: PortSubscription[]): PortSubscription | undefined {
  const whole = subs.find((s) => s.session.takesTraffic && !s.paused && s.mode === 'steal' && !s.match);
  const fits = whole?.session.native && whole.session.reportsStreams && !whole.answerWithinMs;
  return fits && NATIVE_SUBSCRIPTION_ID.test(whole.id) ? whole : undefined;
}

/**
 * The pod's default gateway (in the pod's netns): on most CNIs, where kubelet's probes come from. IPv4 from
 * /proc/net/route, else (an IPv6-only pod) IPv6 from /proc/net/ipv6_route.
 */
export async function defaultGateway(): Promise<string | undefined> {
  const [v4, v6] = await Promise.all(
    ['/proc/net/route', '/proc/net/ipv6_route'].map((f) => readFile(f, 'utf8').catch(() => '')),
  );
  return gatewayOf(v4, v6);
}

/** The default gateway in /proc/net/route's text, else in /proc/net/ipv6_route's; undefined when neither has one. */
export function gatewayOf(route: string, ipv6Route: string): string | undefined {
  for (const line of route.split('\n').slice(1)) {
    const [, dest, gateway] = line.trim().split(/\s+/);
    if (dest === '00000000' && gateway && gateway !== '00000000') {
      const n = parseInt(gateway, 16);
      return [n & 255, (n >> 8) & 255, (n >> 16) & 255, (n >>> 24) & 255].join('.');
    }
  }
  // ipv6_route: destination, its prefix length, source, its length, next hop (32 hex digits each but the lengths).
  for (const line of ipv6Route.split('\n')) {
    const [dest, length, , , nextHop] = line.trim().split(/\s+/);
    if (dest === '0'.repeat(32) && length === '00' && nextHop && /^[0-9a-f]{32}$/.test(nextHop) && /[^0]/.test(nextHop))
      return new URL(`http://[${nextHop.match(/.{4}/g)?.join(':')}]`).hostname.slice(1, -1);
  }
  return undefined;
}

export class PortTable {
  private readonly ports = new Map<number, PortEntry>();
  /** Rule changes run one at a time: two subscribes for one port must not both create its listener. */
  private queue: Promise<unknown> = Promise.resolve();
  /** Why mirror copies come from the agent's forward rather than a capture; said once in the log. */
  private noCapture: string | undefined;
  private noCaptureSaid = false;
  /** The native data path, while it runs (agent/native/native-splice.ts). */
  native: NativeSplice | undefined;
  /** The agent is stopping and its rules are gone: nothing is routed any more. */
  private rulesRemoved = false;
  /** The rules cannot guard listeners (the iptables fallback): said once in the log. */
  private unguardedSaid = false;

  constructor(
    private readonly chain: RedirectRules | undefined,
    private readonly nodeIP: () => Promise<string | undefined>,
    private readonly log: AgentLog,
    /** DEVOP_AGENT_FLUSH_CONNECTIONS: false makes the agent ignore a session's flush request. */
    private readonly mayFlush = true,
    /** DEVOP_AGENT_MIRROR. */
    mirror: MirrorPath = 'capture',
    /** The agent's effective capabilities (what its container was given). */
    private readonly held: ReadonlySet<AgentCapability> = effectiveCapabilities(),
  ) {
    if (mirror === 'proxy') this.noCapture = `${AGENT_ENV.mirror}=proxy`;
    else {
      if (!held.has('NET_RAW')) this.noCapture = missingCapabilityError(['NET_RAW'], 'a packet capture').message;
    }
  }

  /** Why this agent cannot take the subscription at all (a capability its container lacks), or undefined. */
  private capabilityProblem(msg: Subscribe): { reason: string; hint: string } | undefined {
    // Stealing needs the redirect rule; so does mirroring when the copies cannot come from a capture.
    const needsRule = msg.mode === 'steal' || this.noCapture !== undefined;
    if (!needsRule || this.held.has('NET_ADMIN')) return undefined;
    const feature = msg.mode === 'steal' ? `stealing :${msg.port}` : `mirroring :${msg.port} without a packet capture`;
    const err = missingCapabilityError(['NET_ADMIN'], feature);
    return { reason: err.message, hint: err.hint };
  }

  private serial<T>(job: () => Promise<T>): Promise<T> {
    const next = this.queue.then(job, job);
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Ports with their listener port (0: none) and whether a capture runs, for diagnostics and tests. */
  listeners(): Array<{ port: number; listenerPort: number; capture: boolean; subscriptions: number }> {
    return [...this.ports].map(([port, e]) => ({
      port,
      listenerPort: e.redirect?.listener.listenerPort ?? 0,
      capture: e.capture !== undefined,
      subscriptions: e.subs.length,
    }));
  }

  subscribe(session: IncomingTarget, holder: { user: string; host: string }, msg: Subscribe): Promise<SubscribeResult> {
    return this.serial(async () => {
      if (!this.chain)
        return { ok: false as const, reason: 'this agent runs targetless: it has no pod ports to steal or mirror' };
      const denied = this.capabilityProblem(msg);
      if (denied) return { ok: false as const, ...denied };
      let match: RequestMatcher | undefined;
      try {
        // The filter module and its regex engine (re2js) load with the first filtered steal: a whole-port steal, the
        // usual one, never pays their memory.
        match = msg.filter ? (await import('./filter.js')).compileFilter(msg.filter) : undefined;
        // The workload's certificate and key are checked now: a pair that does not fit is refused, not each handshake.
        if (match && msg.mode === 'steal' && msg.tls) (await import('./tls-terminate.js')).secureContextOf(msg.tls);
        if (match && msg.mode === 'mirror') await loadFilteredMirror();
      } catch (err) {
        return isUserError(err)
          ? { ok: false as const, reason: err.message, hint: err.hint }
          : { ok: false as const, reason: String(err) };
      }
      const entry = this.ports.get(msg.port) ?? { subs: [] };
      // A steal of a disconnected session of the same user@host (its devop was killed, and this is the same person's
      // next one) is taken over rather than refused until that session's resume grace ends.
      const orphaned = entry.subs.filter(
        (s) =>
          s.session.sessionId !== session.sessionId &&
          s.mode === 'steal' &&
          msg.mode === 'steal' &&
          !s.session.connected &&
          s.holder.user === holder.user &&
          s.holder.host === holder.host,
      );
      const others = entry.subs.filter(
        (s) => s.session.sessionId !== session.sessionId && s.mode === 'steal' && !orphaned.includes(s),
      );
      if (msg.mode === 'steal') {
        const clash = match ? others.find((s) => !s.match) : others[0];
        if (clash) {
          const since = clash.since.toISOString();
          return {
            ok: false as const,
            reason:
              `port ${msg.port} is stolen (${describeFilter(clash.filter)}) by ` +
              `${clash.holder.user}@${clash.holder.host} since ${since}`,
            holder: { ...clash.holder, since },
          };
        }
      }
      const before = [...entry.subs];
      // A session that subscribes again to a port replaces its own earlier subscription (e.g. switching steal ↔
      // mirror).
      const own = entry.subs.findIndex((s) => s.session.sessionId === session.sessionId);
      if (own >= 0) entry.subs.splice(own, 1);
      for (const sub of orphaned) {
        entry.subs.splice(entry.subs.indexOf(sub), 1);
        this.log.info('steal taken over from a disconnected session of the same user', {
          port: msg.port,
          from: sub.session.sessionId,
          session: session.sessionId,
          user: `${holder.user}@${holder.host}`,
        });
      }
      const { id, mode, filter, flush, answerWithinMs } = msg;
      // Only a filtered steal reads the bytes: a whole-port steal passes TLS through as it came.
      const tls = match && mode === 'steal' ? msg.tls : undefined;
      entry.subs.push({
        id,
        session,
        mode,
        filter,
        match,
        since: new Date(),
        paused: false,
        flush,
        holder,
        answerWithinMs,
        ...(tls ? { tls } : {}),
      });
      this.ports.set(msg.port, entry);
      const failure = await this.settle(msg.port, entry, msg);
      if (failure) {
        entry.subs.splice(0, entry.subs.length, ...before);
        await this.settle(msg.port, entry);
        return { ok: false as const, reason: failure };
      }
      this.log.info('subscribed', {
        port: msg.port,
        mode: msg.mode,
        filter: describeFilter(msg.filter),
        session: session.sessionId,
        user: `${holder.user}@${holder.host}`,
        via: this.via(entry, msg.mode),
      });
      return { ok: true as const };
    });
  }

  /** Removes one subscription (by request id, or all of the session's on the port when id is undefined). */
  unsubscribe(sessionId: string, port: number, id?: string): Promise<boolean> {
    return this.serial(async () => {
      const entry = this.ports.get(port);
      if (!entry) return false;
      const keep = entry.subs.filter((s) => !(s.session.sessionId === sessionId && (id === undefined || s.id === id)));
      if (keep.length === entry.subs.length) return false;
      entry.subs.splice(0, entry.subs.length, ...keep);
      const failure = await this.settle(port, entry);
      if (failure) this.log.error('port left without its redirect', { port, error: failure });
      return true;
    });
  }

  /** Drops every subscription of a session (its end): ports with no one left lose their rule, listener and capture. */
  async release(sessionId: string): Promise<void> {
    for (const port of [...this.ports.keys()]) await this.unsubscribe(sessionId, port);
  }

  /**
   * Pauses or resumes a session's subscriptions (all ports, or one). A resumed steal subscribed with flush takes the
   * connections the pod answered during the pause, as a steal's start does: they end, and the reconnects are stolen.
   */
  setPaused(sessionId: string, paused: boolean, port?: number): Promise<void> {
    return this.serial(async () => {
      for (const [p, entry] of this.ports) {
        if (port !== undefined && p !== port) continue;
        const mine = entry.subs.filter((s) => s.session.sessionId === sessionId);
        const resumedSteal = mine.some((s) => s.paused && !paused && s.mode === 'steal' && s.flush);
        for (const s of mine) s.paused = paused;
        await this.route(p, entry);
        if (resumedSteal && this.mayFlush && entry.redirect) {
          const connections = entry.redirect.listener.dropForwarded();
          this.log.info('resumed steal took the connections the pod had', { port: p, connections });
        }
      }
    });
  }

  /**
   * Brings a port's rule, listener and capture in line with its subscriptions; `msg` is the subscribe that changed them
   * (its stealProbes and flush apply to what it adds). Returns why the redirect rule could not be installed.
   */
  private async settle(port: number, entry: PortEntry, msg?: Subscribe): Promise<string | undefined> {
    const mirrors = entry.subs.some((s) => s.mode === 'mirror');
    const steals = entry.subs.some((s) => s.mode === 'steal');
    // Where probes come from, looked up once for the capture and the rule alike.
    let skip: Promise<string | undefined> | undefined;
    const skipSource = (): Promise<string | undefined> =>
      (skip ??= msg?.stealProbes ? Promise.resolve(undefined) : this.nodeIP());
    if (mirrors && !entry.capture && this.noCapture === undefined)
      entry.capture = await this.startCapture(port, entry, await skipSource());
    if (mirrors && this.noCapture !== undefined && !this.noCaptureSaid) {
      this.noCaptureSaid = true;
      this.log.info('mirror copies go through the agent', { why: this.noCapture });
    }
    if (!mirrors && entry.capture) {
      entry.capture.close();
      entry.capture = undefined;
    }
    // Steals need the redirect; so do mirrors that no capture serves.
    const wantRedirect = steals || (mirrors && !entry.capture);
    // Filtered steals route each request: the listener loads that routing before the steal counts (before its rule).
    const filtered = entry.subs.some((s) => s.mode === 'steal' && s.match);
    if (filtered) await entry.redirect?.listener.enableFilters();
    if (wantRedirect && !entry.redirect) {
      const listener = new PortRedirect(port, entry.subs, this.log);
      if (filtered) await listener.enableFilters();
      const listenerPort = await listener.listen();
      const skip = await skipSource();
      try {
        await this.guard(listenerPort);
        await this.chain?.addRedirect(port, listenerPort, skip);
      } catch (err) {
        listener.close();
        await this.unguard(listenerPort);
        return `cannot install the redirect rule for port ${port}: ${(err as Error).message}`;
      }
      entry.redirect = { listener, skipSource: skip };
      // The rule is in place first, so a flushed client's reconnect is already stolen.
      if (msg?.mode === 'steal' && msg.flush && this.mayFlush) await flushConnections(port, this.log);
    } else if (entry.redirect && msg?.mode === 'steal' && msg.flush && this.mayFlush) {
      // The rule was there already (a mirror through the agent, another session's filtered steal): the connections it
      // passes on whole to the app move to the new steal.
      const connections = entry.redirect.listener.dropForwarded();
      if (connections > 0) this.log.info('steal took the connections the pod had', { port, connections });
    }
    if (!wantRedirect && entry.redirect) {
      await this.removeRedirect(port, entry.redirect);
      entry.redirect = undefined;
    }
    if (entry.redirect) {
      entry.redirect.listener.copiesMirrors = !entry.capture;
      await this.route(port, entry);
    }
    if (entry.subs.length === 0 && this.ports.get(port) === entry) {
      this.ports.delete(port);
      this.log.info('port released', { port });
    }
    return undefined;
  }

  /**
   * A running capture of the port, or undefined (and capture is off from now on, with the reason) when it cannot start.
   */
  private async startCapture(
    port: number,
    entry: PortEntry,
    skipSource: string | undefined,
  ): Promise<PortCapture | undefined> {
    const capture = new PortCapture(port, entry.subs, this.log, {
      skipSource,
      onFail: (reason) => void this.captureStopped(port, capture, reason),
    });
    try {
      await capture.start();
      return capture;
    } catch (err) {
      this.noCapture = `packet capture unavailable: ${(err as Error).message}`;
      return undefined;
    }
  }

  /**
   * A capture ended by itself (its process died): the port's mirrors move to the agent's forward, and so do later ones.
   */
  private captureStopped(port: number, capture: PortCapture, reason: string): Promise<void> {
    return this.serial(async () => {
      const entry = this.ports.get(port);
      if (entry?.capture !== capture) return;
      this.noCapture = `packet capture stopped: ${reason}`;
      this.noCaptureSaid = true;
      this.log.warn('packet capture stopped; mirror copies go through the agent', { port, why: reason });
      entry.capture = undefined;
      for (const s of entry.subs) {
        if (s.mode === 'mirror')
          s.session.warn(
            `mirror of :${port}: the packet capture stopped (${reason}); new connections are mirrored through the ` +
              `agent`,
          );
      }
      const failure = await this.settle(port, entry);
      if (failure) this.log.error('mirror left without copies', { port, error: failure });
    });
  }

  /**
   * A session's native connection came or went, or devop-splice ended: the ports of its steals (of every steal)
   * are routed again.
   */
  reroute(sessionId?: string): Promise<void> {
    return this.serial(async () => {
      for (const [port, entry] of this.ports) {
        const serves = entry.redirect?.native !== undefined;
        if (sessionId === undefined ? serves : serves || entry.subs.some((s) => s.session.sessionId === sessionId))
          await this.route(port, entry);
      }
    });
  }

  /**
   * Points the port's rule at devop-splice's listener while its new connections all go whole to one native session,
   * and at the agent's own listener otherwise. The new rule is in place before the old one goes, so no connection
   * finds neither; connections already taken stay where they are.
   */
  private async route(port: number, entry: PortEntry): Promise<void> {
    const redirect = entry.redirect;
    if (!redirect || this.rulesRemoved) return;
    const want = this.native?.alive ? nativeSteal(entry.subs) : undefined;
    const now = redirect.native;
    if (now?.sub === want) return;
    let next: NativeRoute | undefined;
    if (want && this.native) {
      try {
        const taken: NativeRoute = { sub: want, ...(await this.native.steal(want.session.sessionId, port, want.id)) };
        await this.guard(taken.listenerPort).catch(async (err: Error) => {
          await this.unsteal(taken, true);
          throw err;
        });
        next = taken;
      } catch (err) {
        this.log.warn('the native path could not take the steal', { port, error: (err as Error).message });
        if (!now) return;
      }
    }
    const to = next?.listenerPort ?? redirect.listener.listenerPort;
    try {
      await this.chain?.addRedirect(port, to, redirect.skipSource);
    } catch (err) {
      this.log.error('could not move the redirect rule', { port, error: (err as Error).message });
      if (next) await this.unsteal(next, true);
      return;
    }
    await this.removeRule(port, now?.listenerPort ?? redirect.listener.listenerPort, redirect.skipSource);
    redirect.native = next;
    // A steal that was paused, changed, or lost its session keeps the connections it took; one that ended closes them.
    const ended = now && !entry.subs.some((s) => s.session === now.sub.session && s.mode === 'steal');
    if (now) await this.unsteal(now, ended === true);
    this.log.debug(next ? 'port spliced natively' : 'port spliced by the agent', { port });
  }

  /** Closes devop-splice's listener of `route`; `ended`: the connections it took close too (drop). */
  private async unsteal(route: NativeRoute, ended: boolean): Promise<void> {
    const request = ended ? this.native?.drop(route.key) : this.native?.unsteal(route.key);
    await request?.catch((err: Error) => this.log.debug('unsteal', { error: err.message }));
    await this.unguard(route.listenerPort);
  }

  /**
   * Before a listener's port is the target of a rule: only redirected connections may reach it (a connection made to
   * it directly would be taken as stolen from the app's port, past the rule's exception for probes, from a process of
   * the pod or from any peer a NetworkPolicy admits on every port). Throws when the guard cannot be added.
   */
  private async guard(listenerPort: number): Promise<void> {
    if (!this.chain || (await this.chain.guardListener(listenerPort)) || this.unguardedSaid) return;
    this.unguardedSaid = true;
    this.log.warn('the iptables fallback does not guard listener ports: they take direct connections too');
  }

  private async unguard(listenerPort: number): Promise<void> {
    await this.chain
      ?.unguardListener(listenerPort)
      .catch((err: Error) => this.log.error('could not remove a listener guard', { listenerPort, error: err.message }));
  }

  private async removeRule(port: number, listenerPort: number, skipSource: string | undefined): Promise<void> {
    try {
      await this.chain?.removeRedirect(port, listenerPort, skipSource);
    } catch (err) {
      this.log.error('could not remove redirect rule', { port, error: (err as Error).message });
    }
  }

  private via(entry: PortEntry, mode: 'steal' | 'mirror'): string {
    return mode === 'mirror' && entry.capture ? 'capture' : 'redirect';
  }

  private async removeRedirect(port: number, redirect: NonNullable<PortEntry['redirect']>): Promise<void> {
    await this.removeRule(port, redirect.native?.listenerPort ?? redirect.listener.listenerPort, redirect.skipSource);
    if (redirect.native) await this.unsteal(redirect.native, true);
    redirect.listener.close();
    await this.unguard(redirect.listener.listenerPort);
  }

  /**
   * Agent shutdown, first step: removes every redirect rule, so new connections go straight to the app and none meets
   * a closed listener. The table (or chain) itself stays until closeAll(), after the connections already redirected
   * have ended: in a netns whose only nat chain is the agent's owned table, deleting the table unhooks NAT there, and
   * those connections' ends (FIN or RST) would leave from the listener's port, unknown to the client, which would
   * then wait for an answer until its own timeout.
   */
  async removeRules(): Promise<void> {
    await this.serial(async () => {
      this.rulesRemoved = true;
      for (const [port, { redirect }] of this.ports) {
        if (!redirect) continue;
        const listenerPort = redirect.native?.listenerPort ?? redirect.listener.listenerPort;
        await this.removeRule(port, listenerPort, redirect.skipSource);
      }
    });
  }

  /** Removes every rule, listener and capture (agent shutdown). */
  async closeAll(): Promise<void> {
    await this.serial(async () => {
      for (const [port, entry] of [...this.ports]) {
        this.ports.delete(port);
        entry.redirect?.listener.close();
        entry.capture?.close();
      }
      await this.chain?.remove();
    });
  }
}
