// The node's network: one bridge per stand-in instance with its own /24 pod subnet (node IP = .1, .2 kept for the
// control plane), pod IP allocation, and the per-instance iptables chains that let pod traffic cross the host.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { ipBatch, run, runQuiet } from './host.js';

/** Where subnet reservations live, so that clusters started at the same moment never pick the same /24. */
export const SUBNET_LOCK_DIR = '/run/devop-kubelet/subnets';
/** Host part of the first pod IP: .1 is the node, .2 the control plane. */
const FIRST_POD_HOST = 3;

export interface NodeSubnets {
  /** Pod /24, e.g. 10.244.3.0/24. */
  podCIDR: string;
  /** The node's IP on the bridge (.1 of podCIDR). */
  nodeIP: string;
  /**
   * Kept for the control plane (.2 of podCIDR: the API server's address, another "node" on the pod network); never a
   * pod IP.
   */
  controlPlaneIP: string;
  /** A /24 for ClusterIPs that no other running instance uses, e.g. 10.96.3.0/24. */
  serviceCIDR: string;
  /**
   * The pod /64 of a dual-stack node, e.g. fd00:244:3::/64 (a ULA twin of podCIDR; the node is ::1, pods ::<host>),
   * or undefined when the host has IPv6 off: pods are then IPv4 only.
   */
  podCIDR6?: string;
  /**
   * The IPv6 ClusterIP range of a dual-stack node (fd00:<o2>:<o3>:1::/112), or undefined when the kernel cannot forward
   * IPv6 on the bridge alone (net.ipv6.conf.<if>.force_forwarding, Linux 6.17+): Services are then IPv4 only.
   */
  serviceCIDR6?: string;
  /** The third and second octets that index this reservation. */
  prefix: string;
  release(): void;
}

