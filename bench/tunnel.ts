// Tunnel benchmark: throughput of raw loopback TCP, one devop mux stream, 64 parallel mux streams and OpenSSH `ssh -L`,
// measured side by side in one run (interleaved rounds, medians), ending with one RESULT line of ratios. The receiving
// ends run in a separate process (bench/lib/sink.ts), as sshd does, so no variant shares the sender's event loop.
import { spawn } from 'node:child_process';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { createClientMux } from '../shared/mux.js';
import { startSshForward, type SshForward } from './lib/ssh.js';

const MiB = 1024 * 1024;
/** Bytes sent per measurement (env DEVOP_BENCH_MIB): large enough that setup is noise, small enough for a busy box. */
const TOTAL = Number(process.env.DEVOP_BENCH_MIB ?? 192) * MiB;
/** Interleaved rounds; ratios are medians over rounds, so one noisy neighbour (the box is shared) does not decide. */
const ROUNDS = Number(process.env.DEVOP_BENCH_ROUNDS ?? 7);
/** One untimed transfer per variant first, so that JIT and the ssh session's start-up are not measured. */
const WARMUP = 32 * MiB;
const PARALLEL = 64;
/** Size of each write() by the sender, the same for every variant. */
const WRITE_SIZE = 128 * 1024;

type Variant = 'raw' | 'single' | 'multi' | 'ssh';
type Writer = NodeJS.WritableStream & { once(e: 'drain', f: () => void): unknown };

/** Writes `total` bytes with backpressure, half-closes, and resolves when the receiver's one-byte answer arrived. */
function transfer(stream: net.Socket | Duplex, total: number, chunk: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    let sent = 0;
    stream.on('error', reject);
    stream.on('data', () => undefined);
    stream.on('end', () => resolve());
    const w = stream as unknown as Writer;
    const go = (): void => {
      while (sent < total) {
        const n = Math.min(chunk.length, total - sent);
        sent += n;
        if (!w.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
          w.once('drain', go);
          return;
        }
      }
      w.end();
    };
    go();
  });
}

function connect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1', () => resolve(sock));
    sock.once('error', reject);
  });
}

async function timeRaw(port: number, total: number, chunk: Buffer): Promise<number> {
  const sock = await connect(port);
  const t0 = process.hrtime.bigint();
  await transfer(sock, total, chunk);
  const dt = Number(process.hrtime.bigint() - t0) / 1e9;
  sock.destroy();
  return total / dt;
}

async function timeMux(port: number, streams: number, total: number, chunk: Buffer): Promise<number> {
  const sock = await connect(port);
  sock.setNoDelay(true);
  const mux = createClientMux(sock);
  const t0 = process.hrtime.bigint();
  const per = Math.floor(total / streams);
  await Promise.all(
    Array.from({ length: streams }, () => transfer(mux.openStream({ kind: 'outgoing', host: 'sink', port: 9 }), per, chunk)),
  );
  const dt = Number(process.hrtime.bigint() - t0) / 1e9;
  mux.close('bench done');
  sock.destroy();
  return (per * streams) / dt;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

const fmt = (bps: number): string => `${(bps / MiB).toFixed(0)} MiB/s`;

async function main(): Promise<void> {
  const sinkPath = fileURLToPath(new URL('./lib/sink.ts', import.meta.url));
  const sink = spawn(process.execPath, ['--import', 'tsx', sinkPath], { stdio: ['pipe', 'pipe', 'inherit'] });
  let ssh: SshForward | undefined;
  try {
    const ports = await new Promise<{ raw: number; mux: number }>((resolve, reject) => {
      let buf = '';
      sink.stdout.on('data', (d: Buffer) => {
        buf += d.toString();
        const nl = buf.indexOf('\n');
        if (nl >= 0) resolve(JSON.parse(buf.slice(0, nl)) as { raw: number; mux: number });
      });
      sink.once('exit', (code) => reject(new Error(`sink exited with ${code}`)));
    });
    ssh = await startSshForward(ports.raw);
    const chunk = Buffer.alloc(WRITE_SIZE, 0x5a);
    const variants: Record<Variant, (total: number) => Promise<number>> = {
      raw: (total) => timeRaw(ports.raw, total, chunk),
      single: (total) => timeMux(ports.mux, 1, total, chunk),
      multi: (total) => timeMux(ports.mux, PARALLEL, total, chunk),
      ssh: (total) => timeRaw(ssh!.localPort, total, chunk),
    };
    const names = Object.keys(variants) as Variant[];
    console.log(`tunnel benchmark: ${TOTAL / MiB} MiB per transfer, ${ROUNDS} interleaved rounds (+1 warm-up), loopback`);
    // Warm-up: JIT, TCP buffers and the ssh session settle before anything is measured.
    for (const name of names) await variants[name](WARMUP);
    const results: Record<Variant, number[]> = { raw: [], single: [], multi: [], ssh: [] };
    for (let round = 1; round <= ROUNDS; round++) {
      // Rotate the order each round so that no variant always runs right after the same neighbour.
      const order = names.map((_, i) => names[(i + round) % names.length]);
      const line: string[] = [];
      for (const name of order) {
        const bps = await variants[name](TOTAL);
        results[name].push(bps);
        line.push(`${name}=${fmt(bps)}`);
      }
      console.log(`round ${round}: ${line.join(' ')}`);
    }
    const med = Object.fromEntries(names.map((n) => [n, median(results[n])])) as Record<Variant, number>;
    // Ratios are taken within each round (neighbours in time see the same machine load), then the median across rounds.
    const ratio = (a: Variant, b: Variant): number => median(results[a].map((x, i) => x / results[b][i]));
    console.log(
      `medians: raw TCP ${fmt(med.raw)}, 1 mux stream ${fmt(med.single)}, ${PARALLEL} mux streams ${fmt(med.multi)}, ssh -L ${fmt(med.ssh)}`,
    );
    console.log(
      `RESULT tunnel single_vs_raw=${ratio('single', 'raw').toFixed(2)} multi_vs_raw=${ratio('multi', 'raw').toFixed(2)} single_vs_ssh=${ratio('single', 'ssh').toFixed(2)}`,
    );
  } finally {
    await ssh?.stop();
    sink.stdin.end();
    sink.kill();
  }
}

main().catch((err: unknown) => {
  console.error(`bench:tunnel failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
});
