// kubectl port-forward against the stand-in: kubectl 1.31+ tunnels SPDY through a WebSocket, kubectl up to 1.30 (or
// with KUBECTL_PORT_FORWARD_WEBSOCKETS=false) upgrades to plain SPDY/3.1 with X-Stream-Protocol-Version
// portforward.k8s.io (kubernetes pkg/kubelet/cri/streaming/portforward/httpstream.go, apimachinery
// pkg/util/httpstream/spdy/upgrade.go); both get the pod's bytes back exactly (apiserver/spdy-portforward.ts). The
// "pod" is a local echo server (no kubelet needed).
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { localRuntime } from '../../standin/local-runtime.js';

const KUBECTL_DIR = '/usr/lib/google-cloud-sdk/bin';
const ECHO_PORT = 7000;
/** How long kubectl may take to say it forwards (or why it cannot), and a round trip to take. */
const KUBECTL_WAIT_MS = 30_000;
const have = (v: string): boolean => existsSync(`${KUBECTL_DIR}/kubectl.${v}`);

let cluster: ClusterHandle;
let echo: Server;
let echoPort: number;
let home: string;
const children: ChildProcess[] = [];

/** Starts `kubectl port-forward pod/box :PORT`; resolves with the local port it prints, or its output when it exits. */
function portForward(
  v: string,
  remotePort: number,
  env: NodeJS.ProcessEnv = {},
): Promise<{ port?: number; output: string; code?: number | null; later: () => string }> {
  const child = spawn(`${KUBECTL_DIR}/kubectl.${v}`, ['port-forward', 'pod/box', `:${remotePort}`], {
    env: { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: home, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let output = '';
  const later = (): string => output;
  return new Promise((resolve) => {
    const timer = setTimeout(
      () => resolve({ output: `${output}\n(no answer within ${KUBECTL_WAIT_MS} ms)`, later }),
      KUBECTL_WAIT_MS,
    );
    const seen = (chunk: Buffer): void => {
      output += chunk.toString();
      const port = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(output)?.[1];
      if (port) {
        clearTimeout(timer);
        resolve({ port: Number(port), output, later });
      }
    };
    child.stdout.on('data', seen);
    child.stderr.on('data', seen);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ output, code, later });
    });
  });
}

/** Sends `bytes` through a local port and reads as many back (the echo), within the wait. */
function roundTrip(port: number, bytes: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    let got = 0;
    const timer = setTimeout(
      () => socket.destroy(new Error(`only ${got} of ${bytes.length} bytes came back`)),
      KUBECTL_WAIT_MS,
    );
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      got += chunk.length;
      if (got >= bytes.length) {
        clearTimeout(timer);
        socket.end();
        resolve(Buffer.concat(chunks));
      }
    });
    socket.on('close', () => {
      clearTimeout(timer);
      reject(new Error(`the connection closed after ${got} of ${bytes.length} bytes`));
    });
    socket.on('error', () => undefined); // (the close that follows says it)
    socket.write(bytes);
  });
}

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

beforeAll(async () => {
  home = mkdtempSync(join(tmpdir(), 'devop-kubectl-pf-'));
  echo = createServer((s) => s.pipe(s));
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', () => r()));
  echoPort = (echo.address() as { port: number }).port;
  cluster = await startCluster({ kubelet: false });
  // Port 7000 of any pod is the echo server; any other port refuses.
  cluster.controlPlane.attachNode(localRuntime((port) => (port === ECHO_PORT ? echoPort : undefined)));
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  const core = kc.makeApiClient(CoreV1Api);
  await core.createNamespacedPod({
    namespace: 'default',
    body: { metadata: { name: 'box' }, spec: { containers: [{ name: 'main', image: 'busybox' }] } },
  });
  // kubectl port-forward checks that the pod runs before it dials (no kubelet here to say so).
  await core.patchNamespacedPodStatus(
    { name: 'box', namespace: 'default', body: { status: { phase: 'Running' } } },
    setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
  );
});