/** Short, link-name-safe tag of an instance (interface names are limited to 15 characters). */
export function linkTag(instance: string): string {
  return createHash('sha1').update(instance).digest('hex').slice(0, 6);
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The bridge, its sysctls and the FORWARD accept chain of one instance. */
export class NodeNetwork {
  readonly tag: string;
  readonly bridge: string;
  readonly forwardChain: string;
  private readonly freeHosts: number[] = [];
  private nextHost = FIRST_POD_HOST;

  constructor(
    readonly instance: string,
    readonly subnets: NodeSubnets,
  ) {
    this.tag = linkTag(instance);
    this.bridge = `dvb${this.tag}`;
    this.forwardChain = `DVK-${this.tag}-FWD`;
  }

  get nodeIP(): string {
    return this.subnets.nodeIP;
  }

  /** The node's IPv6 address on the bridge (::1 of podCIDR6), undefined on an IPv4-only node. */
  get nodeIP6(): string | undefined {
    return this.subnets.podCIDR6 ? ipv6Host(this.subnets.podCIDR6, 1) : undefined;
  }

  /** A pod's address of the other family: its IPv6 twin of an IPv4 address, or back (undefined when none). */
  twinOf(ip: string): string | undefined {
    if (!ip.includes(':')) return this.ip6Of(ip);
    const cidr6 = this.subnets.podCIDR6;
    if (!cidr6) return undefined;
    const host = Number.parseInt(ip.slice(ip.lastIndexOf(':') + 1), 16);
    return ip === ipv6Host(cidr6, host) && host >= FIRST_POD_HOST && host <= 254
      ? `${this.subnets.prefix}.${host}`
      : undefined;
  }

  /** A pod's IPv6 address: the same host number as its IPv4 one, in podCIDR6 (undefined on an IPv4-only node). */
  ip6Of(podIP: string): string | undefined {
    return this.subnets.podCIDR6 ? ipv6Twin(this.subnets.podCIDR6, podIP) : undefined;
  }

  async setUp(): Promise<void> {
    await ipBatch([
      `link add ${this.bridge} type bridge`,
      `addr add ${this.subnets.nodeIP}/24 dev ${this.bridge}`,
      `link set ${this.bridge} up`,
      // ClusterIPs are routed to the bridge so the host's connections to them reach nat OUTPUT (and never leave the
      // host).
      `route add ${this.subnets.serviceCIDR} dev ${this.bridge} src ${this.subnets.nodeIP}`,
      // nodad: the address is usable at once (no duplicate detection on a bridge only this instance owns).
      ...(this.nodeIP6 ? [`addr add ${this.nodeIP6}/64 dev ${this.bridge} nodad`] : []),
      ...(this.subnets.serviceCIDR6 ? [`route add ${this.subnets.serviceCIDR6} dev ${this.bridge}`] : []),
    ]);
    // Routed pod traffic (pod → ClusterIP → pod) enters and leaves through the bridge: forwarding on this interface
    // only, so the host's global ip_forward is left as it was. route_localnet lets a ClusterIP lead to an address on
    // 127/8.
    writeFileSync(`/proc/sys/net/ipv4/conf/${this.bridge}/forwarding`, '1');
    writeFileSync(`/proc/sys/net/ipv4/conf/${this.bridge}/route_localnet`, '1');
    // IPv6 ClusterIPs: forwarding on this interface only (the global switch would change how every interface of the
    // host takes router advertisements).
    if (this.subnets.serviceCIDR6) writeFileSync(`/proc/sys/net/ipv6/conf/${this.bridge}/force_forwarding`, '1');
    await run(
      'iptables-restore',
      ['--noflush', '-w'],
      [
        '*filter',
        `:${this.forwardChain} - [0:0]`,
        `-A ${this.forwardChain} -i ${this.bridge} -j ACCEPT`,
        `-A ${this.forwardChain} -o ${this.bridge} -j ACCEPT`,
        `-I FORWARD -j ${this.forwardChain}`,
        'COMMIT',
        '',
      ].join('\n'),
    );
  }

  allocateIP(): string {
    const host = this.freeHosts.shift() ?? this.nextHost++;
    if (host > 254) throw new Error(`pod subnet ${this.subnets.podCIDR} is full`);
    return `${this.subnets.prefix}.${host}`;
  }

  releaseIP(ip: string): void {
    const host = Number(ip.split('.')[3]);
    // Freed addresses go to the back of the queue so a new pod does not inherit a dead pod's conntrack entries at once.
    if (host >= FIRST_POD_HOST && host <= 254 && !this.freeHosts.includes(host)) this.freeHosts.push(host);
  }

  async tearDown(): Promise<void> {
    await removeInstanceChains(this.tag);
    await runQuiet('ip', ['link', 'del', this.bridge]);
    this.subnets.release();
  }
}

/** Host number `host` of an IPv6 /64 written `prefix::/64`, in canonical form (RFC 5952, as status.podIPs has it). */
function ipv6Host(cidr: string, host: number): string {
  return new URL(`http://[${cidr.replace(/\/64$/, '')}${host.toString(16)}]`).hostname.slice(1, -1);
}

/** Whether this kernel can forward IPv6 on one interface alone (net.ipv6.conf.*.force_forwarding, Linux 6.17+). */
export function kernelForwardsIPv6PerInterface(): boolean {
  return existsSync('/proc/sys/net/ipv6/conf/default/force_forwarding');
}

/** The IPv6 address with the same host number as IPv4 address `ip` in the /64 `cidr6` (pods and their twins). */
export function ipv6Twin(cidr6: string, ip: string): string {
  return ipv6Host(cidr6, Number(ip.split('.')[3]));
}

/** Whether the host has IPv6 on (a dual-stack node needs it): the stack loaded and not disabled for new links. */
export function hostHasIPv6(): boolean {
  try {
    return readFileSync('/proc/sys/net/ipv6/conf/default/disable_ipv6', 'utf8').trim() === '0';
  } catch {
    return false;
  }
}

/**
 * Removes every iptables chain of an instance (DVK-<tag>-*) from the filter and nat tables of both families, jumps to
 * them first.
 */
export async function removeInstanceChains(tag: string): Promise<void> {
  for (const family of ['iptables', 'ip6tables'] as const) await removeFamilyChains(family, tag);
}

async function removeFamilyChains(bin: 'iptables' | 'ip6tables', tag: string): Promise<void> {
  for (const table of ['filter', 'nat']) {
    const rules = (await run(`${bin}-save`, ['-t', table])).split('\n');
    const chains = rules.filter((r) => r.startsWith(`:DVK-${tag}-`)).map((r) => r.slice(1).split(' ')[0]);
    if (chains.length === 0) continue;
    const jumps = rules.filter(
      (r) => r.startsWith('-A ') && !r.startsWith(`-A DVK-${tag}-`) && r.includes(`-j DVK-${tag}-`),
    );
    await run(
      `${bin}-restore`,
      ['--noflush', '-w'],
      [
        `*${table}`,
        ...jumps.map((r) => `-D ${r.slice(3)}`),
        ...chains.map((c) => `-F ${c}`),
        ...chains.map((c) => `-X ${c}`),
        'COMMIT',
        '',
      ].join('\n'),
    ).catch(async () => {
      // One bad line fails the whole batch: fall back to one command per rule.
      for (const r of jumps) await runQuiet(bin, ['-w', '-t', table, '-D', ...r.slice(3).split(' ')]);
      for (const c of chains) await runQuiet(bin, ['-w', '-t', table, '-F', c]);
      for (const c of chains) await runQuiet(bin, ['-w', '-t', table, '-X', c]);
    });
  }
}
