// gRPC end to end on the stand-in with the real agent image: a gRPC server in a pod (devop.test/grpc-echo), the same
// server as the local command under a filtered `devop exec --steal`, and a gRPC client in another pod whose calls on
// ONE channel (one HTTP/2 connection) are routed call by call: the four call kinds, a deadline, a cancellation,
// grpc-status and custom trailers, by metadata and by the gRPC method's path.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { standinOnly, type TargetCluster } from '../../testkit/target-cluster.js';
import { type DevopRun, ROOT, devopExec, startE2ETarget } from '../../testkit/e2e.js';
import { pidsOfContainer } from '../../testkit/pods.js';
import { freePort } from '../../testkit/sockets.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('e2e gRPC');
const it = standinOnly('devop.test/grpc-echo is built into the stand-in node');

const GRPC_ECHO = join(ROOT, 'standin', 'images', 'grpc-echo.mjs');
const GRPC_PORT = 50051;
/** gRPC status codes (grpc/doc/statuscodes.md). */
const OK = 0;
const CANCELLED = 1;
const DEADLINE_EXCEEDED = 4;
const PERMISSION_DENIED = 7;

type Kind = 'Unary' | 'ServerStream' | 'ClientStream' | 'Bidi';
interface Call {
  method: Kind;
  metadata?: Record<string, string>;
  requests?: { text?: string; sleepMs?: number; count?: number; fail?: number }[];
  deadlineMs?: number;
  cancelAfterMs?: number;
}
interface CallResult {
  responses: { from: string; text: string }[];
  code: number;
  details: string;
  trailers: Record<string, string>;
}
/** Who answered: the one name every response and the x-served-by trailer carry. */
const from = (r: CallResult): string => String(r.trailers['x-served-by'] ?? r.responses[0]?.from ?? `code ${r.code}`);

/** The gRPC client of grpc-echo.mjs run in a pod's network namespace: one channel per target for all its calls. */
class PodGrpcClient {
  private readonly pending = new Map<number, (r: CallResult) => void>();
  private nextId = 0;
  private buffered = '';

  constructor(private readonly child: ChildProcess) {
    child.stdout?.setEncoding('utf8').on('data', (text: string) => {
      this.buffered += text;
      for (let i = this.buffered.indexOf('\n'); i >= 0; i = this.buffered.indexOf('\n')) {
        const line = JSON.parse(this.buffered.slice(0, i)) as CallResult & { id: number };
        this.buffered = this.buffered.slice(i + 1);
        this.pending.get(line.id)?.(line);
        this.pending.delete(line.id);
      }
    });
  }

  call(target: string, call: Call): Promise<CallResult> {
    const id = ++this.nextId;
    return new Promise((resolve) => {
      this.pending.set(id, resolve);
      this.child.stdin?.write(`${JSON.stringify({ id, target, ...call })}\n`);
    });
  }

  close(): void {
    this.child.stdin?.end();
    this.child.kill();
  }
}

