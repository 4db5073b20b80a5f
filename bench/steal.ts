// Benchmark of the agent's data path, side by side in one run (root, real netns): per-request latency through a stolen
// port vs. straight to the pod's app, the pod's latency with and without mirroring, and agent RSS with 1000 stolen
// connections. Last line: RESULT steal added_p50_ms=… added_p99_ms=… mirror_overhead_p50=… agent_rss_mib_1000=…
//
// The stolen path is devop's own: client → agent (pod netns) → session (a process of its own, as the CLI is) → the local
// command, which is the pod's app itself on 127.0.0.1 — so both paths end at the same server and differ only by devop.
// The session reaches the agent over loopback: the tunnel's own transport (a port-forward in a cluster) is not devop's
// and is left out. Two references run in the same load: two plain TCP relays in the way (`two-hops`), and the floor of
// any two-process tunnel, a framed relay pair with nothing else in it (`floor`, bench/lib/framed-relay.mjs).
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join, resolve } from 'node:path';
import { build } from 'esbuild';
import { banner, common } from '../scripts/build-options.mjs';
import { PodNet, waitFor } from '../test/agent/netns.js';
import { connectSession, startLocalCommand } from '../test/agent/session-client.js';

/** The design's load: 200 requests per second in all, interleaved over the compared paths so all see the same machine. */
const RATE_PER_S = 200;
const REQUESTS_PER_PATH = Number(process.env.BENCH_REQUESTS ?? 1000);
const WARMUP_PER_PATH = 100;
const execFileAsync = promisify(execFile);
const OPEN_CONNECTIONS = 1000;

type Path = 'direct' | 'stolen' | 'mirrored' | 'two-hops' | 'floor';
/**
 * Ports of the pod's app, and the references in the pod netns, each with two processes in the way as the stolen path
 * has: `two-hops` (plain relays 3005 → 3003 → 3001) and `floor` (framed pair 3006 → 3007 → 3001). Each process serves
 * one path only, as the agent and the session do: a process woken more often runs faster on this kind of machine.
 */
