// A pod sandbox: the pod's network namespace (veth on the node bridge, pod IP, default route via the node), its UTS
// (hostname) and IPC namespaces, which every container of the pod joins — kept by bind mounts, as the pause container
// keeps them on a node — and the kubelet-managed resolv.conf/hosts/hostname files mounted over each container's /etc.
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ipBatch, run, runQuiet } from './host.js';
import type { NodeNetwork } from './network.js';
import type { PodHostname } from './pod-hostname.js';

export interface SandboxConfig {
  /** Unique netns name (e.g. dvk-<instance>-<n>). */
  name: string;
  /** Host end of the veth pair (≤ 15 characters). */
  hostVeth: string;
  podName: string;
  namespace: string;
  /** Cluster DNS: search path and nameserver written into the pod's resolv.conf. */
  dnsSearch: string[];
  hostAliases?: Array<{ ip: string; hostnames: string[] }>;
  /** Where the pod's UTS and IPC namespaces are bind-mounted (files `uts` and `ipc`). */
  namespacesDir: string;
  /** The pod's hostname and domain (standin/kubelet/pod-hostname.ts). */
  host: PodHostname;
}

export class PodSandbox {
  readonly netnsPath: string;
  readonly etcDir: string;
  /** The pod's UTS namespace (its hostname) and IPC namespace, for the containers to join. */
  readonly utsPath: string;
  readonly ipcPath: string;
  private removed = false;

  /** The pod's addresses, IPv4 first (status.podIPs): one more, IPv6, on a dual-stack node. */
  readonly podIPs: string[];

  private constructor(
    readonly config: SandboxConfig,
    readonly podIP: string,
    private readonly network: NodeNetwork,
  ) {
    const ip6 = network.ip6Of(podIP);
    this.podIPs = ip6 ? [podIP, ip6] : [podIP];
    this.netnsPath = `/run/netns/${config.name}`;
    this.etcDir = `/etc/netns/${config.name}`;
    this.utsPath = join(config.namespacesDir, 'uts');
    this.ipcPath = join(config.namespacesDir, 'ipc');
  }

  get name(): string {
    return this.config.name;
  }

  /** Creates the netns and wires it to the bridge; on failure removes what it made, and only that. */
  static async create(network: NodeNetwork, config: SandboxConfig): Promise<PodSandbox> {
    // A netns or link of the sandbox's names that is already there is not this attempt's (another program's, or left
    // by a run): failing before anything is made keeps the clean-up below from removing it. (`ip -batch` would fail
    // on it too, but without saying which of its commands did.)
    const taken = [
      existsSync(`/run/netns/${config.name}`) && `network namespace ${config.name}`,
      existsSync(`/sys/class/net/${config.hostVeth}`) && `link ${config.hostVeth}`,
    ].filter(Boolean);
    if (taken.length > 0) throw new Error(`${taken.join(' and ')}: already on the node, not this pod's; left as it is`);
    const podIP = network.allocateIP();
    const sandbox = new PodSandbox(config, podIP, network);
    try {
      sandbox.writeEtcFiles();
      await ipBatch([
        `netns add ${config.name}`,
        `link add ${config.hostVeth} type veth peer name eth0 netns ${config.name}`,
        `link set ${config.hostVeth} master ${network.bridge} up`,
        // A pod reaching itself through its Service leaves and re-enters by the same bridge port (as with kubenet).
        `link set ${config.hostVeth} type bridge_slave hairpin on`,
      ]);
      await run(
        'ip',
        ['-n', config.name, '-batch', '-'],
        [
          'link set lo up',
          `addr add ${podIP}/24 dev eth0`,
          'link set eth0 up',
          `route add default via ${network.nodeIP} dev eth0`,
          ...(sandbox.podIPs[1] && network.nodeIP6
            ? [`addr add ${sandbox.podIPs[1]}/64 dev eth0 nodad`, `route add default via ${network.nodeIP6} dev eth0`]
            : []),
          '',
        ].join('\n'),
      );
      await sandbox.createNamespaces();
      return sandbox;
    } catch (err) {
      await sandbox.remove();
      throw err;
    }
  }

  /** unshare(1) makes the namespaces persistent by bind-mounting them on files: they outlive any one container. */
  private async createNamespaces(): Promise<void> {
    mkdirSync(this.config.namespacesDir, { recursive: true });
    writeFileSync(this.utsPath, '');
    writeFileSync(this.ipcPath, '');
    await run('unshare', [`--uts=${this.utsPath}`, `--ipc=${this.ipcPath}`, 'hostname', this.config.host.nodename]);
  }

  private writeEtcFiles(): void {
    const { host, dnsSearch, hostAliases = [] } = this.config;
    mkdirSync(this.etcDir, { recursive: true });
    writeFileSync(
      `${this.etcDir}/resolv.conf`,
      `search ${dnsSearch.join(' ')}\nnameserver ${this.network.nodeIP}\noptions ndots:5\n`,
    );
    writeFileSync(`${this.etcDir}/hostname`, `${host.nodename}\n`);
    // The kubelet-managed hosts file (kubernetes pkg/kubelet/kubelet_pods.go managedHostsFileContent): localhost and
    // the IPv6 boilerplate, the pod's hostname (its FQDN first when it has a domain) on each of its IPs, then
    // hostAliases.
    const names = host.domain ? `${host.hostname}.${host.domain}\t${host.hostname}` : host.hostname;
    const aliases = hostAliases.map((a) => `${a.ip}\t${a.hostnames.join('\t')}\n`).join('');
    writeFileSync(
      `${this.etcDir}/hosts`,
      '# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' +
        'fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n' +
        this.podIPs.map((ip) => `${ip}\t${names}\n`).join('') +
        aliases,
    );
  }

  async remove(): Promise<void> {
    if (this.removed) return;
    this.removed = true;
    await runQuiet('ip', ['link', 'del', this.config.hostVeth]);
    await runQuiet('ip', ['netns', 'del', this.config.name]);
    rmSync(this.etcDir, { recursive: true, force: true });
    for (const path of [this.utsPath, this.ipcPath]) await runQuiet('umount', [path]);
    rmSync(this.config.namespacesDir, { recursive: true, force: true });
    this.network.releaseIP(this.podIP);
  }
}