async function runningContainer(core: CoreV1Api, namespace: string, name: string): Promise<string> {
  return waitFor(`pod ${name} to run`, async () => {
    const pod = await core.readNamespacedPod({ name, namespace });
    const status = pod.status?.containerStatuses?.[0];
    return status?.state?.running && status.containerID ? status.containerID.replace(/^[a-z]+:\/\//, '') : undefined;
  });
}

/** Lines grpc-echo printed: the local one's in devop's stdout, the pod's in its log. */
function seen(output: string): { seen: string; method?: string; dev?: string | null; from?: string }[] {
  return output
    .split('\n')
    .filter((l) => l.startsWith('{"seen":'))
    .map((l) => JSON.parse(l));
}

describe('devop exec: gRPC through a filtered steal', () => {
  let cluster: TargetCluster;
  let core: CoreV1Api;
  let namespace: string;
  let podIP: string;
  let client: PodGrpcClient;
  const runs: DevopRun[] = [];
  const podLog = async (): Promise<string> =>
    String(await core.readNamespacedPodLog({ name: 'grpc-server', namespace, container: 'grpc' }));

  /** `devop exec --steal` of the server pod's gRPC port for grpc-echo named "local"; resolves once devop is ready. */
  async function stealFor(filter: string[]): Promise<DevopRun> {
    const local = await freePort();
    const run = devopExec(
      cluster,
      ['-t', 'pod/grpc-server', '--steal', '-p', `${GRPC_PORT}:${local}`, ...filter],
      [process.execPath, GRPC_ECHO, 'serve', 'local', String(local), '127.0.0.1'],
    );
    runs.push(run);
    await run.ready();
    await run.waitForStdout(/"seen":"listening"/);
    return run;
  }

  beforeAll(async () => {
    const env = await startE2ETarget('e2e-grpc');
    ({ cluster, core, namespace } = env);
    const grpcPod = (name: string, command?: string[]) =>
      core.createNamespacedPod({
        namespace,
        body: {
          metadata: { name, labels: { app: name } },
          spec: {
            containers: [
              {
                name: 'grpc',
                image: 'devop.test/grpc-echo',
                ...(command ? { command } : { args: ['serve', 'pod'] }),
                ports: [{ containerPort: GRPC_PORT }],
              },
            ],
          },
        },
      });
    await Promise.all([grpcPod('grpc-server'), grpcPod('grpc-client', ['sleep', '100000'])]);
    podIP = await waitFor('the gRPC server pod to listen', async () => {
      const ip = (await core.readNamespacedPod({ name: 'grpc-server', namespace })).status?.podIP;
      return ip && (await podLog().catch(() => '')).includes('"seen":"listening"') ? ip : undefined;
    });
    // The client's process runs in the client pod's network namespace (nsenter), as testkit's startPodClient does.
    const pid = await waitFor(`the client pod's process`, async () => {
      const id = await runningContainer(core, namespace, 'grpc-client');
      return (await pidsOfContainer(id))[0];
    });
    client = new PodGrpcClient(
      spawn('nsenter', ['-t', String(pid), '-n', process.execPath, GRPC_ECHO, 'client'], {
        stdio: ['pipe', 'pipe', 'inherit'],
      }),
    );
  });

  afterAll(async () => {
    client?.close();
    await Promise.all(runs.map((r) => r.dispose()));
    await cluster?.stop();
  });

  it('by metadata: x-dev: me calls reach the local server, the others the pod, on one client connection, all four kinds', async () => {
    // Given devop steals the gRPC port for calls carrying x-dev: me
    const run = await stealFor(['--http-header-filter', 'x-dev: ^me$']);
    const target = `${podIP}:${GRPC_PORT}`;
    const me = { 'x-dev': 'me' };
    const texts = [{ text: 'a' }, { text: 'b' }];
    // When the client makes every kind of call, with and without the metadata, interleaved on its one channel
    const [unaryMe, unaryPod, serverMe, serverPod, clientMe, clientPod, bidiMe, bidiPod] = await Promise.all([
      client.call(target, { method: 'Unary', metadata: me, requests: [{ text: 'hi' }] }),
      client.call(target, { method: 'Unary', requests: [{ text: 'hi' }] }),
      client.call(target, { method: 'ServerStream', metadata: me, requests: [{ count: 3 }] }),
      client.call(target, { method: 'ServerStream', requests: [{ count: 3 }] }),
      client.call(target, { method: 'ClientStream', metadata: me, requests: texts }),
      client.call(target, { method: 'ClientStream', requests: texts }),
      client.call(target, { method: 'Bidi', metadata: me, requests: texts }),
      client.call(target, { method: 'Bidi', requests: texts }),
    ]);
    // Then the matched calls are answered whole by the local server, the others by the pod, trailers included
    for (const r of [unaryMe, serverMe, clientMe, bidiMe]) expect([r.code, from(r)], run.output).toEqual([OK, 'local']);
    for (const r of [unaryPod, serverPod, clientPod, bidiPod]) expect([r.code, from(r)]).toEqual([OK, 'pod']);
    expect(unaryMe.responses).toEqual([{ from: 'local', text: 'hi' }]);
    expect(serverMe.responses.map((m) => m.text)).toEqual(['0', '1', '2']);
    expect(serverPod.responses.map((m) => m.text)).toEqual(['0', '1', '2']);
    expect(clientMe.responses).toEqual([{ from: 'local', text: 'a,b' }]);
    expect(bidiMe.responses).toEqual([
      { from: 'local', text: 'a' },
      { from: 'local', text: 'b' },
    ]);
    expect(bidiPod.responses.map((m) => m.from)).toEqual(['pod', 'pod']);
    // And the local server saw only calls with the metadata
    expect(
      seen(run.stdout)
        .filter((e) => e.seen === 'call')
        .map((e) => e.dev),
    ).toEqual(['me', 'me', 'me', 'me']);

    // When a call fails on either side with a status and trailing metadata
    const [failMe, failPod] = await Promise.all([
      client.call(target, { method: 'Unary', metadata: me, requests: [{ fail: PERMISSION_DENIED }] }),
      client.call(target, { method: 'Unary', requests: [{ fail: PERMISSION_DENIED }] }),
    ]);
    // Then grpc-status, grpc-message and the custom trailer arrive intact
    expect(failMe).toMatchObject({ code: PERMISSION_DENIED, details: 'failed on local' });
    expect(failMe.trailers['x-served-by']).toBe('local');
    expect(failPod).toMatchObject({ code: PERMISSION_DENIED, details: 'failed on pod' });
    expect(failPod.trailers['x-served-by']).toBe('pod');
    // And devop's traffic lines name each call, its grpc-status and where it went
    await run.waitForStderr(/^devop: OK \(0\) gRPC devop\.test\.Echo\/Bidi → local :50051 \(\d+ ms, \d+ B\)$/m);
    await run.waitForStderr(/^devop: OK \(0\) gRPC devop\.test\.Echo\/Bidi → pod :50051 /m);
    await run.waitForStderr(
      /^devop: PERMISSION_DENIED \(7\) gRPC devop\.test\.Echo\/Unary → local :50051 \(.*\): failed on local$/m,
    );

    // When a matched call outlives its deadline, and the client cancels a matched server stream
    const [late, cancelled] = await Promise.all([
      client.call(target, { method: 'Unary', metadata: me, requests: [{ sleepMs: 5000 }], deadlineMs: 500 }),
      client.call(target, {
        method: 'ServerStream',
        metadata: me,
        requests: [{ count: 1000, sleepMs: 50 }],
        cancelAfterMs: 500,
      }),
    ]);
    // Then the client gets DEADLINE_EXCEEDED and CANCELLED, and the local server sees both calls cancelled
    expect(late.code).toBe(DEADLINE_EXCEEDED);
    expect(cancelled.code).toBe(CANCELLED);
    expect(cancelled.responses.length).toBeGreaterThan(0);
    await waitFor('the local server to see both calls cancelled', () => {
      const methods = seen(run.stdout)
        .filter((e) => e.seen === 'cancelled')
        .map((e) => e.method);
      return methods.includes('Unary') && methods.includes('ServerStream');
    });

    // When the same happens to calls that go to the pod
    const [latePod, cancelledPod] = await Promise.all([
      client.call(target, { method: 'Unary', requests: [{ sleepMs: 5000 }], deadlineMs: 500 }),
      client.call(target, { method: 'ServerStream', requests: [{ count: 1000, sleepMs: 50 }], cancelAfterMs: 500 }),
    ]);
    // Then the pod's server sees them cancelled too
    expect([latePod.code, cancelledPod.code]).toEqual([DEADLINE_EXCEEDED, CANCELLED]);
    await waitFor('the pod to see both calls cancelled', async () => {
      const methods = seen(await podLog())
        .filter((e) => e.seen === 'cancelled')
        .map((e) => e.method);
      return methods.includes('Unary') && methods.includes('ServerStream');
    });
    // And all of these calls came on one connection from the client, which the agent routed stream by stream
    const job = (await run.waitForStderr(/started Job (devop-agent-[a-z0-9]+)/))[1];
    const agentPods = await core.listNamespacedPod({ namespace, labelSelector: `job-name=${job}` });
    const agentLog = String(
      await core.readNamespacedPodLog({ name: agentPods.items[0]?.metadata?.name ?? job, namespace }),
    );
    expect(agentLog.match(/HTTP\/2 connection, routed per stream/g) ?? [], agentLog).toHaveLength(1);
    await run.dispose();
  }, 120_000);

  it('by method: --http-path-filter on /devop.test.Echo/Unary steals that method only', async () => {
    // Given devop steals only the Unary method's path
    const run = await stealFor(['--http-path-filter', '^/devop\\.test\\.Echo/Unary$']);
    const target = `${podIP}:${GRPC_PORT}`;
    // When the client calls Unary and Bidi
    const [unary, bidi] = await Promise.all([
      client.call(target, { method: 'Unary', requests: [{ text: 'x' }] }),
      client.call(target, { method: 'Bidi', requests: [{ text: 'x' }] }),
    ]);
    // Then Unary reaches the local server and Bidi the pod
    expect([from(unary), from(bidi)], run.output).toEqual(['local', 'pod']);
    await run.dispose();
  }, 60_000);
});
