// Benchmark of the agent's data path, side by side in one run (root, real netns): per-request latency through a stolen
// port vs. straight to the pod's app, on kept-alive connections and on a new connection per request; the same through a
// floor, two relay processes in C in devop's two places; the pod's latency with and without mirroring; and the RSS of
// the agent's processes with 1 000 stolen connections carrying data. Last line: RESULT steal added_p50_ms=…
// p50_vs_floor=… added_p99_ms=… newconn_added_p50_ms=… mirror_overhead_p50=… agent_rss_mib_1000=…
//
// The stolen path has the shape of a cluster's: client → agent (pod netns, started through the image's entry point, on
// the image's node; whole steals of a session that joins it go through its native data path, devop-splice) → tunnel →
// session (a process of its own, as the CLI is, joining the native path as the CLI does) → the local command, which is
// the pod's app itself on 127.0.0.1, so both paths end at the same server. Beside it, the same agent splicing in Node
// for a session that does not join (in-node). The tunnel is the CLI's own (cli/session/connect.ts, cli/kube/tunnel.ts:
// one pods/portforward WebSocket for both ports) through a relay running the stand-in's port-forward code
// (bench/lib/portforward-relay.ts), which unwraps it onto a TCP connection to the agent as kubelet does: the bytes
// cross WebSocket framing as in a cluster, with one hop where a cluster has several (API server, kubelet, runtime).
// The floor (bench/lib/ws-framed-pair.c, built with cc here) takes the same path through a relay of its own: an agent
// side and a session side in C that only frame, unframe and dial, so stolen ÷ floor is what devop's two processes cost
// against the least two processes in their places cost on this machine now. On request (BENCH_PATTERN naming
// node-floor or node-floor-new), the floor with its session side in Node (bench/lib/ws-framed-session.ts: the CLI's
// WebSocket tunnel, the floor's framing, no mux): a plain Node session in devop's place, kept alive or new.
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import { readFileSync, readlinkSync } from 'node:fs';
import { loadavg } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { build } from 'esbuild';
import { banner, common } from '../scripts/build-options.mjs';
import { PodNet, type Proc } from '../testkit/netns.js';
import { connectSession, startLocalCommand } from '../testkit/session-client.js';
import { AGENT_NODE_FLAGS } from '../shared/agent-contract.js';
import { agentNode } from './lib/agent-node.js';
import { cpuMs } from './lib/proc-cpu.js';
import { exeOf, processTree } from './lib/proc-tree.js';
import { teardownOnInterrupt } from './lib/interrupt.js';
import { waitFor } from '../testkit/wait.js';

const execFileAsync = promisify(execFile);
/** Requests per second in all, interleaved over the paths (one request every 3.3 ms: each takes ~1 ms or less). */
const RATE_PER_S = Number(process.env.BENCH_RATE ?? 300);
/**
 * One cycle of the load: the two paths whose p99 is taken come five times each, the others once. With 2 000 cycles that
 * is 10 000 samples each for direct and stolen (p99 from ≥ 10 000) and 2 000 for the rest, in ~115 s.
 */
const PATTERN = [
  'direct',
  'stolen',
  'floor',
  'direct',
  'stolen',
  'mirrored',
  'direct',
  'stolen',
  'direct-new',
  'direct',
  'stolen',
  'stolen-new',
  'direct',
  'stolen',
  'floor-new',
  'in-node',
  'in-node-new',
] as const;
/**
 * Paths timed only when BENCH_PATTERN names them. node-floor (-new: a new connection per request): the floor with its
 * session side in Node; timed beside the others, its Node processes moved every path's figures (the stolen path's
 * added p50 0.53 → 0.70–0.72 ms, the floor's 0.44 → 0.47–0.49, in the same hour), so it stays out of the RESULT run.
 */
const ON_REQUEST = ['node-floor', 'node-floor-new'] as const;
const CYCLES = Number(process.env.BENCH_CYCLES ?? 2000);
const WARMUP_CYCLES = 40;
const HELD_CONNECTIONS = 1000;
/** Each held connection asks and gets an answer this often (500 requests per second over all of them). */
const HELD_PERIOD_MS = 2000;
/** How long the agent's RSS is sampled while the held connections carry data. */
const HELD_MEASURE_MS = 6000;
/** BENCH_CPU_PROF=<dir>: V8 CPU profiles of the agent, the session and the relays, written there at the end. */
const CPU_PROF = process.env.BENCH_CPU_PROF;
const PROF_FLAGS = CPU_PROF ? ['--cpu-prof', '--cpu-prof-interval=100', `--cpu-prof-dir=${CPU_PROF}`] : [];

