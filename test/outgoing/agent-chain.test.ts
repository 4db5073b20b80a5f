// The CLI's outgoing chain against the real agent bundle in a real pod netns (no Kubernetes): local proxy + Node
// preload + remote files + port-forward listeners over the mux dialer, with the pod's DNS (resolv.conf search domains).
import { execFile, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMuxDialer } from '../../cli/outgoing/mux-dialer.js';
import { startOutgoing, type OutgoingSession } from '../../cli/outgoing/session.js';
import { parseForward, startForwards } from '../../cli/services/port-forward.js';
import { NullReporter } from '../../cli/ui/null.js';
import { PodNet, type Proc } from '../../testkit/netns.js';
import { connectSession, type TestSession } from '../../testkit/session-client.js';
import { requireRoot } from '../../testkit/root.js';

const run = requireRoot('outgoing chain with the real agent');
const exec = promisify(execFile);
const FETCH_CLIENT = join(import.meta.dirname, 'fixtures', 'fetch-client.mjs');

function runWithEnv(
  command: string,
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

function post(port: number, body: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/pf',
        agent: false,
        headers: { 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => resolve(Buffer.concat(chunks).toString()));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe.runIf(run)('outgoing chain: proxy, preload, remote files and forwards over the real agent', () => {
  const net = new PodNet();
  let pod: Proc;
  let session: TestSession;
  let outgoing: OutgoingSession;
  let env: Record<string, string>;

  beforeAll(async () => {
    await net.setup();
    // Given a pod whose app listens on :3000, and a cluster DNS that knows api.team.svc.cluster.local (its search
    // domain)
    pod = await net.startPod({ port: 3000, name: 'api-pod' });
    await net.startDns({ 'api.team.svc.cluster.local': net.podIP });
    const agent = await net.startAgent();
    session = await connectSession(await net.relay(net.podNs, '127.0.0.1', agent.port));
    // And devop's outgoing side on that session, with the pod's /etc/hosts as a remote file
    outgoing = await startOutgoing({ dialer: createMuxDialer(session.mux), remoteFiles: ['/etc/hosts'] });
    env = outgoing.env({});
  });
  afterAll(async () => {
    await outgoing?.close();
    session?.mux.close('test over');
    await net.teardown();
  });

  it('curl through the proxy env reaches the pod app by short name and by full name, from the pod', async () => {
    // (Without the proxy env curl would ask this machine's resolver: check it first.)
    expect(env.http_proxy).toMatch(/^http:\/\/devop:[0-9a-f]{48}@127\.0\.0\.1:\d+$/);
    expect(env.ALL_PROXY).toMatch(/^socks5h:\/\/devop:[0-9a-f]{48}@127\.0\.0\.1:\d+$/);
    for (const url of ['http://api:3000/curl-short', 'http://api.team.svc.cluster.local:3000/curl-full']) {
      const { stdout } = await exec('curl', ['-sS', '--max-time', '20', url], {
        env: { ...env, PATH: process.env.PATH },
      });
      expect(stdout).toBe(`api-pod: GET /${url.split('/').pop()}`);
    }
    const viaSocks = await exec(
      'curl',
      ['-sS', '--max-time', '20', '-x', env.ALL_PROXY, 'http://api:3000/curl-socks'],
      { env: { PATH: process.env.PATH } },
    );
    expect(viaSocks.stdout).toBe('api-pod: GET /curl-socks');
    // The pod's app saw the connections come from the pod itself (they were made in its netns)
    expect(net.podRequests(pod)).toEqual(
      expect.arrayContaining([`REQ GET /curl-short from ${net.podIP}`, `REQ GET /curl-full from ${net.podIP}`]),
    );
  });

  it('a Node program with plain fetch reaches the pod app by name; an unknown name is ENOTFOUND', async () => {
    const result = await runWithEnv(
      process.execPath,
      [
        FETCH_CLIENT,
        'http://api:3000/node-short',
        'http://api.team.svc.cluster.local:3000/node-full',
        'http://nosuch:3000/',
      ],
      env,
    );
    expect(result.stderr).toBe('');
    const lines = result.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { status?: number; body?: string; error?: string });
    expect(lines.map((line) => line.body ?? line.error)).toEqual([
      'api-pod: GET /node-short',
      'api-pod: GET /node-full',
      'ENOTFOUND',
    ]);
    expect(net.podRequests(pod)).toContain(`REQ GET /node-full from ${net.podIP}`);
  });

  it('an excluded address is dialled from this machine, the same address not excluded from the pod', async () => {
    const excluded = await startOutgoing({ dialer: createMuxDialer(session.mux), exclude: [net.podIP] });
    try {
      const url = `http://${net.podIP}:3000/excluded`;
      const local = await runWithEnv(process.execPath, [FETCH_CLIENT, url], excluded.env({}));
      expect(JSON.parse(local.stdout).body).toBe('api-pod: GET /excluded');
      const routed = await runWithEnv(process.execPath, [FETCH_CLIENT, `http://${net.podIP}:3000/routed`], env);
      expect(JSON.parse(routed.stdout).body).toBe('api-pod: GET /routed');
      // This machine reaches the pod over the bridge, from the node address; the routed request starts in the pod
      expect(net.podRequests(pod)).toEqual(
        expect.arrayContaining([`REQ GET /excluded from ${net.nodeIP}`, `REQ GET /routed from ${net.podIP}`]),
      );
    } finally {
      await excluded.close();
    }
  });

  it('the pod-only /etc/hosts is under DEVOP_ROOT with its content', () => {
    const copy = readFileSync(join(env.DEVOP_ROOT, 'etc', 'hosts'), 'utf8');
    expect(copy).toContain(`${net.podIP} api-pod`);
    expect(copy).toContain('10.77.0.7 pinned.example');
    expect(readFileSync('/etc/hosts', 'utf8')).not.toContain('pinned.example');
  });

  it('forwards: 100 parallel connections to api:3000 are byte-exact', async () => {
    const forwarding = await startForwards(
      createMuxDialer(session.mux),
      [parseForward('0:api:3000')],
      '127.0.0.1',
      new NullReporter(),
    );
    try {
      const bodies = Array.from({ length: 100 }, () => randomBytes(16 * 1024).toString('hex'));
      const answers = await Promise.all(bodies.map((body) => post(forwarding.ports[0], body)));
      const digest = (text: string): string => createHash('sha256').update(text).digest('hex');
      expect(answers.map(digest)).toEqual(bodies.map((body) => digest(`api-pod: POST /pf body=${body}`)));
    } finally {
      await forwarding.stop();
    }
  });

  it('closing the session removes DEVOP_ROOT', async () => {
    const root = env.DEVOP_ROOT;
    expect(existsSync(root)).toBe(true);
    await outgoing.close();
    expect(existsSync(root)).toBe(false);
  });
});
