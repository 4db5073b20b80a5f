// gRPC benchmark (root; the stand-in cluster and the real agent image): unary calls from a client pod to a gRPC server
// pod (devop.test/grpc-echo), interleaved in one run: straight to the pod (a port devop does not touch), through a
// filtered steal to the same server run as the local command (`devop exec --steal --http-header-filter 'x-dev: ^me$'`,
// calls with that metadata), and through the same filter to the pod (calls without it: the agent's HTTP/2 routing).
// Last line: RESULT grpc stolen_vs_direct_p50=<r> added_p50_ms=<ms> unmatched_vs_direct_p50=<r> stolen_p99_ms=<ms>
import { execFileSync, spawn } from 'node:child_process';
import { join } from 'node:path';
import { ROOT, DevopRun, startE2ECluster } from '../testkit/e2e.js';
import { pidsOfContainer } from '../testkit/pods.js';
import { freePort } from '../testkit/sockets.js';
import { waitFor } from '../testkit/wait.js';
import { teardownOnInterrupt } from './lib/interrupt.js';

/** Calls per path (each path one call per cycle, interleaved); BENCH_CYCLES overrides. */
const CYCLES = Number(process.env.BENCH_CYCLES ?? 2000);
const WARMUP_CYCLES = 100;
/** The port devop steals (filtered), and one the same server listens on that devop leaves alone. */
const STOLEN_PORT = 50051;
const DIRECT_PORT = 50052;
const GRPC_ECHO = join(ROOT, 'standin', 'images', 'grpc-echo.mjs');
const TIMER = join(ROOT, 'bench', 'lib', 'grpc-unary-timer.mjs');

const percentile = (sorted: number[], p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('bench:grpc needs root (the stand-in makes network namespaces)');
  execFileSync(process.execPath, ['scripts/build.mjs'], { cwd: ROOT, stdio: 'inherit' });
  const starting = startE2ECluster();
  let run: DevopRun | undefined;
  const teardown = teardownOnInterrupt(async () => {
    await run?.dispose();
    await (await starting.catch(() => undefined))?.cluster.stop();
  });
  const { cluster, core } = await starting;
  try {
    const pod = (name: string, spec: object) =>
      core.createNamespacedPod({
        namespace: 'default',
        body: { metadata: { name }, spec: { containers: [{ name: 'grpc', image: 'devop.test/grpc-echo', ...spec }] } },
      });
    // No line per call from either server (the pod's env reaches the local command too).
    const quiet = [{ name: 'GRPC_ECHO_QUIET', value: '1' }];
    await Promise.all([
      pod('grpc-server', { args: ['serve', 'pod', `${STOLEN_PORT},${DIRECT_PORT}`], env: quiet }),
      pod('grpc-client', { command: ['sleep', '100000'] }),
    ]);
    const podIP = await waitFor('the gRPC server pod to listen', async () => {
      const ip = (await core.readNamespacedPod({ name: 'grpc-server', namespace: 'default' })).status?.podIP;
      const log = ip ? String(await core.readNamespacedPodLog({ name: 'grpc-server', namespace: 'default' })) : '';
      return ip && log.includes('"seen":"listening"') ? ip : undefined;
    });
    const clientPid = await waitFor(`the client pod's process`, async () => {
      const status = (await core.readNamespacedPod({ name: 'grpc-client', namespace: 'default' })).status;
      const id = status?.containerStatuses?.[0]?.containerID?.replace(/^[a-z]+:\/\//, '');
      return id ? (await pidsOfContainer(id))[0] : undefined;
    });

    const local = await freePort();
    run = new DevopRun([
      'exec',
      '--kubeconfig',
      cluster.kubeconfigPath,
      '--output',
      'plain',
      '-t',
      'pod/grpc-server',
      '--steal',
      '-p',
      `${STOLEN_PORT}:${local}`,
      '--http-header-filter',
      'x-dev: ^me$',
      '--',
      process.execPath,
      GRPC_ECHO,
      'serve',
      'local',
      String(local),
      '127.0.0.1',
    ]);
    await run.ready(60_000);

    const paths = {
      direct: { target: `${podIP}:${DIRECT_PORT}` },
      stolen: { target: `${podIP}:${STOLEN_PORT}`, metadata: { 'x-dev': 'me' } },
      unmatched: { target: `${podIP}:${STOLEN_PORT}` },
    };
    const config = JSON.stringify({ paths, cycles: CYCLES, warmup: WARMUP_CYCLES });
    const child = spawn('nsenter', ['-t', String(clientPid), '-n', process.execPath, TIMER, config], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (t: string) => (out += t));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    if (code !== 0) throw new Error(`the gRPC client exited with ${code}\n${run.output}`);
    const { times, from } = JSON.parse(out) as { times: Record<string, number[]>; from: Record<string, string> };
    if (from.stolen !== 'local' || from.direct !== 'pod' || from.unmatched !== 'pod')
      throw new Error(`calls answered by the wrong side: ${JSON.stringify(from)}\n${run.output}`);
    const p50 = (name: string): number => percentile(times[name], 50);
    const p99 = (name: string): number => percentile(times[name], 99);
    for (const name of Object.keys(paths)) {
      const calls = times[name].length;
      console.log(
        `${name.padEnd(10)} p50 ${p50(name).toFixed(3)} ms  p99 ${p99(name).toFixed(3)} ms  (${calls} calls)`,
      );
    }
    console.log(
      `RESULT grpc stolen_vs_direct_p50=${(p50('stolen') / p50('direct')).toFixed(2)} ` +
        `added_p50_ms=${(p50('stolen') - p50('direct')).toFixed(3)} ` +
        `unmatched_vs_direct_p50=${(p50('unmatched') / p50('direct')).toFixed(2)} ` +
        `stolen_p99_ms=${p99('stolen').toFixed(3)}`,
    );
  } finally {
    await teardown();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  },
);
