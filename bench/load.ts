// Benchmark of the stolen path under concurrent load (root, real netns): wrk with many kept-alive connections from the
// client netns against the pod IP, round after round on three paths side by side — direct (the pod's own server),
// stolen (agent → devop-splice → the CLI's port-forward tunnel → a session process with the CLI's incoming handler →
// the same server on 127.0.0.1) and the framed C relay pair in devop's two places (the floor of the design). Prints
// each round's requests/s and p99, then RESULT load rps_vs_direct=… p99_vs_direct=… floor_rps_vs_direct=…
// floor_p99_vs_direct=… rps_vs_floor=… worst_tail_vs_median=… (medians over the rounds of each round's ratio to the
// same round's direct, or floor, run). Before it, where the CPU goes: each path's processes' CPU per request (wrk's
// too), the kernel's softirq, and their read and write system calls per request. Every path keeps both cores busy, so
// a path's requests/s go as the inverse of that sum.
// The set-up is bench/steal.ts's: the same pod, agent, session process, port-forward relays and C pair.
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import { loadavg } from 'node:os';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { build } from 'esbuild';
import { banner, common } from '../scripts/build-options.mjs';
import { PodNet, type Proc } from '../testkit/netns.js';
import { AGENT_NODE_FLAGS } from '../shared/agent-contract.js';
import { agentNode } from './lib/agent-node.js';
import { CLK_TCK, cpuMs, machineCpuMs } from './lib/proc-cpu.js';
import { exeOf, processTree } from './lib/proc-tree.js';
import { teardownOnInterrupt } from './lib/interrupt.js';
import { waitFor } from '../testkit/wait.js';

const execFileAsync = promisify(execFile);
/** Connections wrk keeps open (the figure: 32 from one pod). */
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
/** wrk's threads: one per core of this 2-core machine. */
const THREADS = 2;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
/** BENCH_CPU_PROF=<dir>: V8 CPU profiles of the agent, the session and the relay, written there at the end. */
const CPU_PROF = process.env.BENCH_CPU_PROF;
const PROF_FLAGS = CPU_PROF ? ['--cpu-prof', '--cpu-prof-interval=200', `--cpu-prof-dir=${CPU_PROF}`] : [];
/** The pod's app listens on both; the agent redirects `stolen` to the session before the app sees it. */
const APP = { direct: 3001, stolen: 3000 };
const FLOOR = 3006;
const FLOOR_TUNNEL = 3007;
const RELAY_STOLEN = 3008;
const RELAY_FLOOR = 3009;
const PATHS = ['direct', 'stolen', 'floor'] as const;
type Path = (typeof PATHS)[number];
const PORTS: Record<Path, number> = { direct: APP.direct, stolen: APP.stolen, floor: FLOOR };

interface WrkRun {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  /** Requests wrk completed in the run. */
  requests: number;
  /** CPU (user + system ms) each process of a path used during the run, and the whole machine's busy and total ms. */
  cpu: Record<string, number>;
  machine: { busy: number; all: number; softirq: number };
  /** Read and write system calls each process of a path made during the run (/proc/PID/io syscr, syscw). */
  calls: Record<string, { reads: number; writes: number }>;
}

/** Read and write system calls a process has made so far (read, readv, write, writev on any file, sockets too). */
function syscalls(pid: number): { reads: number; writes: number } {
  const io = readFileSync(`/proc/${pid}/io`, 'utf8');
  const field = (name: string): number => Number(new RegExp(`^${name}: (\\d+)$`, 'm').exec(io)?.[1] ?? Number.NaN);
  return { reads: field('syscr'), writes: field('syscw') };
}

/** The processes on each path whose CPU is counted per request (the kernel's share is in the machine's rest). */
const ON_PATH: Record<Path, string[]> = {
  direct: ['wrk', 'app'],
  stolen: ['wrk', 'app', 'devop-splice', 'agent', 'relay', 'session'],
  floor: ['wrk', 'app', 'floor agent', 'floor relay', 'floor session'],
};

