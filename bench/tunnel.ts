// Tunnel benchmark: throughput of devop's tunnel in its real shape — a CLI-side process (local listener → mux client,
// as `devop port-forward` does, bundled as shipped) and the agent side that serves its outgoing connections to
// addresses (devop-splice, the agent's native data path, built as the image builds it: scripts/build.mjs), joined by
// loopback TCP — against raw TCP and OpenSSH `ssh -L`
// (with the faster of the ciphers measured here), with 64 parallel connections, and with one connection over a path of
// 20 ms RTT (root: bench/lib/tun-path.ts, packets delayed between this host and a network namespace, so that TCP waits
// for its ACKs as it does to a cluster) against raw TCP over the same path: the agent side and the sink beyond it.
// Every path ends at the same sink process; the variants run side by side in one run (interleaved rounds, medians of
// per-round ratios). References that are not in the RESULT line, each with one and with 64 connections: the same CLI
// side with the agent's Node side instead (bench/lib/tunnel-agent.ts: serveOutgoing, on the agent image's node with the
// agent's flags; what serves names, and what served everything before devop-splice), two plain Node
// processes relaying with socket.pipe() and no framing (bench/lib/node-pipe-relay.ts: the most a two-process relay in
// Node moves here), and the same two-process shape as a framed relay pair written in C (bench/lib/framed-relay.c, built
// with cc), copying every byte through user space and, in its splice mode, moving payload with splice(2) (zero-copy:
// what framing in two processes costs without Node, and without copies). And the 20 ms line as it was measured before
// the packet path: a relay that holds bytes (bench/lib/delay-line.ts), at which TCP ends, so raw TCP never waits a
// round trip there and only devop's window does. And the tunnel a cluster gives, one connection: the CLI side over its
// pods/portforward WebSocket (client-node's ws) through the stand-in's port-forward relay
// (bench/lib/portforward-relay.ts, one Node process) to devop-splice, with bufferutil masking what the CLI sends (as
// the installed CLI does) and with ws's JavaScript masking (WS_NO_BUFFER_UTIL); over HTTPS both ways; and over HTTPS
// with the relay (the API server) across the 20 ms path, as a user has it, against raw TCP over that path.
// Last line: RESULT tunnel relay_vs_raw=… relay_vs_ssh=… multi_vs_raw=… rtt20_vs_raw=…
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { build } from 'esbuild';
import { banner, common } from '../scripts/build-options.mjs';
import { AGENT_NODE_FLAGS } from '../shared/agent-contract.js';
import { makeCerts } from '../standin/certs.js';
import { agentNode } from './lib/agent-node.js';
import { cpuMs, machineCpuMs } from './lib/proc-cpu.js';
import { teardownOnInterrupt } from './lib/interrupt.js';
import { startTunPath, type TunPath } from './lib/tun-path.js';
import { startSshForward, type SshForward } from './lib/ssh.js';

const MiB = 1024 * 1024;
/** Bytes per loopback measurement (env DEVOP_BENCH_MIB): setup is noise at this size, and a busy box still copes. */
const TOTAL = Number(process.env.DEVOP_BENCH_MIB ?? 128) * MiB;
/** Bytes per measurement over the 20 ms path (env DEVOP_BENCH_RTT_MIB): many RTTs even at loopback speed. */
const RTT_TOTAL = Number(process.env.DEVOP_BENCH_RTT_MIB ?? 64) * MiB;
/** Interleaved rounds; ratios are medians over rounds, so one noisy neighbour (the box is shared) does not decide. */
const ROUNDS = Number(process.env.DEVOP_BENCH_ROUNDS ?? 5);
/** One untimed transfer per variant first, so that JIT and the processes' start-up are not measured. */
const WARMUP = 16 * MiB;
const PARALLEL = 64;
/** Each way of the delay line: 10 ms, a 20 ms round trip (a cluster in the same region). */
const DELAY_MS = 10;
/** Size of each write() by the sender, the same for every variant. */
const WRITE_SIZE = 128 * 1024;
/** One transfer that takes longer than this has hung (a bug, not a slow machine). */
const TRANSFER_DEADLINE_MS = 180_000;
const SSH_CIPHERS = ['aes128-gcm@openssh.com', 'chacha20-poly1305@openssh.com'];