const PORTS: Record<Path, number> = { direct: 3001, stolen: 3000, mirrored: 3002, 'two-hops': 3005, floor: 3006 };
const FLOOR_EXIT_PORT = 3007;
const RELAY_PORT = 3003;
/** Stolen by the bench's own session (through a relay, as the suites connect) for the RSS count only. */
const RSS_PORT = 3004;
const APP_PORTS = [PORTS.direct, PORTS.stolen, PORTS.mirrored, RSS_PORT];

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function rssMiB(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  return Number(kb) / 1024;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('bench:steal needs root (network namespaces, iptables)');
  execFileSync(process.execPath, ['scripts/build.mjs'], { stdio: 'inherit' });
  const net = new PodNet();
  const sockets: Socket[] = [];
  const children: ChildProcess[] = [];
  try {
    await net.setup();
    await net.startPod({ port: APP_PORTS.join(','), env: { POD_QUIET: '1' } });
    await net.relay(net.podNs, '127.0.0.1', PORTS.direct, RELAY_PORT);
    await net.relay(net.podNs, '127.0.0.1', RELAY_PORT, PORTS['two-hops']);
    const framedRelay = resolve(import.meta.dirname, 'lib/framed-relay.mjs');
    await net.runListener(net.podNs, framedRelay, ['exit', String(FLOOR_EXIT_PORT), String(PORTS.direct)]);
    await net.runListener(net.podNs, framedRelay, ['entry', String(PORTS.floor), String(FLOOR_EXIT_PORT)]);
    const agentProc = await net.startAgent({ DEVOP_AGENT_LOG_LEVEL: 'info' });
    const control = await net.relay(net.podNs, '127.0.0.1', agentProc.port);
    // The stealing session: bench/lib/session-proc.ts inside the pod netns, handing stolen connections to the pod's app.
    // Bundled and run with plain node, as the devop command runs (dist/cli.js), not through a TypeScript loader.
    const sessionBundle = join(net.dir, 'session-proc.mjs');
    await build({ ...common, banner, entryPoints: [resolve(import.meta.dirname, 'lib/session-proc.ts')], outfile: sessionBundle });
    const stealer = spawn('nsenter', [`--net=/run/netns/${net.podNs}`, process.execPath, sessionBundle, String(agentProc.port), String(PORTS.stolen), String(PORTS.direct)], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(stealer);
    let stealerOut = '';
    stealer.stdout.on('data', (c: Buffer) => (stealerOut += c.toString()));
    await waitFor(() => stealerOut.includes('READY'), 'the stealing session', 30_000);
    const local = await startLocalCommand('local');
    const session = await connectSession(control, { local });
    for (const [port, mode] of [[PORTS.mirrored, 'mirror'], [RSS_PORT, 'steal']] as const) {
      const res = await session.subscribe(port, mode);
      if (res.type !== 'subscribed') throw new Error(`subscribe ${port}: ${JSON.stringify(res)}`);
    }
    // The clients run in a process of their own in the client netns (test/agent/fixtures/load-client.mjs).
    const plan = { host: net.podIP, paths: PORTS, ratePerS: RATE_PER_S, perPath: REQUESTS_PER_PATH, warmupPerPath: WARMUP_PER_PATH };
    // Asynchronously: the session and the local command in this process must keep serving while the load runs.
    const { stdout: load } = await execFileAsync('nsenter', [`--net=/run/netns/${net.clientNs}`, process.execPath, resolve(import.meta.dirname, '../test/agent/fixtures/load-client.mjs'), JSON.stringify(plan)], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    const samples = JSON.parse(load.trim().split('\n').pop() ?? '{}') as Record<Path, number[]>;
    const order = Object.keys(PORTS) as Path[];
    const stats = Object.fromEntries(order.map((p) => {
      const sorted = [...samples[p]].sort((a, b) => a - b);
      return [p, { p50: percentile(sorted, 50), p99: percentile(sorted, 99), n: sorted.length }];
    })) as Record<Path, { p50: number; p99: number; n: number }>;
    for (const p of order) console.log(`${p.padEnd(9)} n=${stats[p].n} p50=${stats[p].p50.toFixed(3)}ms p99=${stats[p].p99.toFixed(3)}ms`);
    const relays = stats['two-hops'].p50 - stats.direct.p50;
    const floor = stats.floor.p50 - stats.direct.p50;
    const added = stats.stolen.p50 - stats.direct.p50;
    console.log(`on this machine now, p50 added by two plain relays: ${relays.toFixed(3)} ms; by the bare framed pair (the floor of a two-process tunnel): ${floor.toFixed(3)} ms; by devop's stolen path (agent + session): ${added.toFixed(3)} ms = ${(added / floor).toFixed(2)}× the floor, ${(added / relays).toFixed(2)}× two relays; a port-forward in the tunnel would add its own`);
    // Proof that the copies are complete: the requests found in the mirror copies against those sent on the mirrored path.
    // Capture hands copies over in blocks, up to a second late: wait for them before counting.
    const copies = (): Buffer[] => session.incoming.filter((i) => i.open.mode === 'mirror').map((i) => Buffer.concat(i.data));
    const mirroredRequests = (): number => copies().reduce((n, b) => n + b.toString().split('GET /mirrored/').length - 1, 0);
    const sentMirrored = REQUESTS_PER_PATH + WARMUP_PER_PATH;
    await waitFor(() => mirroredRequests() >= sentMirrored, 'the mirror copies', 10_000).catch(() => undefined);
    const dropped = session.messages.filter((m) => m.type === 'log' && /copy of connection .* dropped/.test(m.message)).length;
    console.log(`mirror copies: ${mirroredRequests()} of ${sentMirrored} requests sent on the mirrored path, in ${copies().length} connection(s); ${dropped} connection copies dropped`);

    // RSS with 1000 open stolen connections (each one: a client socket in the agent + one mux stream).
    const stolenRelay = await net.relay(net.clientNs, net.podIP, RSS_PORT);
    const before = rssMiB(agentProc.innerPid);
    const opened = session.incoming.length;
    for (let i = 0; i < OPEN_CONNECTIONS; i++) {
      const s = connect(stolenRelay);
      s.on('error', () => undefined);
      s.resume();
      sockets.push(s);
      if (i % 100 === 99) await waitFor(() => session.incoming.length >= opened + i + 1, 'stolen connections to reach the session', 60_000);
    }
    await waitFor(() => session.incoming.length >= opened + OPEN_CONNECTIONS, 'all stolen connections to reach the session', 60_000);
    const rss = rssMiB(agentProc.innerPid);
    // RSS counts the pages of the node binary the agent touched (file-backed, shared with every node process on the host);
    // the agent's own memory is the anonymous part.
    const anon = Number(/^Anonymous:\s+(\d+) kB/m.exec(readFileSync(`/proc/${agentProc.innerPid}/smaps_rollup`, 'utf8'))?.[1]) / 1024;
    console.log(`agent RSS: ${before.toFixed(1)} MiB idle after the latency run, ${rss.toFixed(1)} MiB with ${OPEN_CONNECTIONS} open stolen connections (anonymous ${anon.toFixed(1)} MiB, the rest file-backed node binary pages)`);
    session.mux.close('bench over');
    await local.close();
    const added50 = stats.stolen.p50 - stats.direct.p50;
    const added99 = stats.stolen.p99 - stats.direct.p99;
    const mirror = stats.mirrored.p50 / stats.direct.p50 - 1;
    console.log(`RESULT steal added_p50_ms=${added50.toFixed(3)} added_p99_ms=${added99.toFixed(3)} mirror_overhead_p50=${mirror.toFixed(3)} agent_rss_mib_1000=${rss.toFixed(1)}`);
  } finally {
    for (const s of sockets) s.destroy();
    for (const c of children) c.kill('SIGTERM');
    await net.teardown();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
