// Benchmark of the stolen path under concurrent load (root, real netns): wrk with many kept-alive connections from the
// client netns against the pod IP, round after round on three paths side by side — direct (the pod's own server),
// stolen (agent → devop-splice → the CLI's port-forward tunnel → a session process with the CLI's incoming handler →
// the same server on 127.0.0.1) and the framed C relay pair in devop's two places (the floor of the design). Prints
// each round's requests/s and p99, then RESULT load rps_vs_direct=… p99_vs_direct=… floor_rps_vs_direct=…
// floor_p99_vs_direct=… rps_vs_floor=… worst_tail_vs_median=… (medians over the rounds of each round's ratio to the
// same round's direct, or floor, run).
// The set-up is bench/steal.ts's: the same pod, agent, session process, port-forward relays and C pair.
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { build } from 'esbuild';
import { banner, common } from '../scripts/build-options.mjs';
import { PodNet, type Proc } from '../testkit/netns.js';
import { AGENT_NODE_FLAGS } from '../shared/agent-contract.js';
import { agentNode } from './lib/agent-node.js';
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
}

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

function parseWrk(out: string): WrkRun {
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

    await net.startPod({ port: Object.values(APP).join(','), env: { POD_QUIET: '1' } });
    // The bundles live outside the checkout: NODE_PATH lets ws load bufferutil from the checkout's node_modules.
    process.env.NODE_PATH = resolve(import.meta.dirname, '../node_modules');
    const inPod = (cmd: string[], ready: string): Promise<Proc> => startIn(children, net.podNs, cmd, ready);
    const node = (bundle: string, ...args: string[]): string[] => [
      process.execPath,
      ...PROF_FLAGS,
      join(net.dir, bundle),
      ...args,
    ];
    await inPod(node('portforward-relay.mjs', String(RELAY_STOLEN)), 'LISTENING');
    await inPod(node('portforward-relay.mjs', String(RELAY_FLOOR)), 'LISTENING');
    await inPod([floorBinary, 'agent', String(FLOOR), String(FLOOR_TUNNEL)], 'LISTENING');
    await inPod([floorBinary, 'session', String(RELAY_FLOOR), String(FLOOR_TUNNEL), String(APP.direct)], 'READY');

    const onNode = await agentNode(net.dir);
    process.env.DEVOP_TEST_AGENT_NODE = onNode.path;
    console.log(`agent: node ${onNode.version} from ${onNode.from}`);
    if (CPU_PROF) process.env.DEVOP_TEST_AGENT_FLAGS = [...AGENT_NODE_FLAGS, ...PROF_FLAGS].join(' ');
    const agentEnv = { DEVOP_AGENT_LOG_LEVEL: 'info', DEVOP_AGENT_NATIVE_PORT: '0' };
    const agentProc = await net.startAgent(agentEnv, { viaEntryPoint: !CPU_PROF });
    children.push(agentProc.child);
    if (!agentProc.nativePort) throw new Error('the agent did not start its native data path (devop-splice)');
    const tunnelPorts = `${agentProc.port}:${agentProc.nativePort}`;
    await inPod(
      node('session-proc.mjs', String(RELAY_STOLEN), tunnelPorts, String(APP.stolen), String(APP.direct)),
      'READY',
    );

    const wrk = async (path: Path, seconds: number): Promise<WrkRun> => {
      const url = `http://${net.podIP}:${PORTS[path]}/${path}`;
      const args = [`--net=/run/netns/${net.clientNs}`, 'wrk', `-t${THREADS}`, `-c${CONNECTIONS}`, `-d${seconds}s`];
      const { stdout } = await execFileAsync('nsenter', [...args, '--latency', url], { encoding: 'utf8' });
      return parseWrk(stdout);
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