/** The C pair's pipe size in splice mode (its largest frame), env DEVOP_BENCH_SPLICE_PIPE; else framed-relay.c's. */
const SPLICE_PIPE = process.env.DEVOP_BENCH_SPLICE_PIPE;

type Variant =
  | 'raw'
  | 'relay'
  | 'ssh'
  | 'raw64'
  | 'multi'
  | 'rawRtt'
  | 'rawRttNew'
  | 'relayRtt'
  | 'rawSplit'
  | 'relaySplit'
  | 'relayWs'
  | 'relayWsJs'
  | 'rawDown'
  | 'relayWsDown'
  | 'relayWss'
  | 'relayWssDown'
  | 'relayWssRtt'
  | Reference
  | `${Reference}64`;
/** Relay pairs timed as references, next to devop's pair, not in the RESULT line. */
type Reference = 'inNode' | 'nodePipe' | 'cPair' | 'cSplice';

/** Writes `total` bytes with backpressure, half-closes, and resolves when the receiver's one-byte answer arrived. */
function transfer(sock: net.Socket, total: number, chunk: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    sock.on('error', reject);
    sock.on('data', () => undefined);
    sock.on('end', () => resolve());
    writeAll(sock, total, chunk, () => sock.end());
  });
}

/** Writes `total` bytes of `chunk` repeated, waiting for 'drain' when the socket asks to, then calls `then`. */
function writeAll(sock: net.Socket, total: number, chunk: Buffer, then?: () => void): void {
  let sent = 0;
  const go = (): void => {
    while (sent < total) {
      const n = Math.min(chunk.length, total - sent);
      sent += n;
      if (!sock.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
        sock.once('drain', go);
        return;
      }
    }
    then?.();
  };
  go();
}

/**
 * Bytes per second of `total` bytes sent on `sock`, a connection kept open to the sink's counted port (the length
 * first), until the sink's one-byte answer arrives.
 */
function measureWarm(sock: net.Socket, total: number, chunk: Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const timer = setTimeout(
      () => fail(new Error(`a warm transfer took over ${TRANSFER_DEADLINE_MS / 1000} s`)),
      TRANSFER_DEADLINE_MS,
    );
    const done = (): void => {
      cleanup();
      resolve(total / (Number(process.hrtime.bigint() - t0) / 1e9));
    };
    const fail = (err: Error): void => {
      cleanup();
      reject(err);
    };
    const cleanup = (): void => {
      clearTimeout(timer);
      sock.off('data', done);
      sock.off('error', fail);
    };
    sock.once('data', done);
    sock.once('error', fail);
    const length = Buffer.alloc(8);
    length.writeBigUInt64BE(BigInt(total));
    sock.write(length);
    writeAll(sock, total, chunk);
  });
}

/**
 * Bytes per second of a download of `total` bytes from the sink's source port through `port` (the connect is timed):
 * the length asked for, then everything read until the source ends.
 */
async function measureDown(port: number, total: number): Promise<number> {
  const t0 = process.hrtime.bigint();
  const sock = await connect(port, '127.0.0.1');
  try {
    const length = Buffer.alloc(8);
    length.writeBigUInt64BE(BigInt(total));
    let got = 0;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`a download took over ${TRANSFER_DEADLINE_MS / 1000} s (${got} of ${total} bytes)`)),
        TRANSFER_DEADLINE_MS,
      );
      sock.on('data', (chunk: Buffer) => {
        got += chunk.length;
      });
      sock.on('end', () => {
        clearTimeout(timer);
        if (got === total) resolve();
        else reject(new Error(`a download ended after ${got} of ${total} bytes`));
      });
      sock.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      sock.write(length);
    });
  } finally {
    sock.destroy();
  }
  return total / (Number(process.hrtime.bigint() - t0) / 1e9);
}

function connect(port: number, host: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ port, host, allowHalfOpen: true }, () => resolve(sock));
    sock.once('error', reject);
  });
}

