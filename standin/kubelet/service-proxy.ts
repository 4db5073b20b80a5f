// ClusterIP Services as kube-proxy's iptables mode makes them: per instance, nat chains jumped to from PREROUTING
// (pods) and OUTPUT (the host) that DNAT a ClusterIP:port to one of the Service's ready endpoints, chosen at random; a
// filter chain rejects ClusterIP:ports with no endpoint at once; hairpin connections (a pod to itself) are masqueraded.
// On a dual-stack node the same chains exist in ip6tables for the IPv6 ClusterIPs (a dual-stack Service has one of
// each family). kube-proxy takes each family's endpoints from that family's EndpointSlice; the stand-in serves
// Endpoints only (the Service's primary family), so the other family's endpoint is the same pod's twin address.
import { createHash } from 'node:crypto';
import type { V1Endpoints, V1Service } from '@kubernetes/client-node';
import { run } from './host.js';

/** Marks a connection that must leave with the node's address (a pod reaching itself through its Service). */
const HAIRPIN_MARK = '0x20000/0x20000';

export interface ServiceProxyOptions {
  tag: string;
  serviceCIDR: string;
  /** The IPv6 ClusterIP range on a dual-stack node. */
  serviceCIDR6?: string;
  services(): V1Service[];
  endpoints(namespace: string, name: string): V1Endpoints | undefined;
  /** A pod's address of the other family (its IPv6 twin of an IPv4 address, or back), undefined when it has none. */
  twin?(ip: string): string | undefined;
}

type Family = 'IPv4' | 'IPv6';

/** One family's tools and address forms. */
const FAMILY = {
  IPv4: { restore: 'iptables-restore', host: (ip: string) => `${ip}/32`, hostPort: (ip: string) => ip },
  IPv6: { restore: 'ip6tables-restore', host: (ip: string) => `${ip}/128`, hostPort: (ip: string) => `[${ip}]` },
} as const;

function chainHash(...parts: string[]): string {
  return createHash('sha1').update(parts.join('/')).digest('hex').slice(0, 10).toUpperCase();
}

export class ServiceProxy {
  private readonly svcChain: string;
  private readonly postChain: string;
  private readonly rejectChain: string;
  private readonly current: Record<Family, Set<string>> = { IPv4: new Set(), IPv6: new Set() };
  private timer: NodeJS.Timeout | undefined;
  private syncing: Promise<void> = Promise.resolve();
  private stopped = false;

  constructor(private readonly o: ServiceProxyOptions) {
    this.svcChain = `DVK-${o.tag}-SVC`;
    this.postChain = `DVK-${o.tag}-POST`;
    this.rejectChain = `DVK-${o.tag}-REJ`;
  }

  /**
   * Creates the instance's chains and the jumps to them (only for the Service range, so other traffic is untouched).
   */
  async setUp(): Promise<void> {
    for (const family of this.families()) await this.setUpFamily(family);
  }

  /** The families this node serves Services in. */
  private families(): Family[] {
    return this.o.serviceCIDR6 ? ['IPv4', 'IPv6'] : ['IPv4'];
  }

  private async setUpFamily(family: Family): Promise<void> {
    const cidr = family === 'IPv6' ? this.o.serviceCIDR6 : this.o.serviceCIDR;
    await run(
      FAMILY[family].restore,
      ['--noflush', '-w'],
      [
        '*nat',
        `:${this.svcChain} - [0:0]`,
        `:${this.postChain} - [0:0]`,
        `-I PREROUTING -d ${cidr} -j ${this.svcChain}`,
        `-I OUTPUT -d ${cidr} -j ${this.svcChain}`,
        `-I POSTROUTING -j ${this.postChain}`,
        `-A ${this.postChain} -m mark --mark ${HAIRPIN_MARK} -j MASQUERADE`,
        'COMMIT',
        '*filter',
        `:${this.rejectChain} - [0:0]`,
        `-I OUTPUT -d ${cidr} -j ${this.rejectChain}`,
        `-I FORWARD -d ${cidr} -j ${this.rejectChain}`,
        'COMMIT',
        '',
      ].join('\n'),
    );
  }

