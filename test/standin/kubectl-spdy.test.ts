// kubectl 1.27 and 1.29 exec and attach against the stand-in: they speak plain SPDY/3.1 (no WebSocket yet), answered as
// the kubelet does — the X-Stream-Protocol-Version handshake (apimachinery pkg/util/httpstream/httpstream.go
// Handshake, httpstream/spdy/upgrade.go), client-opened streams (moby/spdystream connection.go), the v4 error stream's
// Status with the exit code (kubernetes pkg/kubelet/cri/streaming/remotecommand/httpstream.go v4WriteStatusFunc,
// exec.go NonZeroExitCode). The "pod" runs its commands as local processes (no kubelet needed).
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { type RequestOptions, request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { CoreV1Api, KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { localRuntime } from '../../standin/local-runtime.js';
import type { ExecProcess, ExecRequest } from '../../standin/node-runtime.js';

const KUBECTL_DIR = '/usr/lib/google-cloud-sdk/bin';
/** kubectl's own timeout: a hang (a stream never ended) fails the test instead of stalling it. */
const KUBECTL_TIMEOUT_MS = 30_000;
/** Room for the largest output a test asks for (execFile cuts a command off at 1 MiB by default). */
const OUTPUT_LIMIT = 16 * 1024 * 1024;

let cluster: ClusterHandle;
let home: string;
const execs: ExecRequest[] = [];
/** Terminal sizes the resize stream delivered to a command: [cols, rows]. */
const resizes: [number, number][] = [];

/** The pod's commands run here, with pipes as a container's would have. */
async function localExec(req: ExecRequest): Promise<ExecProcess> {
  execs.push(req);
  const child = spawn(req.command[0], req.command.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
  const ended = new Promise<{ exitCode: number; signal?: string }>((resolve) =>
    child.on('close', (code, signal) => resolve({ exitCode: code ?? 0, signal: signal ?? undefined })),
  );
  if (!req.stdin) child.stdin.end();
  return {
    stdin: req.stdin ? child.stdin : null,
    stdout: child.stdout,
    stderr: child.stderr,
    resize: (cols, rows) => resizes.push([cols, rows]),
    wait: () => ended,
    kill: () => child.kill('SIGKILL'),
  };
}

function kubectl(
  v: string,
  args: string[],
  input?: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(
      `${KUBECTL_DIR}/kubectl.${v}`,
      args,
      {
        env: { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: home },
        timeout: KUBECTL_TIMEOUT_MS,
        maxBuffer: OUTPUT_LIMIT,
      },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : null) : 0;
        resolve({ code, stdout, stderr });
      },
    );
    if (input !== undefined) child.stdin?.end(input);
    else child.stdin?.end();
  });
}

beforeAll(async () => {
  home = mkdtempSync(join(tmpdir(), 'devop-kubectl-spdy-'));
  cluster = await startCluster({ kubelet: false });
  cluster.controlPlane.attachNode(
    localRuntime(() => undefined, {
      exec: localExec,
      // What the container prints from now on (attach shows its output, as `logs -f --tail=0` would).
      logs: async () => Readable.from(['line from the container\n']),
    }),
  );
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  const core = kc.makeApiClient(CoreV1Api);
  await core.createNamespacedPod({
    namespace: 'default',
    body: { metadata: { name: 'box' }, spec: { containers: [{ name: 'main', image: 'busybox' }] } },
  });
  // kubectl exec and attach check that the pod runs (no kubelet here to say so).
  await core.patchNamespacedPodStatus(
    { name: 'box', namespace: 'default', body: { status: { phase: 'Running' } } },
    setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
  );
});

afterAll(async () => {
  await cluster?.stop();
  if (home) rmSync(home, { recursive: true, force: true });
});

