// Start-up benchmark (root; the stand-in cluster): time from `devop exec --steal` to the first request to the pod IP that
// the local command answers, for a fresh agent and for a second session that reuses it.
// Last line: RESULT startup exec_to_stealing_ms=<t> reuse_to_stealing_ms=<t2>   (targets: <= 2000 and <= 800)
import { execFileSync } from 'node:child_process';
import { ROOT, LOCAL_SERVER_COMMAND, DevopRun, deployEcho, freePort, startE2ECluster, startPodClient, waitFor, type PodClient } from '../test/e2e/harness.js';

async function timeToStealing(kubeconfig: string, podIP: string, client: PodClient): Promise<{ ms: number; run: DevopRun }> {
  const local = await freePort();
  const started = performance.now();
  const run = new DevopRun(['exec', '--kubeconfig', kubeconfig, '--output', 'plain', '-t', 'deploy/echo', '--steal', '-p', `8080:${local}`, '--', ...LOCAL_SERVER_COMMAND], { env: { LOCAL_PORT: String(local) } });
  // Ask the pod as fast as it answers; the first "local" answer marks the moment stealing works end to end.
  let readyAt: number | undefined;
  run.child.stderr?.on('data', () => {
    if (readyAt === undefined && /^devop: ready$/m.test(run.stderr)) readyAt = performance.now() - started;
  });
  for (;;) {
    if (run.child.exitCode !== null) throw new Error(`devop exited early\n${run.output}`);
    const t = performance.now();
    const who = await client.who(podIP, 8080, '/bench').catch((e: Error) => `error ${e.message}`);
    if (process.env.BENCH_VERBOSE) console.log(`  ${(t - started).toFixed(0)} ms: ${who.slice(0, 60)} (${(performance.now() - t).toFixed(0)} ms)`);
    if (who === 'local') {
      if (process.env.BENCH_VERBOSE) console.log(`  devop said ready at ${readyAt?.toFixed(0)} ms\n${run.stderr}`);
      return { ms: performance.now() - started, run };
    }
    if (performance.now() - started > 60_000) throw new Error(`not stealing after 60 s\n${run.output}`);
  }
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('bench:startup needs root (the stand-in makes network namespaces)');
  execFileSync(process.execPath, ['scripts/build.mjs'], { cwd: ROOT, stdio: 'inherit' });
  const env = await startE2ECluster();
  try {
    // Requests come from another pod (the host is the node: its connections count as kubelet probes, never stolen).
    const [echo, client] = await Promise.all([deployEcho(env, 'echo'), startPodClient(env)]);
    const kubeconfig = env.cluster.kubeconfigPath;
    const first = await timeToStealing(kubeconfig, echo.podIP, client);
    console.log(`exec → stealing (new agent):    ${first.ms.toFixed(0)} ms`);
    await first.run.stop('SIGTERM');
    await waitFor('the pod to serve again', async () => ((await client.who(echo.podIP, 8080)) === echo.podName ? true : undefined), 10_000);
    const second = await timeToStealing(kubeconfig, echo.podIP, client);
    console.log(`exec → stealing (reused agent): ${second.ms.toFixed(0)} ms ${/reused Job/.test(second.run.stderr) ? '(agent reused)' : '(agent NOT reused)'}`);
    await second.run.stop('SIGTERM');
    console.log(`RESULT startup exec_to_stealing_ms=${first.ms.toFixed(0)} reuse_to_stealing_ms=${second.ms.toFixed(0)}`);
  } finally {
    await env.cluster.stop();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  },
);
