// A network path with a real round-trip time for bench/tunnel.ts (root): this host and a network namespace ("far")
// joined by two TUN devices whose packets delay-tun.c holds `delayMs` each way. TCP over it waits a round trip for its
// ACKs (slow start, window growth and the send buffer's bound included), as it does to a cluster that far away.
// Processes run in the far namespace through `exec`; `expose(port)` makes a service that listens on the far side's
// loopback (as devop-splice's tunnel port does in a pod) reachable at `far` on the same port, by DNAT in the kernel.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join, resolve } from 'node:path';

const NS_PREFIX = 'devop-bench-far-';
/** The path's two ends: a /30 of its own (the host gets the near address on the near device). */
const NEAR = '10.254.77.1';
const FAR = '10.254.77.2';

export interface TunPath {
  /** Address of this host's end. */
  readonly near: string;
  /** Address of the far end (the namespace's). */
  readonly far: string;
  /** Command prefix that runs a command in the far namespace. */
  readonly exec: readonly string[];
  /** Makes 127.0.0.1:<port> of the far namespace reachable at <far>:<port> over the path. */
  expose(port: number): void;
  /** Ends the delay process (its devices go with it) and deletes the namespace; processes in it must be gone first. */
  close(): Promise<void>;
}

const ip = (...args: string[]): void => {
  execFileSync('ip', args, { stdio: 'pipe' });
};

/** Namespaces left by a bench that was killed: their owner's PID (in the name) no longer runs. */
function removeStale(): void {
  const names = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })
    .split('\n')
    .map((line) => line.split(' ')[0])
    .filter((name) => name.startsWith(NS_PREFIX));
  for (const name of names) {
    const pid = Number(name.slice(NS_PREFIX.length));
    try {
      process.kill(pid, 0);
    } catch {
      ip('netns', 'del', name);
    }
  }
}

/** Builds delay-tun.c into `dir` and starts the path; throws with the reason when this machine cannot. */
export async function startTunPath(dir: string, delayMs: number): Promise<TunPath> {
  if (process.getuid?.() !== 0) throw new Error('the 20 ms path needs root (TUN devices, a network namespace)');
  removeStale();
  const binary = join(dir, 'delay-tun');
  execFileSync('cc', ['-O2', '-o', binary, resolve(import.meta.dirname, 'delay-tun.c')], { stdio: 'pipe' });
  const ns = `${NS_PREFIX}${process.pid}`;
  const [nearDev, farDev] = [`dbt${process.pid}n`, `dbt${process.pid}f`];
  ip('netns', 'add', ns);
  let line: ChildProcess | undefined;
  const close = async (): Promise<void> => {
    if (line && line.exitCode === null) {
      line.stdin?.end();
      await once(line, 'exit');
    }
    try {
      ip('netns', 'del', ns);
    } catch {
      // Already gone.
    }
  };
  try {
    line = spawn(binary, [String(delayMs), nearDev, farDev], { stdio: ['pipe', 'pipe', 'inherit'] });
    const [first] = (await Promise.race([
      once(line.stdout as NodeJS.ReadableStream, 'data'),
      once(line, 'exit').then(() => {
        throw new Error('delay-tun exited before it was ready');
      }),
    ])) as [Buffer];
    if (!first.toString().includes('"ready":true')) throw new Error(`delay-tun said ${first.toString()}`);
    ip('link', 'set', farDev, 'netns', ns);
    ip('addr', 'add', `${NEAR}/30`, 'dev', nearDev);
    ip('link', 'set', nearDev, 'up');
    const inNs = (...args: string[]): void => {
      execFileSync('ip', ['netns', 'exec', ns, ...args], { stdio: 'pipe' });
    };
    inNs('ip', 'addr', 'add', `${FAR}/30`, 'dev', farDev);
    inNs('ip', 'link', 'set', farDev, 'up');
    inNs('ip', 'link', 'set', 'lo', 'up');
    // DNAT to the loopback needs route_localnet on the device the packets come in on.
    inNs('sysctl', '-qw', `net.ipv4.conf.${farDev}.route_localnet=1`);
    inNs('nft', 'add table ip devop_bench; add chain ip devop_bench pre { type nat hook prerouting priority dstnat; }');
    return {
      near: NEAR,
      far: FAR,
      exec: ['ip', 'netns', 'exec', ns],
      expose: (port) => inNs('nft', `add rule ip devop_bench pre ip daddr ${FAR} tcp dport ${port} dnat to 127.0.0.1`),
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
