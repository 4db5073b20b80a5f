// HTTP/2 without TLS (h2c) through a filtered `devop exec --steal` on the stand-in with the real agent image: curl with
// prior knowledge from another pod, the JSON body filter (and --record) on an HTTP/2 stream, 10 MiB each way on a
// stolen and on an unmatched stream of one connection, and a slow reader whose stream window holds the agent's memory.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import type { Har } from '../../cli/record/har.js';
import { requireRoot } from '../../testkit/root.js';
import { standinOnly, type TargetCluster } from '../../testkit/target-cluster.js';
import { type DevopRun, ROOT, devopExec, startE2ETarget } from '../../testkit/e2e.js';
import { pidsOfContainer } from '../../testkit/pods.js';
import { freePort } from '../../testkit/sockets.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('e2e HTTP/2');
const it = standinOnly('the client runs in a pod by nsenter from the stand-in node');

const execFileAsync = promisify(execFile);
const H2C_BULK = join(ROOT, 'testkit', 'fixtures', 'h2c-bulk.mjs');
const PORT = 8082;
const MiB = 1024 * 1024;

/** The sha256 of `size` bytes of h2c-bulk.mjs's pattern. */
function patternSha256(size: number): string {
  const hash = createHash('sha256');
  const block = Buffer.alloc(64 * 1024, 'devop-h2c-');
  for (let left = size; left > 0; left -= block.length)
    hash.update(left >= block.length ? block : block.subarray(0, left));
  return hash.digest('hex');
}

interface Result {
  id: number;
  status?: number;
  from?: string;
  bytes?: number;
  sha256?: string;
  paused?: number;
  error?: string;
}

/** h2c-bulk.mjs's client in the client pod's network namespace: one h2c connection per origin for all its requests. */
class PodH2cClient {
  private readonly listeners = new Map<number, (r: Result) => void>();
  private nextId = 0;
  private buffered = '';

  constructor(private readonly child: ChildProcess) {
    child.stdout?.setEncoding('utf8').on('data', (text: string) => {
      this.buffered += text;
      for (let i = this.buffered.indexOf('\n'); i >= 0; i = this.buffered.indexOf('\n')) {
        const line = JSON.parse(this.buffered.slice(0, i)) as Result;
        this.buffered = this.buffered.slice(i + 1);
        this.listeners.get(line.id)?.(line);
      }
    });
  }