  /** Asks for a sync soon; bursts of Service/Endpoints events become one iptables-restore. */
  schedule(): void {
    if (this.stopped || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.syncing = this.syncing.then(() => this.sync()).catch(() => undefined); // the next change syncs again
    }, 20);
  }

  /** Resolves once every sync asked for so far has been applied. */
  async settled(): Promise<void> {
    while (this.timer) await new Promise((r) => setTimeout(r, 10));
    await this.syncing;
  }

  /** One family's rules for the current Services and Endpoints, written in one restore (atomic per table). */
  rules(family: Family = 'IPv4'): { nat: string[]; filter: string[]; chains: Set<string> } {
    const nat: string[] = [];
    const filter: string[] = [];
    const chains = new Set<string>();
    const { host, hostPort } = FAMILY[family];
    for (const svc of this.o.services()) {
      const ip = (svc.spec?.clusterIPs ?? [svc.spec?.clusterIP])[(svc.spec?.ipFamilies ?? ['IPv4']).indexOf(family)];
      if (!ip || ip === 'None') continue;
      // Endpoints hold the primary family's addresses; the other family's are their twins.
      const primary = (svc.spec?.ipFamilies ?? ['IPv4'])[0] === family;
      const ns = svc.metadata?.namespace ?? 'default';
      const name = svc.metadata?.name ?? '';
      const eps = this.o.endpoints(ns, name);
      for (const port of svc.spec?.ports ?? []) {
        const proto = (port.protocol ?? 'TCP').toLowerCase();
        const targets: Array<{ ip: string; port: number }> = [];
        for (const subset of eps?.subsets ?? []) {
          const epPort = (subset.ports ?? []).find(
            (p) => (p.name ?? '') === (port.name ?? '') && (p.protocol ?? 'TCP').toLowerCase() === proto,
          );
          if (!epPort) continue;
          for (const addr of subset.addresses ?? []) {
            const target = primary ? addr.ip : this.o.twin?.(addr.ip);
            if (target) targets.push({ ip: target, port: epPort.port });
          }
        }
        const match = `-d ${host(ip)} -p ${proto} -m ${proto} --dport ${port.port}`;
        if (targets.length === 0) {
          filter.push(`-A ${this.rejectChain} ${match} -j REJECT`);
          continue;
        }
        const svcPortChain = `DVK-${this.o.tag}-S-${chainHash(ns, name, String(port.port), proto)}`;
        chains.add(svcPortChain);
        nat.push(`-A ${this.svcChain} ${match} -j ${svcPortChain}`);
        targets.forEach((t, i) => {
          const epChain = `DVK-${this.o.tag}-E-${chainHash(ns, name, String(port.port), proto, t.ip, String(t.port))}`;
          chains.add(epChain);
          const left = targets.length - i;
          const pick = left > 1 ? ` -m statistic --mode random --probability ${(1 / left).toFixed(5)}` : '';
          nat.push(`-A ${svcPortChain}${pick} -j ${epChain}`);
          nat.push(`-A ${epChain} -s ${host(t.ip)} -j MARK --set-xmark ${HAIRPIN_MARK}`);
          nat.push(`-A ${epChain} -p ${proto} -m ${proto} -j DNAT --to-destination ${hostPort(t.ip)}:${t.port}`);
        });
      }
    }
    return { nat, filter, chains };
  }

  private async sync(): Promise<void> {
    for (const family of this.families()) {
      if (this.stopped) return;
      await this.syncFamily(family);
    }
  }

  private async syncFamily(family: Family): Promise<void> {
    const { nat, filter, chains } = this.rules(family);
    const stale = [...this.current[family]].filter((c) => !chains.has(c));
    await run(
      FAMILY[family].restore,
      ['--noflush', '-w'],
      [
        '*nat',
        // Declaring a chain in --noflush mode empties it: the whole set is rewritten at once.
        `:${this.svcChain} - [0:0]`,
        ...[...chains].map((c) => `:${c} - [0:0]`),
        ...stale.map((c) => `:${c} - [0:0]`),
        ...nat,
        ...stale.map((c) => `-X ${c}`),
        'COMMIT',
        '*filter',
        `:${this.rejectChain} - [0:0]`,
        ...filter,
        'COMMIT',
        '',
      ].join('\n'),
    );
    this.current[family] = chains;
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