type Path = (typeof PATTERN)[number] | (typeof ON_REQUEST)[number];
/**
 * The pod's app listens on all five ports (the agent redirects stolen, held and inNode before the app sees them):
 * stolen and held by a session on the native path, inNode by a session without it (the agent splices it in Node).
 */
const APP = { direct: 3001, stolen: 3000, mirrored: 3002, held: 3004, inNode: 3005 };
/** The floor's agent side listens on FLOOR for clients, on FLOOR_TUNNEL for its tunnel; each path has its own relay. */
const FLOOR = 3006;
const FLOOR_TUNNEL = 3007;
const RELAY_STOLEN = 3008;
const RELAY_FLOOR = 3009;
/** The relay of the session without the native path. */
const RELAY_IN_NODE = 3012;
/** The floor's path with its session side in Node (bench/lib/ws-framed-session.ts): its own C agent side and relay. */
const NODE_FLOOR = 3013;
const NODE_FLOOR_TUNNEL = 3014;
const RELAY_NODE_FLOOR = 3015;
const PORTS: Record<Path, number> = {
  direct: APP.direct,
  'direct-new': APP.direct,
  stolen: APP.stolen,
  'stolen-new': APP.stolen,
  floor: FLOOR,
  'floor-new': FLOOR,
  'in-node': APP.inNode,
  'in-node-new': APP.inNode,
  mirrored: APP.mirrored,
  'node-floor': NODE_FLOOR,
  'node-floor-new': NODE_FLOOR,
};
const FRESH: Path[] = ['direct-new', 'stolen-new', 'floor-new', 'in-node-new', 'node-floor-new'];
/**
 * BENCH_PATTERN=<path>,<path>…: only these paths, in this order (e.g. `stolen-new,direct-new` for the CPU a new
 * connection costs each process); prints their latencies and CPU, not the RESULT line.
 */
const PATTERN_USED = (process.env.BENCH_PATTERN?.split(',') ?? [...PATTERN]) as Path[];
const ALL_PATHS: readonly Path[] = [...new Set(PATTERN), ...ON_REQUEST];
const unknownPath = PATTERN_USED.find((p) => !ALL_PATHS.includes(p));
if (unknownPath) throw new Error(`BENCH_PATTERN: no path ${unknownPath} (paths: ${ALL_PATHS.join(', ')})`);

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

const load = (): string =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

