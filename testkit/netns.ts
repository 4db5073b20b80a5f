// Test fixture of the agent suites: a "pod" netns (HTTP server in a cgroup named after a 64-hex container ID, with its
// own mount namespace for resolv.conf/hosts), a "client" netns and a host bridge (the "node"), all under a unique
// prefix.
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync, rmdirSync, existsSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { AGENT_COMMAND, AGENT_LOOKUP_COMMAND, AGENT_NODE_FLAGS } from '../shared/agent-contract.js';
import { agentNodeFlagsFor } from './agent-flags.js';
import { waitFor } from './wait.js';

const exec = promisify(execFile);
const FIXTURES = resolve(import.meta.dirname, 'fixtures');
export const AGENT_BUNDLE = resolve(import.meta.dirname, '../dist/agent.cjs');
const CGROUP_ROOT = existsSync('/sys/fs/cgroup/unified') ? '/sys/fs/cgroup/unified' : '/sys/fs/cgroup';

/** An IPv6 address as Node and the kernel print it (RFC 5952: no leading zeros, the longest zero run as ::). */
function canonicalIPv6(ip: string): string {
  return new URL(`http://[${ip}]`).hostname.slice(1, -1);
}

export async function sh(cmd: string): Promise<string> {
  const { stdout } = await exec('sh', ['-c', cmd], { maxBuffer: 8 * 1024 * 1024 });
  return stdout;
}

export interface Proc {
  child: ChildProcess;
  lines: string[];
  pid: number;
}

export interface AgentProc extends Proc {
  /** PID of the agent process inside the pod netns (the re-executed one, from the ready line). */
  innerPid: number;
  port: number;
  /** The native data path's port (devop-splice), when the agent runs it (DEVOP_AGENT_NATIVE_PORT). */
  nativePort?: number;
  agentId: string;
}

export class PodNet {
  /**
   * `ipv4: false`: an IPv6-only pod network — the node's bridge, the pod and the client have no IPv4 address (only
   * loopback's 127.0.0.1, as in an IPv6-only cluster's pods), and their default route is the node's IPv6 address.
   */
  constructor(private readonly opts: { ipv4?: boolean } = {}) {}

  /** Whether the pod network has IPv4 addresses (dual-stack, the default) or only IPv6 ones. */
  get ipv4(): boolean {
    return this.opts.ipv4 ?? true;
  }

  readonly prefix = `dva${randomBytes(3).toString('hex')}`;
  readonly podNs = `${this.prefix}-pod`;
  readonly clientNs = `${this.prefix}-cli`;
  readonly bridge = `${this.prefix}b`;
  readonly dir = mkdtempSync(join(tmpdir(), 'devop-agent-test-'));
  readonly containerId = randomBytes(32).toString('hex');
  readonly cgroupParent = join(CGROUP_ROOT, this.prefix);
  readonly cgroupDir = join(this.cgroupParent, this.containerId);
  private readonly agentCgroups: string[] = [];
  subnet = '';
  private readonly procs: Proc[] = [];

  get nodeIP(): string {
    return this.v4(1);
  }
  get podIP(): string {
    return this.v4(2);
  }
  get clientIP(): string {
    return this.v4(3);
  }
  private v4(host: number): string {
    if (!this.ipv4) throw new Error('this PodNet is IPv6-only: use nodeIP6, podIP6 or clientIP6');
    return `${this.subnet}.${host}`;
  }
  /** The pod's first address (IPv4 unless the network is IPv6-only): what /etc/hosts names it by. */
  get podAddress(): string {
    return this.ipv4 ? this.podIP : this.podIP6;
  }
  /** The client's first address: where the "cluster DNS" listens. */
  get clientAddress(): string {
    return this.ipv4 ? this.clientIP : this.clientIP6;
  }
  /** The same three hosts over IPv6 (a unique-local /64 of the fixture's own), as on a dual-stack node. */
  subnet6 = '';
  get nodeIP6(): string {
    return canonicalIPv6(`${this.subnet6}::1`);
  }
  get podIP6(): string {
    return canonicalIPv6(`${this.subnet6}::2`);
  }
  get clientIP6(): string {
    return canonicalIPv6(`${this.subnet6}::3`);
  }