afterAll(async () => {
  for (const child of children) child.kill('SIGKILL');
  await cluster?.stop();
  echo?.close();
  if (home) rmSync(home, { recursive: true, force: true });
});

describe('kubectl port-forward against the stand-in', () => {
  for (const v of ['1.31', '1.32', '1.33']) {
    it.runIf(have(v))(
      `kubectl ${v} forwards over WebSocket: two connections at once, 1 MiB each, byte-exact`,
      async () => {
        // Given kubectl port-forward to the echo port of pod box
        const forward = await portForward(v, ECHO_PORT);
        expect(forward.port, forward.output).toBeDefined();
        // When two connections send 1 MiB each at the same time
        const a = randomBytes(1024 * 1024);
        const b = randomBytes(1024 * 1024);
        const [backA, backB] = await Promise.all([roundTrip(forward.port!, a), roundTrip(forward.port!, b)]);
        // Then each gets its own bytes back
        expect(sha(backA)).toBe(sha(a));
        expect(sha(backB)).toBe(sha(b));
      },
    );
  }

  it.runIf(have('1.33'))(
    'a port nothing listens on: kubectl says why, then ends as it does against a cluster',
    async () => {
      // Given kubectl port-forward to a port the pod does not listen on
      const forward = await portForward('1.33', 7001);
      expect(forward.port, forward.output).toBeDefined();
      const child = children.at(-1)!;
      const ended = new Promise<number | null>((resolve) => {
        if (child.exitCode !== null) resolve(child.exitCode);
        else child.once('exit', (code) => resolve(code));
      });
      // When a connection comes
      await roundTrip(forward.port!, Buffer.from('x')).catch(() => undefined);
      // Then kubectl prints the pod's refusal, and (client-go closes the whole connection after an error on a
      // connection's error stream, as against a real API server) ends with "lost connection to pod"
      const code = await Promise.race([
        ended,
        new Promise((r) => setTimeout(() => r('still running'), KUBECTL_WAIT_MS)),
      ]);
      expect(forward.later()).toMatch(/error forwarding port 7001 to pod box.*ECONNREFUSED/);
      expect(forward.later()).toMatch(/lost connection to pod/);
      expect(code).toBe(1);
    },
  );

  for (const [v, env] of [
    ['1.27', {}],
    ['1.30', {}],
    ['1.33', { KUBECTL_PORT_FORWARD_WEBSOCKETS: 'false' }],
  ] as const) {
    it.runIf(have(v))(
      `kubectl ${v}${Object.keys(env).length ? ' with KUBECTL_PORT_FORWARD_WEBSOCKETS=false' : ''} forwards over ` +
        'plain SPDY: two connections at once, 1 MiB each, byte-exact',
      async () => {
        // Given kubectl port-forward over a plain SPDY/3.1 upgrade to the echo port of pod box
        const forward = await portForward(v, ECHO_PORT, env);
        expect(forward.port, forward.output).toBeDefined();
        // When two connections send 1 MiB each at the same time
        const a = randomBytes(1024 * 1024);
        const b = randomBytes(1024 * 1024);
        const [backA, backB] = await Promise.all([roundTrip(forward.port!, a), roundTrip(forward.port!, b)]);
        // Then each gets its own bytes back
        expect(sha(backA)).toBe(sha(a));
        expect(sha(backB)).toBe(sha(b));
      },
    );
  }

  it.runIf(have('1.27'))(
    "kubectl 1.27: a port nothing listens on gets the pod's refusal on the error stream",
    async () => {
      // Given kubectl 1.27 port-forward (plain SPDY) to a port the pod does not listen on
      const forward = await portForward('1.27', 7001);
      expect(forward.port, forward.output).toBeDefined();
      // When a connection comes
      await roundTrip(forward.port!, Buffer.from('x')).catch(() => undefined);
      // Then kubectl prints the refusal that came on that connection's error stream
      const said = Date.now() + KUBECTL_WAIT_MS;
      while (!/error forwarding port 7001/.test(forward.later()) && Date.now() < said) {
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(forward.later()).toMatch(/error forwarding port 7001 to pod box.*ECONNREFUSED/);
    },
  );
});