/** VmRSS and RssAnon (MiB) summed over the process tree, and what each process is. */
function treeRss(root: number): { rss: number; anon: number; procs: string[] } {
  let rss = 0;
  let anon = 0;
  const procs: string[] = [];
  for (const pid of processTree(root)) {
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      const field = (name: string): number =>
        Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) / 1024;
      rss += field('VmRSS');
      anon += field('RssAnon');
      // Named by the program, not the main thread's name (Node 24 calls it MainThread).
      procs.push(`${basename(readlinkSync(`/proc/${pid}/exe`))} ${field('VmRSS').toFixed(1)}`);
    } catch {
      // the process ended while it was read
    }
  }
  return { rss, anon, procs };
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
  const what = `${cmd.find((a) => a.endsWith('.mjs')) ?? cmd[0]} to be ready`;
  await waitFor(what, () => proc.lines.some((l) => l.startsWith(ready)) || child.exitCode !== null, 60_000);
  if (child.exitCode !== null) throw new Error(`${cmd.join(' ')} exited (code ${child.exitCode})`);
  return proc;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('bench:steal needs root (network namespaces, iptables)');
  execFileSync(process.execPath, ['scripts/build.mjs'], { stdio: 'inherit' });
  const net = new PodNet();
  const children: ChildProcess[] = [];
  const teardown = teardownOnInterrupt(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
    if (CPU_PROF) {
      // A profile is written when its process exits on its own (SIGTERM), not when teardown kills it.
      const exited = (): boolean => children.every((c) => c.exitCode !== null || c.signalCode !== null);
      await waitFor('the profiled processes to exit', exited, 20_000).catch(() => undefined);
    }
    await net.teardown();
  });
  try {
    await net.setup();
    console.log(`load before: ${load()}`);
    // Bundled and run with plain node, as the devop command runs (dist/cli.js), not through a TypeScript loader.
    const helpers = ['session-proc', 'portforward-relay', 'ws-framed-session'];
    const entryPoints = helpers.map((h) => resolve(import.meta.dirname, `lib/${h}.ts`));
    await build({ ...common, banner, entryPoints, outdir: net.dir, outExtension: { '.js': '.mjs' } });
    const floorBinary = join(net.dir, 'ws-framed-pair');
    const floorSource = resolve(import.meta.dirname, 'lib/ws-framed-pair.c');
    execFileSync('cc', ['-O2', '-o', floorBinary, floorSource], { stdio: 'inherit' });

    await net.startPod({ port: Object.values(APP).join(','), env: { POD_QUIET: '1' } });
    // The bundles live outside the checkout: NODE_PATH lets the session's ws (and the relays') load bufferutil from its
    // node_modules, as the installed CLI loads its own (bench/tunnel.ts does the same).
    process.env.NODE_PATH = resolve(import.meta.dirname, '../node_modules');
    const inPod = (cmd: string[], ready: string): Promise<Proc> => startIn(children, net.podNs, cmd, ready);
    const node = (bundle: string, ...args: string[]): string[] => [
      process.execPath,
      ...PROF_FLAGS,
      join(net.dir, bundle),
      ...args,
    ];
    const relay = (port: number): Promise<Proc> => inPod(node('portforward-relay.mjs', String(port)), 'LISTENING');
    const relays = {
      stolen: await relay(RELAY_STOLEN),
      floor: await relay(RELAY_FLOOR),
      inNode: await relay(RELAY_IN_NODE),
    };
    const floorAgent = await inPod([floorBinary, 'agent', String(FLOOR), String(FLOOR_TUNNEL)], 'LISTENING');
    const floorSessionArgs = [String(RELAY_FLOOR), String(FLOOR_TUNNEL), String(APP.direct)];
    const floorSession = await inPod([floorBinary, 'session', ...floorSessionArgs], 'READY');
    const nodeFloor = PATTERN_USED.some((p) => p.startsWith('node-floor'))
      ? {
          agent: await inPod([floorBinary, 'agent', String(NODE_FLOOR), String(NODE_FLOOR_TUNNEL)], 'LISTENING'),
          relay: await relay(RELAY_NODE_FLOOR),
          session: await inPod(
            node('ws-framed-session.mjs', String(RELAY_NODE_FLOOR), String(NODE_FLOOR_TUNNEL), String(APP.direct)),
            'READY',
          ),
        }
      : undefined;

    // The agent as the image runs it: on the image's node (the machine's may be another major), through agent/entry.sh,
    // which finds the target and execs the agent in the pod netns (one process). Node refuses --cpu-prof in
    // NODE_OPTIONS: a profiled agent runs as job mode does outside the image (an outer process re-runs it in the netns
    // with the same flags), started with AGENT_NODE_FLAGS and the profile's.
    const onNode = await agentNode(net.dir);
    process.env.DEVOP_TEST_AGENT_NODE = onNode.path;
    console.log(`agent: node ${onNode.version} from ${onNode.from}`);
    if (CPU_PROF) process.env.DEVOP_TEST_AGENT_FLAGS = [...AGENT_NODE_FLAGS, ...PROF_FLAGS].join(' ');
    const agentEnv = { DEVOP_AGENT_LOG_LEVEL: 'info', DEVOP_AGENT_NATIVE_PORT: '0' };
    const agentProc = await net.startAgent(agentEnv, { viaEntryPoint: !CPU_PROF });
    children.push(agentProc.child);
    if (!agentProc.nativePort) throw new Error('the agent did not start its native data path (devop-splice)');
    const splice = processTree(agentProc.innerPid).find((pid) => exeOf(pid).endsWith('splice'));
    if (splice === undefined) throw new Error('devop-splice is not among the agent processes');
    // As the CLI does: the agent's port and its native data path's, through one port-forward.
    const tunnelPorts = `${agentProc.port}:${agentProc.nativePort}`;
    const sessionArgs = [String(RELAY_STOLEN), tunnelPorts, `${APP.stolen},${APP.held}`, String(APP.direct)];
    const stealer = await inPod(node('session-proc.mjs', ...sessionArgs), 'READY');
    // The same agent without its native path: a session that does not join it.
    const inNodeArgs = [String(RELAY_IN_NODE), String(agentProc.port), String(APP.inNode), String(APP.direct)];
    const inNodeSession = await inPod(node('session-proc.mjs', ...inNodeArgs), 'READY');
    // The bench's own session (through a unix-socket relay, as the agent suites connect) mirrors a port, counts copies.
    const control = await net.relay(net.podNs, '127.0.0.1', agentProc.port);
    const local = await startLocalCommand('local');
    const session = await connectSession(control, { local });
    const mirrored = await session.subscribe(APP.mirrored, 'mirror');
    if (mirrored.type !== 'subscribed') throw new Error(`subscribe ${APP.mirrored}: ${JSON.stringify(mirrored)}`);

    // The clients run in a process of their own in the client netns; asynchronously, as this process serves a session.
    const plan = {
      host: net.podIP,
      ports: PORTS,
      fresh: FRESH,
      pattern: PATTERN_USED,
      cycles: CYCLES,
      warmupCycles: WARMUP_CYCLES,
      ratePerS: RATE_PER_S,
    };
    const loadScript = resolve(import.meta.dirname, 'lib/steal-load.mjs');
    // Where the time goes: CPU used per request by each process on the stolen and the floor path during the run.
    const measured = {
      'devop-splice': splice,
      relay: relays.stolen.pid,
      session: stealer.pid,
      'floor agent': floorAgent.pid,
      'floor relay': relays.floor.pid,
      'floor session': floorSession.pid,
      'in-node agent': agentProc.innerPid,
      'in-node relay': relays.inNode.pid,
      'in-node session': inNodeSession.pid,
      ...(nodeFloor && {
        'node-floor agent': nodeFloor.agent.pid,
        'node-floor relay': nodeFloor.relay.pid,
        'node-floor session': nodeFloor.session.pid,
      }),
    };
    const cpuBefore = Object.fromEntries(Object.entries(measured).map(([name, pid]) => [name, cpuMs(pid)]));
    const started = Date.now();
    const loadArgs = [`--net=/run/netns/${net.clientNs}`, process.execPath, loadScript, JSON.stringify(plan)];
    const { stdout: out } = await execFileAsync('nsenter', loadArgs, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    const took = ((Date.now() - started) / 1000).toFixed(0);
    console.log(`latency run: ${took} s at ${RATE_PER_S} requests/s; load after it: ${load()}`);
    const perPath = (p: string): number =>
      (WARMUP_CYCLES + CYCLES) * PATTERN_USED.filter((q) => q.startsWith(p)).length;
    const pathOf = (name: string): string =>
      ['floor', 'in-node', 'node-floor'].find((path) => name.startsWith(path)) ?? 'stolen';
    const cpu = Object.entries(measured).flatMap(([name, pid]) => {
      const [before, now] = [cpuBefore[name], cpuMs(pid)];
      const requests = perPath(pathOf(name));
      if (requests === 0) return [];
      const us = (ms: number): string => ((ms * 1000) / requests).toFixed(0);
      return [`${name} ${us(now.user - before.user)}+${us(now.sys - before.sys)}`];
    });
    console.log(
      'CPU per request on its path, user+system µs (stolen: 5 kept-alive to 1 new, floor and in-node 1 to 1; the ' +
        "agent's, counted against in-node, also holds the stolen path's control and reads the mirror's capture): " +
        cpu.join(', '),
    );
    const samples = JSON.parse(out.trim().split('\n').pop() ?? '{}') as Record<Path, number[]>;
    const paths = (Object.keys(PORTS) as Path[]).filter((p) => PATTERN_USED.includes(p));
    const stats = Object.fromEntries(
      paths.map((p) => {
        const sorted = [...samples[p]].sort((a, b) => a - b);
        return [p, { p50: percentile(sorted, 50), p99: percentile(sorted, 99), n: sorted.length }];
      }),
    ) as Record<Path, { p50: number; p99: number; n: number }>;
    for (const p of paths) {
      console.log(`${p.padEnd(10)} n=${stats[p].n} p50=${stats[p].p50.toFixed(3)}ms p99=${stats[p].p99.toFixed(3)}ms`);
    }
    const added = (p: Path, base: Path, q: 'p50' | 'p99' = 'p50'): number => stats[p][q] - stats[base][q];
    if (process.env.BENCH_PATTERN) {
      const over = paths
        .filter((p) => !p.startsWith('direct') && stats[p.endsWith('-new') ? 'direct-new' : 'direct'])
        .map((p) => `${p} ${added(p, p.endsWith('-new') ? 'direct-new' : 'direct').toFixed(3)} ms`);
      console.log(`p50 added over the direct path: ${over.join(', ') || 'no direct path to compare with'}`);
      session.mux.close('bench over');
      await local.close();
      return;
    }
    const floorAdded = added('floor', 'direct');
    console.log(
      `p50 added over the direct path: devop's stolen path ${added('stolen', 'direct').toFixed(3)} ms, the C floor ` +
        `${floorAdded.toFixed(3)} ms (both through a port-forward WebSocket relay); a new connection per request: ` +
        'stolen ' +
        `${added('stolen-new', 'direct-new').toFixed(3)} ms, floor ${added('floor-new', 'direct-new').toFixed(3)} ms`,
    );
    const inNodeAdded = added('in-node', 'direct');
    console.log(
      `the same agent splicing in Node (a session without the native path): p50 added ${inNodeAdded.toFixed(3)} ms ` +
        `(${(inNodeAdded / floorAdded).toFixed(2)}× the floor's), a new connection per request ` +
        `${added('in-node-new', 'direct-new').toFixed(3)} ms`,
    );

    // Proof that the copies are complete: the requests found in the mirror copies against those sent on the mirrored
    // path. Capture hands copies over in blocks, up to a second late: wait for them before counting.
    const copies = (): Buffer[] =>
      session.incoming.filter((i) => i.open.mode === 'mirror').map((i) => Buffer.concat(i.data));
    const mirroredRequests = (): number =>
      copies().reduce((n, b) => n + b.toString().split('GET /mirrored/').length - 1, 0);
    const sentMirrored = (WARMUP_CYCLES + CYCLES) * PATTERN.filter((p) => p === 'mirrored').length;
    await waitFor('the mirror copies', () => mirroredRequests() >= sentMirrored, 10_000).catch(() => undefined);
    const dropped = session.messages.filter((m) => m.type === 'log' && /copy of connection .* dropped/.test(m.message));
    console.log(
      `mirror copies: ${mirroredRequests()} of ${sentMirrored} requests sent on the mirrored path, in ` +
        `${copies().length} connection(s); ${dropped.length} connection copies dropped`,
    );

    // RSS of the agent's processes with 1 000 stolen connections that carry data (through the tunnel to the session).
    if (agentProc.innerPid !== agentProc.pid && !CPU_PROF) {
      throw new Error(`the entry point left ${agentProc.pid} beside the agent ${agentProc.innerPid}`);
    }
    const idle = treeRss(agentProc.innerPid);
    const heldArgs = [net.podIP, String(APP.held), String(HELD_CONNECTIONS), String(HELD_PERIOD_MS)];
    const heldScript = resolve(import.meta.dirname, 'lib/held-connections.mjs');
    const held = await startIn(children, net.clientNs, [process.execPath, heldScript, ...heldArgs], 'READY');
    const streams = (): number =>
      Number(
        stealer.lines
          .filter((l) => l.startsWith('STREAMS '))
          .pop()
          ?.split(' ')[1] ?? 0,
      );
    await waitFor(`${HELD_CONNECTIONS} stolen connections at the session`, () => streams() >= HELD_CONNECTIONS, 30_000);
    const answers = (): number[] => {
      const last = held.lines.filter((l) => l.startsWith('ANSWERS ')).pop();
      const m = /^ANSWERS (\d+) CLOSED (\d+)$/.exec(last ?? 'ANSWERS 0 CLOSED 0');
      return [Number(m?.[1]), Number(m?.[2])];
    };
    const [answersBefore] = answers();
    let peak = idle;
    for (const end = Date.now() + HELD_MEASURE_MS; Date.now() < end; await new Promise((r) => setTimeout(r, 500))) {
      const now = treeRss(agentProc.innerPid);
      if (now.rss > peak.rss) peak = now;
    }
    const [answersAfter, closed] = answers();
    if (closed > 0) throw new Error(`${closed} of the held connections closed during the measurement`);
    console.log(
      `agent RSS (VmRSS summed over its processes: ${peak.procs.join(', ')}): ${idle.rss.toFixed(1)} MiB after the ` +
        `latency run, at most ${peak.rss.toFixed(1)} MiB over ${HELD_MEASURE_MS / 1000} s with ${streams()} stolen ` +
        `connections open, ${answersAfter - answersBefore} answers in that time (anonymous ${peak.anon.toFixed(1)} ` +
        'MiB, the rest file-backed pages of the binaries, shared with every process that maps them)',
    );
    held.child.kill('SIGTERM');
    session.mux.close('bench over');
    await local.close();
    const r = {
      added50: added('stolen', 'direct'),
      added99: added('stolen', 'direct', 'p99'),
      fresh: added('stolen-new', 'direct-new'),
      mirror: stats.mirrored.p50 / stats.direct.p50 - 1,
    };
    console.log(`load at the end: ${load()}`);
    console.log(
      `RESULT steal added_p50_ms=${r.added50.toFixed(3)} p50_vs_floor=${(r.added50 / floorAdded).toFixed(2)} ` +
        `added_p99_ms=${r.added99.toFixed(3)} newconn_added_p50_ms=${r.fresh.toFixed(3)} ` +
        `mirror_overhead_p50=${r.mirror.toFixed(3)} agent_rss_mib_1000=${peak.rss.toFixed(1)}`,
    );
  } finally {
    await teardown();
  }
}

// Exits once done: the bench's own session and servers hold handles that teardown does not close.
main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