const load = (): string =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/** wrk prints latencies as 812.00us, 1.20ms or 1.05s: in ms. */
function wrkMs(text: string): number {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(text);
  if (!m) throw new Error(`wrk: a latency it printed is not one: ${text}`);
  return Number(m[1]) * { us: 0.001, ms: 1, s: 1000, m: 60_000 }[m[2] as 'us' | 'ms' | 's' | 'm'];
}

/** User + system ms of the waited-for children of a process, from its /proc/PID/stat line (fields 16 and 17). */
function childrenCpuMs(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[13]) + Number(fields[14])) * 1000) / CLK_TCK;
}

function parseWrk(out: string): Omit<WrkRun, 'cpu' | 'machine' | 'calls'> {
  const field = (re: RegExp): string => {
    const m = re.exec(out);
    if (!m) throw new Error(`wrk: no ${re} in its output:\n${out}`);
    return m[1];
  };
  const errs = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out);
  return {
    rps: Number(field(/Requests\/sec:\s+([\d.]+)/)),
    p50: wrkMs(field(/^\s+50%\s+(\S+)/m)),
    p99: wrkMs(field(/^\s+99%\s+(\S+)/m)),
    errors: (errs ? errs.slice(1).reduce((n, e) => n + Number(e), 0) : 0) + Number(non2xx?.[1] ?? 0),
    requests: Number(field(/(\d+) requests in/)),
  };
}