  /** Creates the bridge, both netns and their veths; picks a /24 no route on the host uses. */
  async setup(): Promise<void> {
    const routes = await sh('ip -4 route; ip -4 addr');
    do {
      this.subnet = `10.${150 + Math.floor(Math.random() * 100)}.${Math.floor(Math.random() * 256)}`;
    } while (routes.includes(`${this.subnet}.`));
    const hex = randomBytes(5).toString('hex');
    // Groups without leading zeros, so the addresses read as Node and the kernel print them (RFC 5952).
    const group = (h: string) => Number.parseInt(h, 16).toString(16);
    this.subnet6 = `fd${hex.slice(0, 2)}:${group(hex.slice(2, 6))}:${group(hex.slice(6))}`;
    const p = this.prefix;
    const node4 = this.ipv4 ? `ip addr add ${this.nodeIP}/24 dev ${this.bridge} && ` : '';
    await sh(
      `ip link add ${this.bridge} type bridge && ${node4}` +
        `ip addr add ${this.nodeIP6}/64 dev ${this.bridge} nodad && ip link set ${this.bridge} up`,
    );
    for (const [ns, short, host] of [
      [this.podNs, 'p', 2],
      [this.clientNs, 'c', 3],
    ] as const) {
      const ip6 = canonicalIPv6(`${this.subnet6}::${host}`);
      const add6 = `ip addr add ${ip6}/64 dev eth0 nodad && ip link set eth0 up`;
      const addresses = this.ipv4
        ? `ip addr add ${this.v4(host)}/24 dev eth0 && ${add6} && ip route add default via ${this.nodeIP}`
        : `${add6} && ip -6 route add default via ${this.nodeIP6}`;
      await sh(
        `ip netns add ${ns} && ip link add ${p}${short}0 type veth peer name ${p}${short}1 && ip link set ` +
          `${p}${short}1 netns ${ns} && ` +
          `ip link set ${p}${short}0 master ${this.bridge} up && ip netns exec ${ns} sh -c 'ip link set lo up && ip ` +
          `link set ${p}${short}1 name eth0 && ${addresses}'`,
      );
    }
    mkdirSync(this.cgroupDir, { recursive: true });
  }

