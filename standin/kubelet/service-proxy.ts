// ClusterIP Services as kube-proxy's iptables mode makes them: per instance, nat chains jumped to from PREROUTING
// (pods) and OUTPUT (the host) that DNAT a ClusterIP:port to one of the Service's ready endpoints, chosen at random; a
// filter chain rejects ClusterIP:ports with no endpoint at once; hairpin connections (a pod to itself) are masqueraded.
import { createHash } from 'node:crypto';
import type { V1Endpoints, V1Service } from '@kubernetes/client-node';
import { run } from './host.js';

/** Marks a connection that must leave with the node's address (a pod reaching itself through its Service). */
const HAIRPIN_MARK = '0x20000/0x20000';

export interface ServiceProxyOptions {
  tag: string;
  serviceCIDR: string;
  services(): V1Service[];
  endpoints(namespace: string, name: string): V1Endpoints | undefined;
}

function chainHash(...parts: string[]): string {
  return createHash('sha1').update(parts.join('/')).digest('hex').slice(0, 10).toUpperCase();
}

export class ServiceProxy {
  private readonly svcChain: string;
  private readonly postChain: string;
  private readonly rejectChain: string;
  private current = new Set<string>();
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
    const cidr = this.o.serviceCIDR;
    await run(
      'iptables-restore',
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

  /** The rules for the current Services and Endpoints, written in one iptables-restore (atomic per table). */
  rules(): { nat: string[]; filter: string[]; chains: Set<string> } {
    const nat: string[] = [];
    const filter: string[] = [];
    const chains = new Set<string>();
    for (const svc of this.o.services()) {
      const ip = svc.spec?.clusterIP;
      if (!ip || ip === 'None') continue;
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
          for (const addr of subset.addresses ?? []) targets.push({ ip: addr.ip, port: epPort.port });
        }
        const match = `-d ${ip}/32 -p ${proto} -m ${proto} --dport ${port.port}`;
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
          nat.push(`-A ${epChain} -s ${t.ip}/32 -j MARK --set-xmark ${HAIRPIN_MARK}`);
          nat.push(`-A ${epChain} -p ${proto} -m ${proto} -j DNAT --to-destination ${t.ip}:${t.port}`);
        });
      }
    }
    return { nat, filter, chains };
  }

  private async sync(): Promise<void> {
    if (this.stopped) return;
    const { nat, filter, chains } = this.rules();
    const stale = [...this.current].filter((c) => !chains.has(c));
    await run(
      'iptables-restore',
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
    this.current = chains;
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