/** Bytes per second of `total` bytes sent over `connections` parallel connections to `port` (connects are timed). */
async function measure(
  port: number,
  connections: number,
  total: number,
  chunk: Buffer,
  host = '127.0.0.1',
): Promise<number> {
  const per = Math.floor(total / connections);
  const t0 = process.hrtime.bigint();
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    const hung = (): void => reject(new Error(`a transfer to port ${port} took over ${TRANSFER_DEADLINE_MS / 1000} s`));
    timer = setTimeout(hung, TRANSFER_DEADLINE_MS);
  });
  const socks: net.Socket[] = [];
  try {
    await Promise.race([
      deadline,
      Promise.all(
        Array.from({ length: connections }, async () => {
          const sock = await connect(port, host);
          socks.push(sock);
          await transfer(sock, per, chunk);
        }),
      ),
    ]);
  } finally {
    clearTimeout(timer);
    for (const sock of socks) sock.destroy();
  }
  const dt = Number(process.hrtime.bigint() - t0) / 1e9;
  return (per * connections) / dt;
}

/**
 * Starts `node <bundle> args…` (or the executable itself) and resolves with the JSON object of its first line (after
 * a word, if it starts with one). `node`: the node command (this process's node otherwise); `env`: its environment.
 */
function startHelper<T>(
  children: ChildProcess[],
  bundle: string,
  args: string[],
  node: readonly string[] = [process.execPath],
  env: NodeJS.ProcessEnv = process.env,
): Promise<T & { pid: number }> {
  const [cmd, argv] = bundle.endsWith('.mjs') ? [node[0], [...node.slice(1), bundle, ...args]] : [bundle, args];
  const child = spawn(cmd, argv, { stdio: ['pipe', 'pipe', 'inherit'], env });
  children.push(child);
  return new Promise((resolve, reject) => {
    let buf = '';
    child.stdout.on('data', (d: Buffer) => {
      buf += d.toString();
      const nl = buf.indexOf('\n');
      if (nl >= 0) resolve({ ...(JSON.parse(buf.slice(buf.indexOf('{'), nl)) as T), pid: child.pid ?? -1 });
    });
    child.once('exit', (code) => reject(new Error(`${bundle} exited with ${code} before it was ready`)));
  });
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

const fmt = (bps: number): string => `${(bps / MiB).toFixed(1)} MiB/s`;
const load = (): string => execFileSync('uptime', { encoding: 'utf8' }).trim();

/** Times both ciphers on the same forward shape (alternating, 3 each) and keeps the faster; the other is stopped. */
async function fastestSsh(sinkPort: number, chunk: Buffer): Promise<{ forward: SshForward; cipher: string }> {
  const forwards = await Promise.all(SSH_CIPHERS.map((cipher) => startSshForward(sinkPort, cipher)));
  const speeds: number[][] = SSH_CIPHERS.map(() => []);
  for (let i = 0; i < 3; i++) {
    for (const [j, forward] of forwards.entries()) speeds[j].push(await measure(forward.localPort, 1, 64 * MiB, chunk));
  }
  const meds = speeds.map(median);
  const best = meds[0] >= meds[1] ? 0 : 1;
  console.log(`ssh ciphers: ${SSH_CIPHERS.map((c, j) => `${c} ${fmt(meds[j])}`).join(', ')} -> ${SSH_CIPHERS[best]}`);
  await forwards[1 - best].stop();
  return { forward: forwards[best], cipher: SSH_CIPHERS[best] };
}

/** The C reference pairs (entry → exit → sink), copying and splicing, or undefined (with a note) without cc. */
async function startCPairs(
  children: ChildProcess[],
  dir: string,
  sink: number,
): Promise<{ copying: number; splicing: number } | undefined> {
  const binary = join(dir, 'framed-relay');
  try {
    execFileSync('cc', ['-O2', '-o', binary, resolve(import.meta.dirname, 'lib/framed-relay.c')], { stdio: 'pipe' });
  } catch (err) {
    console.log(`no C reference pairs: cc failed (${(err as Error).message.split('\n')[0]})`);
    return undefined;
  }
  const pair = async (suffix: string, extra: string[]): Promise<number> => {
    const exit = (await startHelper<{ port: number }>(children, binary, [`exit${suffix}`, String(sink), ...extra]))
      .port;
    return (await startHelper<{ port: number }>(children, binary, [`entry${suffix}`, String(exit), ...extra])).port;
  };
  return { copying: await pair('', []), splicing: await pair('-splice', SPLICE_PIPE ? [SPLICE_PIPE] : []) };
}

/**
 * The sessions devop-splice lets join (the CLI sides' nativeJoin tokens): one per CLI process, as a join replaces the
 * session's earlier native connection.
 */
const SPLICE_TOKENS = {
  loopback: 'bench',
  delayed: 'bench-rtt',
  ws: 'bench-ws',
  wsJs: 'bench-ws-js',
  wsDown: 'bench-ws-down',
  wss: 'bench-wss',
  wssDown: 'bench-wss-down',
  wssRtt: 'bench-wss-rtt',
};

/**
 * devop-splice as the agent runs it (dist/, built as the image builds it: see main), with the sessions allowed; `exec`
 * runs it elsewhere (the far end of the 20 ms path). Resolves with its tunnel port.
 */
async function startSplice(children: ChildProcess[], exec: readonly string[] = []): Promise<number> {
  const binary = resolve(import.meta.dirname, '../dist/devop-splice');
  const [cmd, ...args] = [...exec, binary, '0'];
  const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  children.push(child);
  const lines: string[] = [];
  let buf = '';
  child.stdout.on('data', (d: Buffer) => {
    const parts = (buf + d.toString()).split('\n');
    buf = parts.pop() ?? '';
    lines.push(...parts);
  });
  const next = async (): Promise<string> => {
    for (let waited = 0; lines.length === 0; waited += 10) {
      if (child.exitCode !== null || waited > 10_000) throw new Error(`devop-splice did not answer: ${buf}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    return lines.shift() as string;
  };
  const ready = /^ready (\d+)$/.exec(await next());
  if (!ready) throw new Error('devop-splice did not say ready');
  for (const token of Object.values(SPLICE_TOKENS)) {
    child.stdin.write(`session ${token}\n`);
    const answer = await next();
    if (answer !== 'ok') throw new Error(`devop-splice refused the session: ${answer}`);
  }
  return Number(ready[1]);
}

/** Node's ceiling: two socket.pipe() relays in a row (entry → exit → sink). */
async function startNodePipePair(children: ChildProcess[], bundle: string, sink: number): Promise<number> {
  const exit = (await startHelper<{ port: number }>(children, bundle, [String(sink)])).port;
  return (await startHelper<{ port: number }>(children, bundle, [String(exit)])).port;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'devop-bench-tunnel-'));
  const children: ChildProcess[] = [];
  let ssh: SshForward | undefined;
  let path: TunPath | undefined;
  let warm: net.Socket | undefined;
  const teardown = teardownOnInterrupt(async () => {
    warm?.destroy();
    await ssh?.stop();
    await Promise.all(
      children.map((child) => {
        child.stdin?.end();
        child.kill();
        return child.exitCode === null && child.signalCode === null ? once(child, 'exit') : undefined;
      }),
    );
    await path?.close();
    rmSync(dir, { recursive: true, force: true });
  });
  try {
    // Bundled and run with plain node, as dist/cli.js and dist/agent.cjs run, not through a TypeScript loader.
    const helpers = ['sink', 'delay-line', 'tunnel-cli', 'tunnel-agent', 'node-pipe-relay', 'portforward-relay'];
    const entryPoints = helpers.map((h) => resolve(import.meta.dirname, `lib/${h}.ts`));
    await build({ ...common, banner, entryPoints, outdir: dir, outExtension: { '.js': '.mjs' } });
    const bundle = (name: string): string => join(dir, `${name}.mjs`);
    const sinks = await startHelper<{ port: number; source: number }>(children, bundle('sink'), []);
    const sink = sinks.port;
    // The agent side as the agent runs: on the agent image's node, with the agent's flags (lite mode: no optimizing
    // compiler; a small young generation), or DEVOP_TEST_AGENT_FLAGS (as the agent suites take them).
    const onNode = await agentNode(dir);
    const flags = process.env.DEVOP_TEST_AGENT_FLAGS?.split(' ').filter(Boolean) ?? AGENT_NODE_FLAGS;
    console.log(`agent side: node ${onNode.version} from ${onNode.from}, flags ${flags.join(' ') || '(none)'}`);
    const agentCmd = [onNode.path, ...flags];
    const inNodeAgent = (await startHelper<{ port: number }>(children, bundle('tunnel-agent'), [], agentCmd)).port;
    execFileSync(process.execPath, [resolve(import.meta.dirname, '../scripts/build.mjs')], { stdio: 'inherit' });
    const agent = await startSplice(children);
    // The 20 ms path: a sink and an agent side of their own at its far end, devop-splice's tunnel port reachable there
    // as a pod's is through its port-forward.
    path = await startTunPath(dir, DELAY_MS);
    const farNode = [...path.exec, process.execPath];
    const farSinks = await startHelper<{ port: number; counted: number }>(
      children,
      bundle('sink'),
      ['0.0.0.0'],
      farNode,
    );
    const farSink = farSinks.port;
    // Raw TCP's strongest case over the path: one connection kept for every transfer, its windows open (as devop's
    // tunnel's are); a new connection per transfer, slow start and all, is printed beside it.
    warm = await connect(farSinks.counted, path.far);
    const farAgent = await startSplice(children, path.exec);
    path.expose(farAgent);
    const lineArgs = [String(DELAY_MS), String(sink), String(agent)];
    const line = await startHelper<{ ports: [number, number] }>(children, bundle('delay-line'), lineArgs);
    const [sinkSplit, agentSplit] = line.ports;
    // The CLI-side process behind each of devop's local ports: its CPU per MiB moved is printed beside the results.
    const cliPid = new Map<number, number>();
    const cliSide = async (
      agentAt: string,
      target: number,
      token?: string,
      env: NodeJS.ProcessEnv = process.env,
    ): Promise<number> => {
      const args = [agentAt, String(target), ...(token ? [token] : [])];
      const { port, pid } = await startHelper<{ port: number }>(children, bundle('tunnel-cli'), args, undefined, env);
      cliPid.set(port, pid);
      return port;
    };
    const relay = await cliSide(String(agent), sink, SPLICE_TOKENS.loopback);
    const inNode = await cliSide(String(inNodeAgent), sink);
    // A CLI process whose tunnel crosses the 20 ms path to the far agent side, as a cluster's would; and one whose
    // tunnel to the near one crosses the byte-holding line.
    const relayDelayed = await cliSide(`${path.far}:${farAgent}`, farSink, SPLICE_TOKENS.delayed);
    const relaySplit = await cliSide(String(agentSplit), sink, SPLICE_TOKENS.delayed);
    // The tunnel a cluster gives: the CLI's pods/portforward WebSocket through the stand-in's port-forward (one Node
    // process where a cluster has the API server and kubelet) to devop-splice. The bundles here live outside the
    // checkout: NODE_PATH lets them load bufferutil from its node_modules, as the installed CLI loads its own (the
    // relay unmasks with it, as a real API server unmasks in Go); beside it, a CLI side on ws's JavaScript masking.
    const withModules = { ...process.env, NODE_PATH: resolve(import.meta.dirname, '../node_modules') };
    // What those bundles load, from where they run: without bufferutil both CLI sides mask in JavaScript.
    const probe = "try { process.stdout.write(String(require('bufferutil').mask)) } catch { process.stdout.write('') }";
    const mask = execFileSync(process.execPath, ['-e', probe], { cwd: dir, env: withModules, encoding: 'utf8' });
    console.log(
      `WebSocket line: bufferutil ${mask.includes('[native code]') ? 'native' : mask ? 'in JavaScript' : 'not found'}`,
    );
    const wsRelay = (
      await startHelper<{ port: number }>(children, bundle('portforward-relay'), ['0'], undefined, withModules)
    ).port;
    const relayWs = await cliSide(`ws:${wsRelay}:${agent}`, sink, SPLICE_TOKENS.ws, withModules);
    const jsMasking = { ...withModules, WS_NO_BUFFER_UTIL: '1' };
    const relayWsJs = await cliSide(`ws:${wsRelay}:${agent}`, sink, SPLICE_TOKENS.wsJs, jsMasking);
    // The other way: the pod's side sends (a download through `devop port-forward`, a stolen request on its way in).
    const relayWsDown = await cliSide(`ws:${wsRelay}:${agent}`, sinks.source, SPLICE_TOKENS.wsDown, withModules);
    // Both ways again over HTTPS, as every cluster's API server is: the relay with a certificate of a CA of the bench's
    // own (the stand-in's PKI), the CLI side verifying it as the CLI does.
    const certs = await makeCerts(dir, ['IP:127.0.0.1', `IP:${path.far}`]);
    const tlsArgs = ['0', join(dir, 'apiserver.crt'), join(dir, 'apiserver.key')];
    const wssRelay = (
      await startHelper<{ port: number }>(children, bundle('portforward-relay'), tlsArgs, undefined, withModules)
    ).port;
    const wss = `wss:${wssRelay}:${agent}:${certs.caPath}`;
    const relayWss = await cliSide(wss, sink, SPLICE_TOKENS.wss, withModules);
    const relayWssDown = await cliSide(wss, sinks.source, SPLICE_TOKENS.wssDown, withModules);
    // And as a user has it: the API server 20 ms away, its relay (and the agent side and sink) at the path's far end.
    const farRelay = (
      await startHelper<{ port: number }>(children, bundle('portforward-relay'), tlsArgs, farNode, withModules)
    ).port;
    path.expose(farRelay);
    const farWss = `wss:${path.far}/${farRelay}:${farAgent}:${certs.caPath}`;
    const relayWssRtt = await cliSide(farWss, farSink, SPLICE_TOKENS.wssRtt, withModules);
    const nodePipe = await startNodePipePair(children, bundle('node-pipe-relay'), sink);
    const cPairs = await startCPairs(children, dir, sink);
    const chunk = Buffer.alloc(WRITE_SIZE, 0x5a);
    console.log(`load before: ${load()}`);
    const fastest = await fastestSsh(sink, chunk);
    ssh = fastest.forward;
    const sshPort = ssh.localPort;
    const variants: Record<Variant, (total: number) => Promise<number>> = {
      raw: (total) => measure(sink, 1, total, chunk),
      relay: (total) => measure(relay, 1, total, chunk),
      ssh: (total) => measure(sshPort, 1, total, chunk),
      raw64: (total) => measure(sink, PARALLEL, total, chunk),
      multi: (total) => measure(relay, PARALLEL, total, chunk),
      rawRtt: (total) => measureWarm(warm as net.Socket, Math.round((total * RTT_TOTAL) / TOTAL), chunk),
      rawRttNew: (total) => measure(farSink, 1, Math.round((total * RTT_TOTAL) / TOTAL), chunk, path?.far),
      relayRtt: (total) => measure(relayDelayed, 1, Math.round((total * RTT_TOTAL) / TOTAL), chunk),
      rawSplit: (total) => measure(sinkSplit, 1, Math.round((total * RTT_TOTAL) / TOTAL), chunk),
      relaySplit: (total) => measure(relaySplit, 1, Math.round((total * RTT_TOTAL) / TOTAL), chunk),
      relayWs: (total) => measure(relayWs, 1, total, chunk),
      relayWsJs: (total) => measure(relayWsJs, 1, total, chunk),
      rawDown: (total) => measureDown(sinks.source, total),
      relayWsDown: (total) => measureDown(relayWsDown, total),
      relayWss: (total) => measure(relayWss, 1, total, chunk),
      relayWssDown: (total) => measureDown(relayWssDown, total),
      relayWssRtt: (total) => measure(relayWssRtt, 1, Math.round((total * RTT_TOTAL) / TOTAL), chunk),
      inNode: (total) => measure(inNode, 1, total, chunk),
      inNode64: (total) => measure(inNode, PARALLEL, total, chunk),
      nodePipe: (total) => measure(nodePipe, 1, total, chunk),
      nodePipe64: (total) => measure(nodePipe, PARALLEL, total, chunk),
      cPair: (total) => measure(cPairs?.copying ?? 0, 1, total, chunk),
      cPair64: (total) => measure(cPairs?.copying ?? 0, PARALLEL, total, chunk),
      cSplice: (total) => measure(cPairs?.splicing ?? 0, 1, total, chunk),
      cSplice64: (total) => measure(cPairs?.splicing ?? 0, PARALLEL, total, chunk),
    };
    const cVariants: Variant[] = ['cPair', 'cPair64', 'cSplice', 'cSplice64'];
    const cliOf: Partial<Record<Variant, number>> = {
      relay: cliPid.get(relay),
      multi: cliPid.get(relay),
      relayWs: cliPid.get(relayWs),
      relayWsJs: cliPid.get(relayWsJs),
      relayWsDown: cliPid.get(relayWsDown),
      relayWss: cliPid.get(relayWss),
      relayWssDown: cliPid.get(relayWssDown),
      relayWssRtt: cliPid.get(relayWssRtt),
      inNode: cliPid.get(inNode),
      inNode64: cliPid.get(inNode),
    };
    // DEVOP_BENCH_ONLY=rawRtt,relayRtt times those variants only (paired runs of one change); no RESULT line then.
    const only = process.env.DEVOP_BENCH_ONLY?.split(',');
    const names = (Object.keys(variants) as Variant[]).filter(
      (n) => (cPairs !== undefined || !cVariants.includes(n)) && (!only || only.includes(n)),
    );
    console.log(
      `tunnel benchmark: ${TOTAL / MiB} MiB per transfer ` +
        `(${RTT_TOTAL / MiB} MiB over the ${2 * DELAY_MS} ms path), ` +
        `${ROUNDS} interleaved rounds (+1 warm-up); ssh -L with ${fastest.cipher}`,
    );
    for (const name of names) await variants[name](WARMUP);
    const results = Object.fromEntries(names.map((n) => [n, [] as number[]])) as Record<Variant, number[]>;
    /** CPU (user + system ms) each CLI-side process used during its variant's timed transfers. */
    const cliCpu: Partial<Record<Variant, number>> = {};
    const cpuOf = (pid: number): number => {
      const { user, sys } = cpuMs(pid);
      return user + sys;
    };
    /** The machine's CPU (both cores, every process) while each variant's timed transfers ran. */
    const machine: Partial<Record<Variant, { busy: number; all: number }>> = {};
    for (let round = 1; round <= ROUNDS; round++) {
      // Rotate the order each round so that no variant always runs right after the same neighbour.
      const order = names.map((_, i) => names[(i + round) % names.length]);
      const out: string[] = [];
      for (const name of order) {
        const pid = cliOf[name];
        const before = pid === undefined ? 0 : cpuOf(pid);
        const machineBefore = machineCpuMs();
        const bps = await variants[name](TOTAL);
        const machineAfter = machineCpuMs();
        const used = machine[name] ?? { busy: 0, all: 0 };
        used.busy += machineAfter.busy - machineBefore.busy;
        used.all += machineAfter.all - machineBefore.all;
        machine[name] = used;
        if (pid !== undefined) cliCpu[name] = (cliCpu[name] ?? 0) + cpuOf(pid) - before;
        results[name].push(bps);
        out.push(`${name}=${fmt(bps)}`);
      }
      console.log(`round ${round}: ${out.join(' ')}`);
    }
    const med = Object.fromEntries(names.map((n) => [n, median(results[n])])) as Record<Variant, number>;
    // Ratios are taken within each round (neighbours in time see the same machine load), then the median across rounds.
    const ratio = (a: Variant, b: Variant): string => median(results[a].map((x, i) => x / results[b][i])).toFixed(2);
    console.log(`medians: ${names.map((n) => `${n} ${fmt(med[n])}`).join(', ')}`);
    // Steadier than the rates between runs: what the CLI side spends per MiB does not wait on the other processes.
    const perMiB = (Object.keys(cliCpu) as Variant[]).map(
      (n) => `${n} ${((cliCpu[n] ?? 0) / ((ROUNDS * (n === 'relayWssRtt' ? RTT_TOTAL : TOTAL)) / MiB)).toFixed(2)} ms`,
    );
    if (perMiB.length > 0) console.log(`CLI side CPU per MiB moved (user + system): ${perMiB.join(', ')}`);
    // What every process of a path costs together, and how busy the cores were: at a path's CPU per GiB, both cores
    // fully used move at most cores ÷ that, whatever the processes are written in.
    const loopback: Variant[] = ['raw', 'relay', 'cPair', 'cSplice', 'nodePipe', 'raw64', 'multi', 'cPair64'];
    const cores = availableParallelism();
    const perGiB = loopback
      .filter((n) => names.includes(n) && machine[n])
      .map((n) => {
        const { busy, all } = machine[n] as { busy: number; all: number };
        const seconds = busy / 1000 / ((ROUNDS * TOTAL) / (1024 * MiB));
        return `${n} ${seconds.toFixed(2)} s (${Math.round((100 * busy) / all)} % busy)`;
      });
    const each = `${cores} cores, every process`;
    if (perGiB.length > 0) console.log(`machine CPU per GiB moved (${each}): ${perGiB.join(', ')}`);
    // One line per reference pair: one connection against raw (devop's pair against it), then 64 against raw64.
    const references: [Reference, string][] = [
      ['inNode', "devop's CLI side with the agent's Node side (serveOutgoing)"],
      ['nodePipe', 'two Node processes relaying with socket.pipe(), no framing,'],
      ['cPair', 'a framed relay pair in C'],
      ['cSplice', 'the framed C pair moving payload with splice(2)'],
    ];
    if (only) {
      const pairs = only.slice(1).map((n) => `${n}/${only[0]}=${ratio(n as Variant, only[0] as Variant)}`);
      console.log(`ratios: ${pairs.join(' ')}`);
      return;
    }
    for (const [ref, what] of references.filter(([ref]) => names.includes(ref))) {
      const one = `${fmt(med[ref])}, ${ratio(ref, 'raw')}× raw (devop's pair ${ratio('relay', ref)}× it)`;
      const ref64: Variant = `${ref}64`;
      const many = `${fmt(med[ref64])}, ${ratio(ref64, 'raw64')}× raw (devop's ${ratio('multi', ref64)}×)`;
      console.log(`reference: ${what} moves ${one}; 64 connections ${many}`);
    }
    if (names.includes('rawRttNew')) {
      const fresh = `${fmt(med.rawRttNew)}, devop ${ratio('relayRtt', 'rawRttNew')}× it`;
      console.log(
        `reference: raw TCP over the ${2 * DELAY_MS} ms path on a new connection per transfer moves ${fresh}`,
      );
    }
    if (names.includes('relayWs') && names.includes('relayWsJs')) {
      const overTcp = `${ratio('relayWs', 'relay')}× its pair over TCP`;
      const ws = `devop ${fmt(med.relayWs)}, ${ratio('relayWs', 'raw')}× raw (${overTcp})`;
      const js = `${fmt(med.relayWsJs)} (bufferutil ${ratio('relayWs', 'relayWsJs')}× that)`;
      const where = "through the port-forward WebSocket and the stand-in's relay";
      console.log(`reference: ${where}: ${ws}; with ws's JavaScript masking ${js}`);
    }
    if (names.includes('relayWsDown') && names.includes('rawDown')) {
      const down = `devop ${fmt(med.relayWsDown)}, raw ${fmt(med.rawDown)}, ${ratio('relayWsDown', 'rawDown')}× raw`;
      console.log(`reference: the other way (the pod's side sends) through the same WebSocket line: ${down}`);
    }
    if (names.includes('relayWss') && names.includes('relayWssDown')) {
      const up = `devop ${fmt(med.relayWss)}, ${ratio('relayWss', 'raw')}× raw`;
      const down = `the other way ${fmt(med.relayWssDown)}`;
      console.log(`reference: the same WebSocket line over HTTPS, as to a cluster's API server: ${up}; ${down}`);
    }
    if (names.includes('relayWssRtt') && names.includes('rawRtt')) {
      const near = names.includes('relayWss')
        ? ` (${ratio('relayWssRtt', 'relayWss')}× the same line with no delay)`
        : '';
      const far = `devop ${fmt(med.relayWssRtt)}, ${ratio('relayWssRtt', 'rawRtt')}× raw TCP over the same path${near}`;
      console.log(`reference: the HTTPS WebSocket line with its API server ${2 * DELAY_MS} ms away: ${far}`);
    }
    if (names.includes('relaySplit')) {
      const split = `devop ${fmt(med.relaySplit)}, raw ${fmt(med.rawSplit)}, ${ratio('relaySplit', 'rawSplit')}× raw`;
      console.log(`reference: over a line that holds bytes ${DELAY_MS} ms each way (TCP ends at it): ${split}`);
    }
    console.log(`load after: ${load()}`);
    console.log(
      `RESULT tunnel relay_vs_raw=${ratio('relay', 'raw')} relay_vs_ssh=${ratio('relay', 'ssh')} ` +
        `multi_vs_raw=${ratio('multi', 'raw64')} rtt20_vs_raw=${ratio('relayRtt', 'rawRtt')}`,
    );
  } finally {
    await teardown();
  }
}

main().catch((err: unknown) => {
  console.error(`bench:tunnel failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
});