  private spawnTracked(cmd: string, args: string[], env?: NodeJS.ProcessEnv): Proc {
    const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    const proc: Proc = { child, lines: [], pid: child.pid ?? -1 };
    let buf = '';
    const onData = (chunk: Buffer): void => {
      buf += chunk.toString();
      const parts = buf.split('\n');
      buf = parts.pop() ?? '';
      proc.lines.push(...parts);
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    this.procs.push(proc);
    return proc;
  }

  /** Starts the pod's HTTP server in the container cgroup, the pod netns, and a mount namespace of its own. */
  async startPod(opts: {
    port: number | string;
    name?: string;
    env?: Record<string, string>;
    resolvConf?: string;
    hosts?: string;
  }): Promise<Proc> {
    const resolvConf = join(this.dir, 'resolv.conf');
    const hosts = join(this.dir, 'hosts');
    writeFileSync(
      resolvConf,
      opts.resolvConf ??
        `nameserver ${this.clientAddress}\nsearch team.svc.cluster.local svc.cluster.local\noptions ndots:5\n`,
    );
    writeFileSync(
      hosts,
      opts.hosts ?? `127.0.0.1 localhost\n${this.podAddress} ${opts.name ?? 'pod'}\n10.77.0.7 pinned.example\n`,
    );
    const inner =
      `mount --bind ${resolvConf} /etc/resolv.conf && mount --bind ${hosts} /etc/hosts && exec ` +
      `${process.execPath} ${join(FIXTURES, 'pod-server.mjs')}`;
    // Join the cgroup first (nsenter keeps the mount namespace, so /sys/fs/cgroup is still there), then the netns.
    const script =
      `echo $$ > ${this.cgroupDir}/cgroup.procs && exec nsenter --net=/run/netns/${this.podNs} unshare ` +
      `-m --propagation private sh -c '${inner}'`;
    const proc = this.spawnTracked('sh', ['-c', script], {
      PORT: String(opts.port),
      POD_NAME: opts.name ?? 'pod',
      ...opts.env,
    });
    const count = String(opts.port).split(',').length;
    await waitFor(
      'the pod server to listen',
      () => proc.lines.filter((l) => l.startsWith('LISTENING')).length === count,
    );
    return proc;
  }

  /** The pod's first process (the target container's, as job mode finds it). */
  async podPid(): Promise<number> {
    return waitFor(
      'the pod process',
      () => Number(readFileSync(join(this.cgroupDir, 'cgroup.procs'), 'utf8').split('\n')[0]) || undefined,
    );
  }

  /**
   * Runs the built agent the way job mode does (by container ID, from the host, re-entering the pod netns) unless told
   * otherwise.
   */
  async startAgent(
    env: Record<string, string> = {},
    opts: {
      inPodNetns?: boolean;
      cgroup?: string;
      capabilities?: readonly string[];
      viaEntryPoint?: boolean;
      /** With viaEntryPoint: the entry point's Node PID lookup fails if it runs (the shell must find the PID). */
      noNodeLookup?: boolean;
      /** Another copy of the bundle (the programs it runs are looked for next to it). */
      bundle?: string;
    } = {},
  ): Promise<AgentProc> {
    const bundle = opts.bundle ?? AGENT_BUNDLE;
    // DEVOP_TEST_AGENT_NODE: the node the agent runs on (bench:steal passes the agent image's own); this one otherwise.
    const agentNode = process.env.DEVOP_TEST_AGENT_NODE ?? process.execPath;
    // DEVOP_TEST_AGENT_FLAGS: its node flags instead of AGENT_NODE_FLAGS (a bench comparing them).
    // On a Node whose V8 would warn about them, agentNodeFlagsFor adds what silences it.
    const flags = agentNodeFlagsFor(
      agentNode,
      process.env.DEVOP_TEST_AGENT_FLAGS?.split(' ').filter(Boolean) ?? AGENT_NODE_FLAGS,
    );
    let node = [agentNode, ...flags, bundle];
    // viaEntryPoint: through the image's entry point (agent/entry.sh), with that node, those flags and this checkout's
    // bundle in its paths (its PID lookup on that node's defaults, as in the image).
    if (opts.viaEntryPoint) {
      const entry = join(this.dir, 'entry.sh');
      const script = readFileSync(resolve(import.meta.dirname, '../agent/entry.sh'), 'utf8');
      const command = AGENT_COMMAND.join(' ');
      const lookup = AGENT_LOOKUP_COMMAND.join(' ');
      for (const run of [command, lookup])
        if (!script.includes(`'${run}'`)) throw new Error(`agent/entry.sh no longer runs "${run}": update startAgent`);
      writeFileSync(
        entry,
        script
          .replace(`'${command}'`, `'${node.join(' ')}'`)
          .replace(`'${lookup}'`, opts.noNodeLookup ? `'false'` : `'${agentNode} ${bundle}'`),
      );
      node = ['/bin/sh', entry];
    }
    // capabilities: the agent (and what it runs) holds exactly these, as in a container whose securityContext drops ALL
    // and adds them (root's capabilities after exec are its bounding set).
    if (opts.capabilities) {
      const bounding = ['-all', ...opts.capabilities.map((c) => `+${c.toLowerCase()}`)].join(',');
      node = ['setpriv', `--bounding-set=${bounding}`, '--inh-caps=-all', '--', ...node];
    }
    // inPodNetns: started inside the pod's netns, as an ephemeral container (or a targetless pod) is.
    let [cmd, ...args] = opts.inPodNetns ? ['nsenter', `--net=/run/netns/${this.podNs}`, ...node] : node;
    // cgroup: the agent (and every process it starts) lives in that cgroup, as in its own container.
    if (opts.cgroup)
      [cmd, ...args] = ['sh', '-c', `echo $$ > ${opts.cgroup}/cgroup.procs && exec "$@"`, 'sh', cmd, ...args];
    const proc = this.spawnTracked(cmd, args, {
      DEVOP_AGENT_MODE: 'job',
      DEVOP_AGENT_CONTAINER_ID: `containerd://${this.containerId}`,
      DEVOP_AGENT_TOKEN: 'test-token',
      DEVOP_AGENT_PORT: '0',
      DEVOP_AGENT_ID: `${this.prefix}${randomBytes(2).toString('hex')}`,
      DEVOP_AGENT_LOG_LEVEL: 'debug',
      ...env,
    });
    // An agent that ends before its ready line fails at once, with its last words (all of its output is read by
    // 'close').
    let closed = false;
    proc.child.once('close', () => (closed = true));
    const ready = await waitFor(
      "the agent's ready line",
      () =>
        proc.lines
          .map((l) => {
            try {
              return JSON.parse(l);
            } catch {
              return undefined;
            }
          })
          .find((m) => m?.msg === 'ready') ?? (closed ? { msg: 'exited' } : undefined),
    );
    if (ready.msg !== 'ready')
      throw new Error(
        `the agent exited (code ${proc.child.exitCode}) before its ready line: ${proc.lines.slice(-5).join(' | ')}`,
      );
    return { ...proc, innerPid: ready.pid, port: ready.port, nativePort: ready.nativePort, agentId: ready.agentId };
  }

  /**
   * A unix socket at which the test reaches host:port from inside `ns` (one TCP connection per unix connection); with
   * `listenPort`, the relay listens on that TCP port inside `ns` instead (a userspace hop, for the benchmark's
   * baseline).
   */
  async relay(ns: string, host: string, port: number, listenPort?: number): Promise<string> {
    const path =
      listenPort === undefined ? join(this.dir, `relay-${randomBytes(4).toString('hex')}.sock`) : String(listenPort);
    await this.runListener(ns, join(FIXTURES, 'relay.mjs'), [path, host, String(port)]);
    return path;
  }

  /**
   * From the client netns: one HTTP/1.0 GET to the pod IP that shuts down its sending side right after the request (as
   * `nc -N` or a batch client does), with an optional extra header line; what came back once the server closed.
   */
  async halfClosedGet(port: number, path: string, header?: string): Promise<{ body?: string; error?: string }> {
    const args = [
      `--net=/run/netns/${this.clientNs}`,
      process.execPath,
      join(FIXTURES, 'half-close-client.mjs'),
      this.podAddress,
      String(port),
      path,
      ...(header ? [header] : []),
    ];
    const { stdout } = await exec('nsenter', args, { encoding: 'utf8' });
    return JSON.parse(stdout.trim()) as { body?: string; error?: string };
  }

  /** Runs a node script inside `ns` (stopped at teardown) and waits for its LISTENING line. */
  async runListener(ns: string, script: string, args: string[]): Promise<Proc> {
    const proc = this.spawnTracked('nsenter', [`--net=/run/netns/${ns}`, process.execPath, script, ...args]);
    await waitFor(`${basename(script)} to listen`, () => proc.lines.includes('LISTENING'));
    return proc;
  }

  /** The "cluster DNS" at the client IP (the pod's resolv.conf names it). */
  async startDns(records: Record<string, string>): Promise<Proc> {
    const proc = this.spawnTracked('nsenter', [
      `--net=/run/netns/${this.clientNs}`,
      process.execPath,
      join(FIXTURES, 'dns-server.mjs'),
      this.clientAddress,
      JSON.stringify(records),
    ]);
    await waitFor('the DNS server to listen', () => proc.lines.includes('LISTENING'));
    return proc;
  }

  /** A fresh cgroup (v2) for an agent "container", removed by teardown; writing 1 to its cgroup.kill kills it all. */
  agentCgroup(): string {
    const dir = join(this.cgroupParent, `agent-${randomBytes(3).toString('hex')}`);
    mkdirSync(dir, { recursive: true });
    this.agentCgroups.push(dir);
    return dir;
  }

  /** `nft list ruleset` of the pod netns (every nftables table, including iptables-nft's). */
  async nftRuleset(): Promise<string> {
    return sh(`ip netns exec ${this.podNs} nft list ruleset`);
  }

  /**
   * Every devop rule left in the pod netns, wherever the agent may put it: DEVOP lines of iptables-save and
   * ip6tables-save (nft and legacy backends) and every line of an nftables table named devop_* (the owned table).
   * Empty means clean.
   */
  async devopRules(): Promise<string[]> {
    const lines = (await this.iptablesSave()).split('\n').filter((l) => l.includes('DEVOP'));
    let inTable = false;
    for (const line of (await this.nftRuleset()).split('\n')) {
      if (/^table \S+ devop_/.test(line)) inTable = true;
      if (inTable) lines.push(line);
      if (line.startsWith('}')) inTable = false;
    }
    return lines;
  }

  /** iptables-save and ip6tables-save of the pod netns, both backends (nat table). */
  async iptablesSave(): Promise<string> {
    const saves = ['iptables-nft-save', 'iptables-legacy-save', 'ip6tables-nft-save', 'ip6tables-legacy-save'];
    return sh(`ip netns exec ${this.podNs} sh -c '${saves.map((s) => `${s} -t nat 2>/dev/null; `).join('')}true'`);
  }

  /**
   * Kills everything this fixture started (and anything left in its netns, e.g. a guard), then removes netns, links,
   * cgroups.
   */
  async teardown(): Promise<void> {
    for (const proc of this.procs) if (proc.child.exitCode === null) proc.child.kill('SIGKILL');
    for (const dir of this.agentCgroups) {
      try {
        writeFileSync(join(dir, 'cgroup.kill'), '1');
      } catch {
        // already gone
      }
    }
    for (const ns of [this.podNs, this.clientNs]) {
      const pids = await sh(`ip netns pids ${ns} 2>/dev/null || true`);
      for (const pid of pids.split('\n').filter(Boolean)) {
        try {
          process.kill(Number(pid), 'SIGKILL');
        } catch {
          // already gone
        }
      }
    }
    await sh(
      `ip netns del ${this.podNs} 2>/dev/null; ip netns del ${this.clientNs} 2>/dev/null; ip link del ${this.bridge} ` +
        `2>/dev/null; true`,
    );
    await waitFor(
      'the test cgroup to empty',
      () => {
        try {
          for (const dir of [...this.agentCgroups, this.cgroupDir]) if (existsSync(dir)) rmdirSync(dir);
          if (existsSync(this.cgroupParent)) rmdirSync(this.cgroupParent);
          return true;
        } catch {
          return false;
        }
      },
      10_000,
    ).catch(() => undefined);
    rmSync(this.dir, { recursive: true, force: true });
  }

  /** Processes the pod server's log says it handled: "REQ <method> <url> from <addr>". */
  podRequests(pod: Proc): string[] {
    return pod.lines.filter((l) => l.startsWith('REQ '));
  }

  readCmdline(pid: number): string {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
    } catch {
      return '';
    }
  }

  readHostFile(path: string): string {
    return readFileSync(path, 'utf8');
  }
}
