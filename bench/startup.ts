// Start-up benchmark (root; the stand-in cluster): time from `devop exec --steal` to the first request to the pod IP
// that the local command answers, for a fresh agent and for a second session that reuses it.
// It also times `devop --help` against `node -e 0` (interleaved runs, medians): what any command pays before its work.
// Each session's phases are printed as marks in time order (bench/lib/startup-phases.ts).
// Last line: RESULT startup exec_to_stealing_ms=<t> reuse_to_stealing_ms=<t2> help_vs_node=<r>
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import {
  ROOT,
  LOCAL_SERVER_COMMAND,
  DevopRun,
  deployEcho,
  startE2ECluster,
  startPodClient,
  type PodClient,
} from '../testkit/e2e.js';
import { teardownOnInterrupt } from './lib/interrupt.js';
import { waitFor } from '../testkit/wait.js';
import { freePort } from '../testkit/sockets.js';
import type { KubeConfig } from '@kubernetes/client-node';
import { StartupPhases } from './lib/startup-phases.js';

/** Between two probe requests: requests overlap, so one lost at the switch-over moment does not delay the result. */
const PROBE_EVERY_MS = 20;

async function timeToStealing(
  kc: KubeConfig,
  kubeconfig: string,
  podIP: string,
  client: PodClient,
): Promise<{ ms: number; run: DevopRun; phases: StartupPhases }> {
  const local = await freePort();
  const phases = new StartupPhases(kc, 'default');
  await Promise.all([phases.watchAgentPods(), phases.watchAgentEvents()]);
  const started = performance.now();
  const run = new DevopRun(
    [
      'exec',
      '--kubeconfig',
      kubeconfig,
      '--output',
      'plain',
      '-t',
      'deploy/echo',
      '--steal',
      '-p',
      `8080:${local}`,
      '--',
      ...LOCAL_SERVER_COMMAND,
    ],
    { env: { LOCAL_PORT: String(local) } },
  );
  phases.mark('devop spawned', 0);
  phases.follow(run.child);
  // Probe the pod all along; the first answer from the local command marks the moment stealing works end to end.
  return new Promise((resolve, reject) => {
    let done = false;
    const timer = setInterval(() => {
      if (done) return;
      if (run.child.exitCode !== null) {
        done = true;
        clearInterval(timer);
        reject(new Error(`devop exited early\n${run.output}`));
        return;
      }
      if (performance.now() - started > 60_000) {
        done = true;
        clearInterval(timer);
        reject(new Error(`not stealing after 60 s\n${run.output}`));
        return;
      }
      client.who(podIP, 8080, '/bench').then(
        (who) => {
          if (who !== 'local' || done) return;
          done = true;
          clearInterval(timer);
          const ms = performance.now() - started;
          phases.mark('the pod answered from the local command', ms);
          resolve({ ms, run, phases });
        },
        () => undefined, // a request caught in the switch-over; later ones tell
      );
    }, PROBE_EVERY_MS);
  });
}

/** Runs per command for the help ratio: process start-up varies by milliseconds, medians of this many settle it. */
const HELP_RUNS = 21;

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/** `devop --help` ÷ `node -e 0`, both whole processes, interleaved so that a busy moment hits both alike. */
function helpVsNode(): { help: number; node: number } {
  const time = (args: string[]): number => {
    const t0 = performance.now();
    const run = spawnSync(process.execPath, args, { stdio: 'ignore' });
    if (run.status !== 0) throw new Error(`node ${args.join(' ')} exited with ${run.status}`);
    return performance.now() - t0;
  };
  const help: number[] = [];
  const node: number[] = [];
  for (let i = 0; i < HELP_RUNS; i++) {
    help.push(time([join(ROOT, 'bin', 'devop.js'), '--help']));
    node.push(time(['-e', '0']));
  }
  return { help: median(help), node: median(node) };
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('bench:startup needs root (the stand-in makes network namespaces)');
  execFileSync(process.execPath, ['scripts/build.mjs'], { cwd: ROOT, stdio: 'inherit' });
  const help = helpVsNode();
  console.log(
    `devop --help: ${help.help.toFixed(0)} ms, node -e 0: ${help.node.toFixed(0)} ms (medians of ${HELP_RUNS})`,
  );
  let client: PodClient | undefined;
  const starting = startE2ECluster();
  // Interrupted while the stand-in starts, the teardown waits for it to be up, then stops it.
  const teardown = teardownOnInterrupt(async () => {
    client?.close();
    await (await starting.catch(() => undefined))?.cluster.stop();
  });
  const env = await starting;
  try {
    // Requests come from another pod (the host is the node: its connections count as kubelet probes, never stolen).
    const [echo, podClient] = await Promise.all([deployEcho(env, 'echo'), startPodClient(env)]);
    client = podClient;
    const kubeconfig = env.cluster.kubeconfigPath;
    const first = await timeToStealing(env.kc, kubeconfig, echo.podIP, podClient);
    await first.phases.finish();
    console.log(`exec → stealing (new agent):    ${first.ms.toFixed(0)} ms\n${first.phases.table()}`);
    await first.run.stop('SIGTERM');
    await waitFor(
      'the pod to serve again',
      async () => ((await podClient.who(echo.podIP, 8080)) === echo.podName ? true : undefined),
      10_000,
    );
    const second = await timeToStealing(env.kc, kubeconfig, echo.podIP, podClient);
    await second.phases.finish();
    console.log(second.phases.table());
    console.log(
      `exec → stealing (reused agent): ${second.ms.toFixed(0)} ms ` +
        `${/reused Job/.test(second.run.stderr) ? '(agent reused)' : '(agent NOT reused)'}`,
    );
    await second.run.stop('SIGTERM');
    const ratio = (help.help / help.node).toFixed(2);
    console.log(
      `RESULT startup exec_to_stealing_ms=${first.ms.toFixed(0)} reuse_to_stealing_ms=${second.ms.toFixed(0)} ` +
        `help_vs_node=${ratio}`,
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