describe('kubectl exec and attach over plain SPDY (attach over WebSocket too)', () => {
  for (const v of ['1.27', '1.29']) {
    it(`kubectl ${v} exec: stdout and stderr apart, and the command's exit code`, async () => {
      // Given pod box, whose commands run as local processes
      // When kubectl exec runs a command that writes to both and exits 3
      const r = await kubectl(v, ['exec', 'box', '--', 'sh', '-c', 'echo out; echo err >&2; exit 3']);
      // Then each output arrives on its own stream, and the v4 error stream's NonZeroExitCode Status gives 3
      expect(r.stdout).toBe('out\n');
      expect(r.stderr).toContain('err\n');
      expect(r.code, r.stderr).toBe(3);
    });
  }

  it('kubectl 1.27 exec: 2 MB of output arrive whole and in order', async () => {
    // Given a command that prints 300 000 numbered lines (about 2 MB, many data frames)
    // When kubectl exec runs it
    const r = await kubectl('1.27', ['exec', 'box', '--', 'seq', '1', '300000']);
    // Then every line arrives, in order, before kubectl ends
    const lines = r.stdout.split('\n');
    expect(lines.length).toBe(300_001);
    expect(lines.every((l, i) => i === 300_000 || l === String(i + 1))).toBe(true);
    expect(r.code, r.stderr).toBe(0);
  });

  it("kubectl 1.27 exec -i: stdin reaches the command and its end closes the command's stdin", async () => {
    // Given a command that echoes its stdin, then says it saw the end
    // When kubectl exec -i gives it two lines and EOF
    const r = await kubectl('1.27', ['exec', '-i', 'box', '--', 'sh', '-c', 'cat; echo end-of-input'], 'one\ntwo\n');
    // Then both lines come back, then the end, and the exit code is 0 (a Success Status)
    expect(r.stdout).toBe('one\ntwo\nend-of-input\n');
    expect(r.code, r.stderr).toBe(0);
    expect(execs.at(-1)).toMatchObject({ stdin: true, tty: false });
  });

  it('kubectl 1.27 exec -it: the terminal size reaches the command over the resize stream', async () => {
    // Given kubectl in a 100x30 terminal (script(1) gives it one)
    const line = `stty cols 100 rows 30; ${KUBECTL_DIR}/kubectl.1.27 exec -it box -- sh -c 'sleep 1; echo tty-done'`;
    // When it runs a command with a TTY
    const r = await new Promise<{ code: number | null; out: string }>((resolve) => {
      execFile(
        'script',
        ['-qec', line, '/dev/null'],
        { env: { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: home }, timeout: KUBECTL_TIMEOUT_MS },
        (err, stdout) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : null) : 0, out: stdout }),
      );
    });
    // Then the command ran with a TTY and was told the terminal's size
    expect(r.out).toContain('tty-done');
    expect(r.code, r.out).toBe(0);
    expect(execs.at(-1)).toMatchObject({ tty: true });
    expect(resizes).toContainEqual([100, 30]);
  });

  // 1.33 attaches over WebSocket (v5.channel.k8s.io): the same command behind both protocols
  for (const v of ['1.27', '1.33']) {
    it(`kubectl ${v} attach: the container's output until it ends`, async () => {
      // Given a container that prints a line and ends
      // When kubectl attach follows it
      const r = await kubectl(v, ['attach', 'box']);
      // Then its line arrives and kubectl ends cleanly
      expect(r.stdout).toContain('line from the container\n');
      expect(r.code, r.stderr).toBe(0);
    });
  }

  it('kubectl 1.27 attach -i: refused in one line naming exec -i (the containers keep no stdin open)', async () => {
    // Given a container whose stdin the stand-in does not keep open
    // When kubectl attach asks for stdin
    const r = await kubectl('1.27', ['attach', '-i', 'box'], 'x\n');
    // Then the error stream's Status says so, and kubectl fails with it
    expect(r.stderr).toContain('attaches to the output of container "main" only');
    expect(r.stderr).toContain('kubectl exec -i');
    expect(r.code).not.toBe(0);
  });

  it("no protocol in common: 403 as the kubelet's, naming the accepted versions", async () => {
    // Given a client offering only a protocol nobody has
    // When it asks to upgrade
    const answer = await refusedUpgrade('exec?command=true&stdout=true', 'v9.channel.k8s.io');
    // Then 403 names both sides' protocols, and the header lists what the server accepts
    expect(answer.status).toBe(403);
    expect(answer.body).toContain(
      'unable to negotiate protocol: client supports [v9.channel.k8s.io], server accepts [v4.channel.k8s.io',
    );
    expect(String(answer.accepted)).toContain('v4.channel.k8s.io');
  });

  it('an exec asking for none of stdin, stdout, stderr: 400 before the upgrade, as the kubelet', async () => {
    // Given an exec request with no stream wanted
    // When it asks to upgrade
    const answer = await refusedUpgrade('exec?command=true', 'v4.channel.k8s.io');
    // Then the kubelet's NewOptions refusal comes back
    expect(answer.status).toBe(400);
    expect(answer.body).toContain('you must specify at least 1 of stdin, stdout, stderr');
  });
});

/** A SPDY/3.1 upgrade of pod box's subresource that the server is expected to refuse: its status, body and header. */
async function refusedUpgrade(
  subresource: string,
  protocol: string,
): Promise<{ status?: number; accepted: unknown; body: string }> {
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  const url = new URL(`${kc.getCurrentCluster()?.server}/api/v1/namespaces/default/pods/box/${subresource}`);
  const opts: RequestOptions = {};
  await kc.applyToHTTPSOptions(opts);
  return new Promise((resolve, reject) => {
    const req = request(url, {
      ...opts,
      method: 'POST',
      headers: { ...opts.headers, Connection: 'Upgrade', Upgrade: 'SPDY/3.1', 'X-Stream-Protocol-Version': protocol },
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () =>
        resolve({ status: res.statusCode, accepted: res.headers['x-accepted-stream-protocol-versions'], body }),
      );
    });
    req.on('upgrade', () => reject(new Error('upgraded')));
    req.on('error', reject);
    req.end();
  });
}
