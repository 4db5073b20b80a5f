// The README's quick start, end to end on the stand-in cluster (run as root): start the stand-in, deploy an echo
// server, `devop exec -t deploy/echo --steal -- node <a tiny local server>`, send a request to the pod's IP and show
// that the local server answered it, then stop everything and say what stays on the machine. The bundles and images
// are built before, by scripts/setup.sh (`npm run demo` runs it first).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CONTAINERD_ROOT } from '../standin/kubelet/containerd.js';
import { DevopRun, deployEcho, startE2ECluster, startPodClient } from '../testkit/e2e.js';
import { waitFor } from '../testkit/wait.js';

const LOCAL_APP =
  `// A tiny local server: what you would run from your editor.
import { createServer } from 'node:http';
createServer((req, res) => res.end(\`hello from my laptop: \${req.method} \${req.url} ` +
  `(APP_MODE=\${process.env.APP_MODE})\\n\`))
  .listen(8080, '127.0.0.1', () => console.log('local server listening on 127.0.0.1:8080'));
`;

function say(text: string): void {
  process.stdout.write(`\n\x1b[1m== ${text}\x1b[0m\n`);
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0)
    throw new Error('the demo needs root (the stand-in cluster makes network namespaces and iptables rules)');
  say('starting the stand-in Kubernetes cluster');
  const env = await startE2ECluster();
  let run: DevopRun | undefined;
  let podClient: { close(): void } | undefined;
  let dir: string | undefined;
  try {
    console.log(`kubeconfig: ${env.cluster.kubeconfigPath}`);
    say('deploying deploy/echo (an HTTP echo server on port 8080)');
    // The requests come from a client pod: the host is the node, and connections from the node (kubelet probes) are
    // never stolen unless --steal-probes is given.
    const [echo, client] = await Promise.all([deployEcho(env, 'echo'), startPodClient(env)]);
    podClient = client;
    console.log(`pod ${echo.podName} at ${echo.podIP}; requests come from pod "client"`);
    console.log(
      `curl http://${echo.podIP}:8080/hello → ${(await client.get(echo.podIP, 8080, '/hello')).body.slice(0, 120)}…`,
    );

    dir = mkdtempSync(join(tmpdir(), 'devop-demo-'));
    const app = join(dir, 'server.mjs');
    writeFileSync(app, LOCAL_APP);
    const command = [
      'exec',
      '--kubeconfig',
      env.cluster.kubeconfigPath,
      '--output',
      'plain',
      '-t',
      'deploy/echo',
      '--steal',
      '--',
      'node',
      app,
    ];
    say(`devop ${command.join(' ')}`);
    run = new DevopRun(command);
    run.child.stderr?.pipe(process.stderr);
    run.child.stdout?.pipe(process.stdout);
    await run.ready(60_000);

    say(`a request from pod "client" to the echo pod's IP (${echo.podIP}:8080) …`);
    const answer = await client.get(echo.podIP, 8080, '/hello');
    console.log(`curl http://${echo.podIP}:8080/hello → ${answer.body.trim()}`);
    if (!answer.body.startsWith('hello from my laptop')) throw new Error('the local server did not answer');
    console.log("… was answered by the local server, with the pod's env (APP_MODE comes from the Deployment).");

    say('stopping devop (Ctrl-C)');
    await run.stop('SIGINT');
    await waitFor(
      'the pod to serve again',
      async () => ((await client.who(echo.podIP, 8080)) === echo.podName ? true : undefined),
      10_000,
    );
    console.log(`curl http://${echo.podIP}:8080/hello → answered by the pod ${echo.podName} again`);
  } finally {
    podClient?.close();
    await run?.dispose();
    if (dir) rmSync(dir, { recursive: true, force: true });
    say('stopping the stand-in');
    await env.cluster.stop();
  }
  console.log(leftBehind());
}

/** The demo's last line: the stand-in is gone; what it leaves, as a node would, and how much of the disk that takes. */
function leftBehind(): string {
  let size = '';
  try {
    size = ` (${execFileSync('du', ['-sh', CONTAINERD_ROOT], { encoding: 'utf8' }).split('\t')[0]})`;
  } catch {
    // du failed or the folder is not there: the line names the folder without its size.
  }
  return (
    `stand-in stopped: no pod, netns or devop rule is left; containerd keeps running with its image store in ` +
    `${CONTAINERD_ROOT}${size}, the images in dist/images (docs/cluster.md says how to remove them)`
  );
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(`demo failed: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