/** Starts a process inside `ns` that prints `ready` (a whole line) once it serves. */
async function startIn(children: ChildProcess[], ns: string, cmd: string[], ready: string): Promise<Proc> {
  const child = spawn('nsenter', [`--net=/run/netns/${ns}`, ...cmd], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  const proc: Proc = { child, lines: [], pid: child.pid ?? -1 };
  let buf = '';
  child.stdout?.on('data', (c: Buffer) => {
    const parts = (buf + c.toString()).split('\n');
    buf = parts.pop() ?? '';
    proc.lines.push(...parts);
  });
  await waitFor(
    `${cmd[1] ?? cmd[0]} to be ready`,
    () => proc.lines.some((l) => l.startsWith(ready)) || child.exitCode !== null,
    60_000,
  );
  if (child.exitCode !== null) throw new Error(`${cmd.join(' ')} exited (code ${child.exitCode})`);
  return proc;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('bench:load needs root (network namespaces, iptables)');
  try {
    execFileSync('wrk', ['--version'], { stdio: 'ignore' });
  } catch (err) {
    // wrk --version exits 1 after printing its version; only a missing binary is a problem.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new Error('bench:load: wrk is not installed — fix: apt-get install wrk (or run scripts/setup.sh)');
    }
  }
  execFileSync(process.execPath, ['scripts/build.mjs'], { stdio: 'inherit' });
  const net = new PodNet();
  const children: ChildProcess[] = [];
  const teardown = teardownOnInterrupt(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
    if (CPU_PROF) {
      const exited = (): boolean => children.every((c) => c.exitCode !== null || c.signalCode !== null);
      await waitFor('the profiled processes to exit', exited, 20_000).catch(() => undefined);
    }
    await net.teardown();
  });
  try {
    await net.setup();
    console.log(`load before: ${load()}`);
    const entryPoints = ['session-proc', 'portforward-relay'].map((h) => resolve(import.meta.dirname, `lib/${h}.ts`));
    await build({ ...common, banner, entryPoints, outdir: net.dir, outExtension: { '.js': '.mjs' } });
    const floorBinary = join(net.dir, 'ws-framed-pair');
    execFileSync('cc', ['-O2', '-o', floorBinary, resolve(import.meta.dirname, 'lib/ws-framed-pair.c')]);

    const pod = await net.startPod({ port: Object.values(APP).join(','), env: { POD_QUIET: '1' } });
    // The bundles live outside the checkout: NODE_PATH lets ws load bufferutil from the checkout's node_modules.
    process.env.NODE_PATH = resolve(import.meta.dirname, '../node_modules');
    const inPod = (cmd: string[], ready: string): Promise<Proc> => startIn(children, net.podNs, cmd, ready);
    const node = (bundle: string, ...args: string[]): string[] => [
      process.execPath,
      ...PROF_FLAGS,
      join(net.dir, bundle),
      ...args,
    ];
    const relay = await inPod(node('portforward-relay.mjs', String(RELAY_STOLEN)), 'LISTENING');
    const floorRelay = await inPod(node('portforward-relay.mjs', String(RELAY_FLOOR)), 'LISTENING');
    const floorAgent = await inPod([floorBinary, 'agent', String(FLOOR), String(FLOOR_TUNNEL)], 'LISTENING');
    const floorSession = await inPod(
      [floorBinary, 'session', String(RELAY_FLOOR), String(FLOOR_TUNNEL), String(APP.direct)],
      'READY',
    );

    const onNode = await agentNode(net.dir);
    process.env.DEVOP_TEST_AGENT_NODE = onNode.path;
    console.log(`agent: node ${onNode.version} from ${onNode.from}`);
    if (CPU_PROF) process.env.DEVOP_TEST_AGENT_FLAGS = [...AGENT_NODE_FLAGS, ...PROF_FLAGS].join(' ');
    const agentEnv = { DEVOP_AGENT_LOG_LEVEL: 'info', DEVOP_AGENT_NATIVE_PORT: '0' };
    const agentProc = await net.startAgent(agentEnv, { viaEntryPoint: !CPU_PROF });
    children.push(agentProc.child);
    if (!agentProc.nativePort) throw new Error('the agent did not start its native data path (devop-splice)');
    const tunnelPorts = `${agentProc.port}:${agentProc.nativePort}`;
    const session = await inPod(
      node('session-proc.mjs', String(RELAY_STOLEN), tunnelPorts, String(APP.stolen), String(APP.direct)),
      'READY',
    );
    const nodeIn = (root: number): number => {
      const found = processTree(root).find((pid) => exeOf(pid) === process.execPath);
      if (found === undefined) throw new Error(`no node process below ${root}`);
      return found;
    };
    const splice = processTree(agentProc.innerPid).find((pid) => exeOf(pid).endsWith('splice'));
    if (splice === undefined) throw new Error('devop-splice is not among the agent processes');
    const pids: Record<string, number> = {
      app: nodeIn(pod.pid),
      'devop-splice': splice,
      agent: agentProc.innerPid,
      relay: relay.pid,
      session: session.pid,
      'floor agent': floorAgent.pid,
      'floor relay': floorRelay.pid,
      'floor session': floorSession.pid,
    };
    const cpuNow = (): Record<string, number> =>
      Object.fromEntries(
        Object.entries(pids).map(([name, pid]) => {
          const { user, sys } = cpuMs(pid);
          return [name, user + sys];
        }),
      );

    const wrk = async (path: Path, seconds: number): Promise<WrkRun> => {
      const url = `http://${net.podIP}:${PORTS[path]}/${path}`;
      // wrk runs under a shell that then prints its own stat line: wrk's CPU is in its children's fields.
      const script = 'wrk "$@"; s=$?; echo "WRKSTAT $(cat /proc/$$/stat)"; exit $s';
      const wrkArgs = [`-t${THREADS}`, `-c${CONNECTIONS}`, `-d${seconds}s`, '--latency', url];
      const args = [`--net=/run/netns/${net.clientNs}`, 'sh', '-c', script, 'sh', ...wrkArgs];
      const callsBefore = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, syscalls(pid)]));
      const [before, machineBefore] = [cpuNow(), machineCpuMs()];
      const { stdout } = await execFileAsync('nsenter', args, { encoding: 'utf8' });
      const [after, machineAfter] = [cpuNow(), machineCpuMs()];
      const calls = Object.fromEntries(
        Object.entries(pids).map(([name, pid]) => {
          const [b, a] = [callsBefore[name], syscalls(pid)];
          return [name, { reads: a.reads - b.reads, writes: a.writes - b.writes }];
        }),
      );
      const cpu = Object.fromEntries(Object.keys(pids).map((name) => [name, after[name] - before[name]]));
      cpu.wrk = childrenCpuMs(/^WRKSTAT (.*)$/m.exec(stdout)?.[1] ?? '');
      const machine = {
        busy: machineAfter.busy - machineBefore.busy,
        all: machineAfter.all - machineBefore.all,
        softirq: machineAfter.softirq - machineBefore.softirq,
      };
      return { ...parseWrk(stdout), cpu, machine, calls };
    };
    // A warm-up of each path (JIT, the tunnel's buffers, the connections' first dial), not counted.
    for (const p of PATHS) await wrk(p, 2);
    const rounds: Record<Path, WrkRun>[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      // The order turns each round, so no path always runs right after another's load.
      const order = PATHS.map((_, i) => PATHS[(i + r) % PATHS.length]);
      const round = {} as Record<Path, WrkRun>;
      for (const p of order) round[p] = await wrk(p, SECONDS);
      rounds.push(round);
      const row = PATHS.map((p) => {
        const w = round[p];
        const errors = w.errors ? ` ${w.errors} errors` : '';
        return `${p} ${w.rps.toFixed(0)} req/s p50 ${w.p50.toFixed(2)} p99 ${w.p99.toFixed(2)} ms${errors}`;
      });
      console.log(`round ${r + 1} (load ${load()}): ${row.join('; ')}`);
    }
    const ratio = (p: Path, q: 'rps' | 'p99', base: Path = 'direct'): number =>
      median(rounds.map((r) => r[p][q] / r[base][q]));
    // A round's tail against the typical: the worst p99 of the stolen path over the median of its p99s.
    const stolenP99 = rounds.map((r) => r.stolen.p99);
    const errors = rounds.reduce((n, r) => n + PATHS.reduce((m, p) => m + r[p].errors, 0), 0);
    console.log(`load at the end: ${load()}; errors over all rounds: ${errors}`);
    // Where the CPU goes: each path's processes, summed over the rounds, per request, the kernel's softirq (the
    // packets' loopback and veth work no process is charged with) and the rest of the machine's busy time.
    for (const p of PATHS) {
      const runs = rounds.map((r) => r[p]);
      const requests = runs.reduce((n, w) => n + w.requests, 0);
      const perRequest = (ms: number): string => ((ms * 1000) / requests).toFixed(1);
      const busy = runs.reduce((n, w) => n + w.machine.busy, 0);
      const all = runs.reduce((n, w) => n + w.machine.all, 0);
      const softirq = runs.reduce((n, w) => n + w.machine.softirq, 0);
      const own = ON_PATH[p].map((name) => [name, runs.reduce((n, w) => n + w.cpu[name], 0)] as const);
      const rest = busy - softirq - own.reduce((n, [, ms]) => n + ms, 0);
      const parts = [...own, ['softirq', softirq] as const, ['other processes', rest] as const].map(
        ([n, ms]) => `${n} ${perRequest(ms)}`,
      );
      console.log(
        `CPU per request on ${p}, µs: ${parts.join(', ')}; machine ${perRequest(busy)} ` +
          `(cores busy ${((100 * busy) / all).toFixed(0)} %)`,
      );
      const perCall = (n: number): string => (n / requests).toFixed(2);
      // devop-splice's send(2) and recv(2) are not among what /proc/PID/io counts.
      const calls = ON_PATH[p]
        .filter((name) => name !== 'wrk' && name !== 'devop-splice')
        .map((name) => {
          const sum = (k: 'reads' | 'writes'): number => runs.reduce((n, w) => n + w.calls[name][k], 0);
          return `${name} ${perCall(sum('reads'))}/${perCall(sum('writes'))}`;
        });
      console.log(`system calls per request on ${p}, reads/writes: ${calls.join(', ')}`);
    }
    const fixed = (p: Path, q: 'rps' | 'p99', base: Path = 'direct'): string => ratio(p, q, base).toFixed(2);
    const worstTail = (Math.max(...stolenP99) / median(stolenP99)).toFixed(2);
    console.log(
      `RESULT load rps_vs_direct=${fixed('stolen', 'rps')} p99_vs_direct=${fixed('stolen', 'p99')} ` +
        `floor_rps_vs_direct=${fixed('floor', 'rps')} floor_p99_vs_direct=${fixed('floor', 'p99')} ` +
        `rps_vs_floor=${fixed('stolen', 'rps', 'floor')} worst_tail_vs_median=${worstTail}`,
    );
  } finally {
    await teardown();
  }
}

// Exits once done: teardown does not close every handle the set-up opened.
main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
