// pods/portforward, pods/exec and pods/log wire protocols, checked with client-node and kubectl against a node runtime
// stand-in (local sockets and processes), so that framing is tested apart from the kubelet's namespaces.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:net';
import { PassThrough, Readable, Writable } from 'node:stream';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { CoreV1Api, Exec, KubeConfig, PortForward, type V1Status } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { rawRequest } from '../../testkit/api-requests.js';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import type { ExecProcess, NodeRuntime } from '../../standin/node-runtime.js';
import { localRuntime } from '../../standin/local-runtime.js';
import { waitFor } from '../../testkit/wait.js';

const runFile = promisify(execFile);
let cluster: ClusterHandle;
let kc: KubeConfig;
let echo: Server;
let echoPort: number;
let home: string;
const dialed: string[] = [];
/** What each pods/log request asked the node for. */
const logRequests: { container?: string; follow?: boolean; tailLines?: number; previous?: boolean }[] = [];

/** A node whose "pods" are local: port 7000 of any pod is the echo server, exec runs `sh -c` locally. */
function localStreamsRuntime(): NodeRuntime {
  return localRuntime(
    (port, namespace, pod) => {
      dialed.push(`${namespace}/${pod}:${port}`);
      return port === 7000 ? echoPort : undefined;
    },
    {
      async exec(req): Promise<ExecProcess> {
        const child = spawn(req.command[0], req.command.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
        const exited = new Promise<{ exitCode: number; signal?: string }>((r) =>
          child.on('exit', (code, signal) => r({ exitCode: code ?? 137, signal: signal ?? undefined })),
        );
        return {
          stdin: child.stdin,
          stdout: child.stdout,
          stderr: child.stderr,
          resize: () => undefined,
          wait: () => exited,
          kill: () => child.kill('SIGKILL'),
        };
      },
      async logs(req) {
        logRequests.push(req);
        const lines = ['one', 'two', 'three'].map((l) => `${req.container}: ${l}\n`);
        return Readable.from(
          (req.tailLines !== undefined ? lines.slice(-req.tailLines) : lines).map((l) => Buffer.from(l)),
        );
      },
    },
  );
}

beforeAll(async () => {
  home = mkdtempSync(join(tmpdir(), 'devop-streams-'));
  echo = createServer((s) => s.pipe(s));
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', () => r()));
  echoPort = (echo.address() as { port: number }).port;
  cluster = await startCluster({ kubelet: false });
  cluster.controlPlane.attachNode(localStreamsRuntime());
  kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  await kc.makeApiClient(CoreV1Api).createNamespacedPod({
    namespace: 'default',
    body: { metadata: { name: 'box' }, spec: { containers: [{ name: 'main', image: 'busybox' }] } },
  });
});

afterAll(async () => {
  await cluster?.stop();
  echo?.close();
  if (home) rmSync(home, { recursive: true, force: true });
});

describe('streaming subresources', () => {
  it('port-forwards 10 MiB byte-exact over client-node PortForward (v4.channel.k8s.io)', async () => {
    const payload = randomBytes(10 * 1024 * 1024);
    const input = new PassThrough();
    const received: Buffer[] = [];
    let got = 0;
    const output = new Writable({
      write(chunk, _e, cb) {
        received.push(chunk);
        got += chunk.length;
        cb();
      },
    });
    const ws: any = await new PortForward(kc).portForward('default', 'box', [7000], output, null, input);
    expect(ws.protocol).toBe('v4.channel.k8s.io');
    for (let i = 0; i < payload.length; i += 64 * 1024) input.write(payload.subarray(i, i + 64 * 1024));
    await waitFor('all bytes echoed', () => got >= payload.length, 60_000);
    expect(createHash('sha256').update(Buffer.concat(received)).digest('hex')).toBe(
      createHash('sha256').update(payload).digest('hex'),
    );
    expect(dialed).toContain('default/box:7000');
    ws.close();
  });

  it('reports a refused pod port on the error channel, and dropWebSockets cuts open tunnels', async () => {
    const errs: Buffer[] = [];
    const err = new Writable({
      write: (c, _e, cb) => {
        errs.push(c);
        cb();
      },
    });
    await new PortForward(kc).portForward('default', 'box', [7001], new PassThrough(), err, new PassThrough());
    await waitFor('error channel message', () => Buffer.concat(errs).toString().includes('ECONNREFUSED'));
    expect(Buffer.concat(errs).toString()).toMatch(
      /^error forwarding port 7001 to pod box, uid [0-9a-f-]+: connect ECONNREFUSED/,
    );

    const ws: any = await new PortForward(kc).portForward(
      'default',
      'box',
      [7000],
      new PassThrough(),
      null,
      new PassThrough(),
    );
    const closed = new Promise((r) => ws.on('close', r));
    cluster.dropWebSockets();
    await closed;
  });

  it('refuses port-forward and exec to the restricted token with 403 before upgrading', async () => {
    const rkc = new KubeConfig();
    rkc.loadFromFile(cluster.restrictedKubeconfigPath);
    const pf = await new PortForward(rkc)
      .portForward('default', 'box', [7000], new PassThrough(), null, new PassThrough())
      .catch((e) => e);
    expect(String(pf?.message ?? pf)).toContain('403');
    const ex = await new Exec(rkc)
      .exec('default', 'box', 'main', ['true'], new PassThrough(), new PassThrough(), null, false)
      .catch((e) => e);
    expect(String(ex?.message ?? ex)).toContain('403');
  });

  it('execs over client-node Exec (v5.channel.k8s.io) with stdout, stderr, stdin and the exit status', async () => {
    const out: Buffer[] = [];
    const errOut: Buffer[] = [];
    const stdin = new PassThrough();
    let status: V1Status | undefined;
    const ws: any = await new Exec(kc).exec(
      'default',
      'box',
      'main',
      ['sh', '-c', 'cat; echo to-err >&2; exit 3'],
      new Writable({
        write: (c, _e, cb) => {
          out.push(c);
          cb();
        },
      }),
      new Writable({
        write: (c, _e, cb) => {
          errOut.push(c);
          cb();
        },
      }),
      stdin,
      false,
      (s) => (status = s),
    );
    expect(ws.protocol).toBe('v5.channel.k8s.io');
    stdin.end('from-stdin\n');
    await waitFor('exec status', () => status);
    expect(Buffer.concat(out).toString()).toBe('from-stdin\n');
    expect(Buffer.concat(errOut).toString()).toBe('to-err\n');
    expect(status).toMatchObject({
      status: 'Failure',
      reason: 'NonZeroExitCode',
      details: { causes: [{ reason: 'ExitCode', message: '3' }] },
    });

    let ok: V1Status | undefined;
    await new Exec(kc).exec(
      'default',
      'box',
      'main',
      ['true'],
      new PassThrough(),
      new PassThrough(),
      null,
      false,
      (s) => (ok = s),
    );
    await waitFor('success status', () => ok);
    expect(ok).toEqual({ metadata: {}, status: 'Success' });
  });

  it('speaks v4.channel.k8s.io to a client that offers only v4 (status on channel 3, no close frames)', async () => {
    const query = 'command=sh&command=-c&command=echo%20v4%3B%20exit%202&stdout=true&stderr=true';
    const url = `${cluster.server.replace('https://', 'wss://')}/api/v1/namespaces/default/pods/box/exec?${query}`;
    const ws = new WebSocket(url, ['v4.channel.k8s.io'], {
      ca: readFileSync(cluster.caPath),
      headers: { Authorization: `Bearer ${cluster.adminToken}` },
    });
    const frames: Buffer[] = [];
    ws.on('message', (d: Buffer) => frames.push(Buffer.from(d)));
    await new Promise((r) => ws.on('close', r));
    expect(ws.protocol).toBe('v4.channel.k8s.io');
    const stdout = Buffer.concat(frames.filter((f) => f[0] === 1).map((f) => f.subarray(1))).toString();
    const status = JSON.parse(Buffer.concat(frames.filter((f) => f[0] === 3).map((f) => f.subarray(1))).toString());
    expect(stdout).toBe('v4\n');
    expect(status.details.causes).toEqual([{ reason: 'ExitCode', message: '2' }]);
  });

  // kubernetes pkg/registry/core/pod/rest/log.go (ValidatePodLogOptions), pod/strategy.go LogLocation (the container),
  // apimachinery pkg/runtime/conversion.go Convert_Slice_string_To_bool (follow=True is a follow).
  it('pods/log: tailLines, container, follow and previous reach the node as kube-apiserver reads them', async () => {
    const core = kc.makeApiClient(CoreV1Api);
    await core.createNamespacedPod({
      namespace: 'default',
      body: {
        metadata: { name: 'pair' },
        spec: {
          containers: [
            { name: 'main', image: 'busybox' },
            { name: 'side', image: 'busybox' },
          ],
        },
      },
    });
    // Given a pod with two containers, When its log is read with the container and tailLines, Then those lines come
    const text = await core.readNamespacedPodLog({
      namespace: 'default',
      name: 'pair',
      container: 'side',
      tailLines: 2,
    });
    expect(text).toBe('side: two\nside: three\n');
    // When the container is left out, Then it is the 400 naming the choices
    const none = await rawRequest(cluster, cluster.adminToken, 'GET', '/api/v1/namespaces/default/pods/pair/log');
    expect(none.status).toBe(400);
    expect(none.body.message).toBe('a container name must be specified for pod pair, choose one of: [main side]');
    // When tailLines is negative, Then it is ValidatePodLogOptions' 422
    const negative = await rawRequest(
      cluster,
      cluster.adminToken,
      'GET',
      '/api/v1/namespaces/default/pods/box/log?tailLines=-1',
    );
    expect(negative.status).toBe(422);
    expect(negative.body.message).toBe(
      'PodLogOptions "box" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0',
    );
    // When follow and previous are spelt as python3-kubernetes spells them, Then the node is asked to follow
    logRequests.length = 0;
    const py = await rawRequest(
      cluster,
      cluster.adminToken,
      'GET',
      '/api/v1/namespaces/default/pods/box/log?follow=True&previous=True',
    );
    expect(py.status).toBe(200);
    expect(logRequests.at(-1)).toMatchObject({ container: 'main', follow: true, previous: true });
    await rawRequest(cluster, cluster.adminToken, 'GET', '/api/v1/namespaces/default/pods/box/log?follow=false');
    expect(logRequests.at(-1)).toMatchObject({ follow: false, previous: false });
  });

  for (const v of ['1.31', '1.32', '1.33']) {
    it(`kubectl ${v} exec and logs go through the same node runtime`, async () => {
      const env = { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: home };
      const k = `/usr/lib/google-cloud-sdk/bin/kubectl.${v}`;
      const ex = await runFile(k, ['exec', 'box', '--', 'sh', '-c', 'echo exec-ok'], { env });
      expect(ex.stdout).toBe('exec-ok\n');
      const failed = await runFile(k, ['exec', 'box', '--', 'sh', '-c', 'exit 7'], { env }).catch((e) => e);
      expect(failed.code).toBe(7);
      const logs = await runFile(k, ['logs', 'box', '--tail=2'], { env });
      expect(logs.stdout).toBe('main: two\nmain: three\n');
    });
  }
});