  /** Sends one request; `onPaused` hears when a slow reader stopped reading. Resolves with its end (or error). */
  request(
    req: { url: string; method?: string; headers?: Record<string, string>; upload?: number; pauseMs?: number },
    onPaused?: (bytes: number) => void,
  ): Promise<Result> {
    const id = ++this.nextId;
    return new Promise((resolve) => {
      this.listeners.set(id, (r) => {
        if (r.paused !== undefined) return onPaused?.(r.paused);
        this.listeners.delete(id);
        resolve(r);
      });
      this.child.stdin?.write(`${JSON.stringify({ id, ...req })}\n`);
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

/** Resident memory of a process, in bytes (/proc/<pid>/status VmRSS). */
async function rssOf(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1] ?? 0) * 1024;
}

describe('devop exec: HTTP/2 (h2c) through a filtered steal', () => {
  let cluster: TargetCluster;
  let core: CoreV1Api;
  let namespace: string;
  let podIP: string;
  let clientPid: number;
  let client: PodH2cClient;
  const runs: DevopRun[] = [];

  /** `devop exec --steal` of the server pod's port for h2c-bulk.mjs named "local"; resolves once devop is ready. */
  async function stealFor(filter: string[]): Promise<DevopRun> {
    const local = await freePort();
    const run = devopExec(
      cluster,
      ['-t', 'pod/h2c-server', '--steal', '-p', `${PORT}:${local}`, ...filter],
      [process.execPath, H2C_BULK, 'serve', String(local), 'local'],
    );
    runs.push(run);
    await run.ready();
    await run.waitForStdout(/h2c local listening/);
    return run;
  }

  /**
   * curl in the client pod's network namespace (the node's curl: the pod image has none), HTTP/2 prior knowledge. Run
   * asynchronously: the stand-in's API server, which carries devop's tunnel, lives in this process.
   */
  async function curl(args: string[], run?: DevopRun): Promise<string> {
    const nsenter = ['-t', String(clientPid), '-n', 'curl', '-sS', '--http2-prior-knowledge', '--max-time', '20'];
    try {
      return (await execFileAsync('nsenter', [...nsenter, ...args], { encoding: 'utf8' })).stdout;
    } catch (err) {
      throw new Error(`curl ${args.join(' ')}: ${(err as { stderr?: string }).stderr}${run ? run.output : ''}`);
    }
  }

  /** The agent's resident process (beside it in its container: devop-nft and the like). */
  async function agentPid(run: DevopRun): Promise<number> {
    const job = (await run.waitForStderr(/(?:started|reused) Job (devop-agent-[a-z0-9]+)/))[1];
    const pods = await core.listNamespacedPod({ namespace, labelSelector: `job-name=${job}` });
    const id = await runningContainer(core, namespace, pods.items[0]?.metadata?.name ?? job);
    const pids = await pidsOfContainer(id);
    const node = pids.find((pid) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('/opt/devop/agent.js'));
    if (!node) throw new Error(`no node process in the agent's container (pids ${pids.join(', ')})`);
    return node;
  }

  beforeAll(async () => {
    const env = await startE2ETarget('e2e-http2');
    ({ cluster, core, namespace } = env);
    await Promise.all([
      core.createNamespacedPod({
        namespace,
        body: {
          metadata: { name: 'h2c-server' },
          spec: {
            containers: [
              {
                name: 'h2c',
                image: 'devop.test/shell',
                command: ['node', '--input-type=module', '-e', readFileSync(H2C_BULK, 'utf8')],
                env: [
                  { name: 'H2C_MODE', value: 'serve' },
                  { name: 'H2C_PORT', value: String(PORT) },
                  { name: 'H2C_NAME', value: 'pod' },
                ],
                ports: [{ containerPort: PORT }],
              },
            ],
          },
        },
      }),
      core.createNamespacedPod({
        namespace,
        body: {
          metadata: { name: 'h2c-client' },
          spec: {
            containers: [{ name: 'client', image: 'devop.test/shell', command: ['sh', '-c', 'exec sleep 1e6'] }],
          },
        },
      }),
    ]);
    podIP = await waitFor('the h2c server pod to listen', async () => {
      const ip = (await core.readNamespacedPod({ name: 'h2c-server', namespace })).status?.podIP;
      const log = await core.readNamespacedPodLog({ name: 'h2c-server', namespace }).catch(() => '');
      return ip && String(log).includes('h2c pod listening') ? ip : undefined;
    });
    clientPid = await waitFor(`the client pod's process`, async () => {
      const id = await runningContainer(core, namespace, 'h2c-client');
      return (await pidsOfContainer(id))[0];
    });
    client = new PodH2cClient(
      spawn('nsenter', ['-t', String(clientPid), '-n', process.execPath, H2C_BULK, 'client'], {
        stdio: ['pipe', 'pipe', 'inherit'],
      }),
    );
  });

  afterAll(async () => {
    client?.close();
    await Promise.all(runs.map((r) => r.dispose()));
    await cluster?.stop();
  });

  it('curl --http2-prior-knowledge: x-dev: me reaches the local command, the rest the pod; 10 MiB each way on both', async () => {
    // Given devop steals the port's HTTP/2 streams that carry x-dev: me
    const run = await stealFor(['--http-header-filter', 'x-dev: ^me$']);
    const url = `http://${podIP}:${PORT}`;
    // When curl asks with and without the header, over HTTP/2 with prior knowledge
    const format = ['-w', '%{http_version}\n'];
    // Then the matched request is answered by the local command and the other by the pod, both over HTTP/2
    expect(await curl([...format, '-H', 'x-dev: me', `${url}/hello`], run), run.output).toBe('local: GET /hello\n2\n');
    expect(await curl([...format, `${url}/hello`])).toBe('pod: GET /hello\n2\n');

    // When one client connection uploads 10 MiB on a matched and on an unmatched stream at once, each echoed back
    const size = 10 * MiB;
    const [mine, theirs] = await Promise.all([
      client.request({ url: `${url}/echo`, method: 'POST', headers: { 'x-dev': 'me' }, upload: size }),
      client.request({ url: `${url}/echo`, method: 'POST', upload: size }),
    ]);
    // Then each side got all of it and sent all of it back, byte for byte
    const whole = { status: 200, bytes: size, sha256: patternSha256(size) };
    expect(mine, run.output).toMatchObject({ ...whole, from: 'local' });
    expect(theirs).toMatchObject({ ...whole, from: 'pod' });
    await run.dispose();
  }, 180_000);

  it('--http-body-filter and --record on HTTP/2: a matching JSON body reaches the local command, and the HAR', async () => {
    // Given devop steals the streams whose JSON body has user "me", and records them
    const har = join(mkdtempSync(join(tmpdir(), 'devop-e2e-h2-')), 'h2.har');
    const run = await stealFor(['--http-body-filter', '$.user: ^me$', '--record', har]);
    const url = `http://${podIP}:${PORT}/orders`;
    const json = ['-H', 'content-type: application/json', '-w', '\n%{http_version} %header{x-served-by}\n'];
    // When curl posts a body with user "me" and one with another user, over HTTP/2
    // Then the first is answered (its body echoed) by the local command and the second by the pod
    expect(await curl([...json, '-d', '{"user":"me","n":1}', url], run), run.output).toBe(
      '{"user":"me","n":1}\n2 local\n',
    );
    expect(await curl([...json, '-d', '{"user":"you"}', url])).toBe('{"user":"you"}\n2 pod\n');
    // And the HAR holds the stolen one as an HTTP/2 exchange, body and answer
    await run.dispose();
    const entries = (JSON.parse(readFileSync(har, 'utf8')) as Har).log.entries;
    expect(entries, run.output).toHaveLength(1);
    expect(entries[0].request).toMatchObject({
      method: 'POST',
      httpVersion: 'HTTP/2',
      postData: { mimeType: 'application/json', text: '{"user":"me","n":1}' },
    });
    expect(entries[0].response).toMatchObject({ status: 200, httpVersion: 'HTTP/2' });
    expect(entries[0].response.content.text).toBe('{"user":"me","n":1}');
  }, 120_000);

  it("a slow reader: the agent's memory stays within the stream windows while the client reads nothing", async () => {
    // Given devop steals the streams that carry x-dev: me, and the agent's resident memory once it has carried some
    const run = await stealFor(['--http-header-filter', 'x-dev: ^me$']);
    const pid = await agentPid(run);
    const url = `http://${podIP}:${PORT}`;
    for (const headers of [{ 'x-dev': 'me' }, {}] as Record<string, string>[])
      expect((await client.request({ url: `${url}/bytes/${MiB}`, headers })).bytes).toBe(MiB);
    const size = 48 * MiB;
    for (const [headers, from] of [
      [{ 'x-dev': 'me' }, 'local'],
      [{}, 'pod'],
    ] as const) {
      const before = await rssOf(pid);
      // When the client asks for 48 MiB (from the local command, then from the pod) and, after its first bytes, reads
      // nothing for 4 s
      const during: number[] = [];
      const result = await client.request({ url: `${url}/bytes/${size}`, headers, pauseMs: 4000 }, () => {
        for (const ms of [1000, 2000, 3000, 3800])
          setTimeout(() => void rssOf(pid).then((rss) => during.push(rss)), ms);
      });
      // Then it still gets all of it, and meanwhile the agent held no more than a few windows' worth: far less than
      // the 48 MiB the other side would have sent into it without flow control
      expect(result, run.output).toMatchObject({ status: 200, from, bytes: size, sha256: patternSha256(size) });
      expect(during).toHaveLength(4);
      // (measured: under 1 MiB; 22 MiB from the local command when the agent copied the answer without minding the
      // client's window)
      const most = Math.max(...during);
      expect(most - before, `${from}: agent RSS ${before} B before, at most ${most} B while paused`).toBeLessThan(
        8 * MiB,
      );
    }
    await run.dispose();
  }, 180_000);
});
