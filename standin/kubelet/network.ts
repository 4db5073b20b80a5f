// The node's network: one bridge per stand-in instance with its own /24 pod subnet (node IP = .1, .2 kept for the
// control plane), pod IP allocation, and the per-instance iptables chains that let pod traffic cross the host.
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../../shared/errors.js';
import { ipBatch, run, runQuiet } from './host.js';

/** Where subnet reservations live, so that clusters started at the same moment never pick the same /24. */
export const SUBNET_LOCK_DIR = '/run/devop-kubelet/subnets';
/** Pod subnets are 10.<244..250>.<x>.0/24; services get the twin 10.<96..102>.<x>.0/24. */
const FIRST_OCTET2 = 244;
const LAST_OCTET2 = 250;
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

async function usedPrefixes(): Promise<Set<string>> {
  const used = new Set<string>();
  const routes = JSON.parse(await run('ip', ['-j', 'route', 'show', 'table', 'all'])) as Array<{ dst?: string }>;
  const addrs = JSON.parse(await run('ip', ['-j', 'addr', 'show'])) as Array<{ addr_info?: Array<{ local?: string }> }>;
  const all = [
    ...routes.map((r) => r.dst ?? ''),
    ...addrs.flatMap((a) => (a.addr_info ?? []).map((i) => i.local ?? '')),
  ];
  for (const addr of all) {
    const m = /^10\.(\d+)\.(\d+)\./.exec(addr);
    if (m) used.add(`10.${m[1]}.${m[2]}`);
  }
  return used;
}

/** Picks a free pod /24 (checked against the host's routes and addresses) and reserves it with a lock file. */
export async function reserveSubnets(instance: string): Promise<NodeSubnets> {
  mkdirSync(SUBNET_LOCK_DIR, { recursive: true });
  // A killed run leaves its bridge and reservation behind: clear those first so their subnets become free again.
  const { cleanStaleInstances } = await import('./stale.js');
  await cleanStaleInstances();
  const used = await usedPrefixes();
  for (let o2 = FIRST_OCTET2; o2 <= LAST_OCTET2; o2++) {
    for (let o3 = 0; o3 < 256; o3++) {
      const prefix = `10.${o2}.${o3}`;
      const servicePrefix = `10.${96 + o2 - FIRST_OCTET2}.${o3}`;
      if (used.has(prefix) || used.has(servicePrefix)) continue;
      const lock = join(SUBNET_LOCK_DIR, prefix);
      if (!tryLock(lock, instance)) continue;
      return {
        podCIDR: `${prefix}.0/24`,
        nodeIP: `${prefix}.1`,
        controlPlaneIP: `${prefix}.2`,
        serviceCIDR: `${servicePrefix}.0/24`,
        prefix,
        release: () => rmSync(lock, { force: true }),
      };
    }
  }
  throw new UserError(
    'no free pod subnet in 10.244.0.0/24–10.250.255.0/24',
    'stop other stand-in clusters (or remove the routes that use these subnets)',
  );
}

function tryLock(lock: string, instance: string): boolean {
  try {
    writeFileSync(lock, `${process.pid} ${instance}\n`, { flag: 'wx' });
    return true;
  } catch {
    // Held: reclaim it only if its owner is gone (a killed test run).
    try {
      const pid = Number(readFileSync(lock, 'utf8').split(' ')[0]);
      if (pid && pidAlive(pid)) return false;
      rmSync(lock, { force: true });
      writeFileSync(lock, `${process.pid} ${instance}\n`, { flag: 'wx' });
      return true;
    } catch {
      return false;
    }
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

  async setUp(): Promise<void> {
    await ipBatch([
      `link add ${this.bridge} type bridge`,
      `addr add ${this.subnets.nodeIP}/24 dev ${this.bridge}`,
      `link set ${this.bridge} up`,
      // ClusterIPs are routed to the bridge so the host's connections to them reach nat OUTPUT (and never leave the
      // host).
      `route add ${this.subnets.serviceCIDR} dev ${this.bridge} src ${this.subnets.nodeIP}`,
    ]);
    // Routed pod traffic (pod → ClusterIP → pod) enters and leaves through the bridge: forwarding on this interface
    // only, so the host's global ip_forward is left as it was. route_localnet lets a ClusterIP lead to an address on
    // 127/8.
    writeFileSync(`/proc/sys/net/ipv4/conf/${this.bridge}/forwarding`, '1');
    writeFileSync(`/proc/sys/net/ipv4/conf/${this.bridge}/route_localnet`, '1');
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

/** Removes every iptables chain of an instance (DVK-<tag>-*) from the filter and nat tables, jumps to them first. */
export async function removeInstanceChains(tag: string): Promise<void> {
  for (const table of ['filter', 'nat']) {
    const rules = (await run('iptables-save', ['-t', table])).split('\n');
    const chains = rules.filter((r) => r.startsWith(`:DVK-${tag}-`)).map((r) => r.slice(1).split(' ')[0]);
    if (chains.length === 0) continue;
    const jumps = rules.filter(
      (r) => r.startsWith('-A ') && !r.startsWith(`-A DVK-${tag}-`) && r.includes(`-j DVK-${tag}-`),
    );
    await run(
      'iptables-restore',
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
      for (const r of jumps) await runQuiet('iptables', ['-w', '-t', table, '-D', ...r.slice(3).split(' ')]);
      for (const c of chains) await runQuiet('iptables', ['-w', '-t', table, '-F', c]);
      for (const c of chains) await runQuiet('iptables', ['-w', '-t', table, '-X', c]);
    });
  }
}
