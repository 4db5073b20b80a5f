// `devop port-forward -R` end to end with the real agent image: a pod's port answered by a local server with no local
// command, restored on SIGINT and within 2 s of kill -9, listed by `devop sessions`; mirror copies; HTTP filters; -L
// beside -R; -R from devop.json; a local address nobody listens on; bad input in one line.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionRow } from '../../cli/services/sessions.js';
import { requireRoot } from '../../testkit/root.js';
import type { TargetCluster } from '../../testkit/target-cluster.js';
import {
  DevopRun,
  deployEcho,
  startE2ETarget,
  startPodClient,
  whoAnswered,
  type EchoDeployment,
  type PodClient,
} from '../../testkit/e2e.js';
import { httpGet } from '../../testkit/http.js';
import { waitFor } from '../../testkit/wait.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('e2e port-forward -R');

/** How soon the pod answers its own port again after devop ends, however it ends (DESIGN.md's failure rules). */
const RESTORE_MS = 2000;

/** A local server as a developer runs one: answers `local <path>` and remembers the paths it saw. */
async function startLocalServer(): Promise<{ port: number; seen: string[]; server: Server }> {
  const seen: string[] = [];
  const server = createServer((req, res) => {
    seen.push(req.url ?? '');
    res.end(`local ${req.url}`);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: (server.address() as { port: number }).port, seen, server };
}

describe('devop port-forward -R', () => {
  let cluster: TargetCluster;
  let namespace: string;
  let echo: EchoDeployment;
  /** Requests come from another pod: the host is the node, whose connections are not stolen (kubelet probes). */
  let client: PodClient;
  let local: Awaited<ReturnType<typeof startLocalServer>>;
  const runs: DevopRun[] = [];
  const devop = (args: string[], options: { cwd?: string } = {}): DevopRun => {
    const run = new DevopRun(['port-forward', '--kubeconfig', cluster.kubeconfigPath, ...args], options);
    runs.push(run);
    return run;
  };
  /** Waits until the pod answers its port itself; returns when, in ms since the epoch. */
  const podAnswersAgain = async (): Promise<number> => {
    let at = 0;
    await waitFor(
      'the pod to answer its own port again',
      async () => {
        const who = await client.who(echo.podIP, 8080).catch(() => 'error');
        if (who !== echo.podName) return undefined;
        at = Date.now();
        return true;
      },
      10_000,
    );
    return at;
  };

  beforeAll(async () => {
    const env = await startE2ETarget('e2e-port-forward-remote');
    cluster = env.cluster;
    namespace = env.namespace;
    [echo, client, local] = await Promise.all([deployEcho(env, 'echo'), startPodClient(env), startLocalServer()]);
  });

  afterAll(async () => {
    client?.close();
    await Promise.all(runs.map((r) => r.dispose()));
    local?.server.close();
    await cluster?.stop();
  });

  it("steals a pod's port to a local server, is listed by devop sessions, and gives it back on SIGINT", async () => {
    // Given the echo pod answers its own traffic
    expect(await client.who(echo.podIP, 8080)).toBe(echo.podName);
    // When devop port-forward takes its port 8080 to the local server (no local command)
    const run = devop(['-t', 'deploy/echo', '-R', `8080:localhost:${local.port}`, '--output', 'plain']);
    await run.ready();
    // Then a client in the cluster is answered by the local server, and stdout says what goes where
    expect(await client.who(echo.podIP, 8080, '/stolen'), run.output).toBe('local');
    expect(local.seen).toContain('/stolen');
    expect(run.stdout).toContain(`pod/${echo.podName}:8080 -> localhost:${local.port} (steal)\n`);
    // And devop sessions lists it with this devop's PID
    const sessions = new DevopRun([
      'sessions',
      '--kubeconfig',
      cluster.kubeconfigPath,
      '-n',
      namespace,
      '--output',
      'json',
    ]);
    runs.push(sessions);
    expect((await sessions.exited).code, sessions.output).toBe(0);
    const row = (JSON.parse(sessions.stdout) as SessionRow[]).find((r) => r.pid === run.child.pid);
    expect(row, sessions.stdout).toMatchObject({ target: 'deployment/echo', ports: [8080], mode: 'steal' });
    // When devop gets SIGINT (Ctrl-C)
    const stoppedAt = Date.now();
    run.child.kill('SIGINT');
    // Then it ends normally and the pod answers within 2 s
    expect((await run.exited).code, run.output).toBe(0);
    expect((await podAnswersAgain()) - stoppedAt, run.output).toBeLessThanOrEqual(RESTORE_MS);
  });

  it('--mirror: the pod still answers, the local server gets a copy', async () => {
    const run = devop(['-t', 'deploy/echo', '--mirror', '-R', `8080:127.0.0.1:${local.port}`]);
    await run.ready();
    expect(run.stdout).toContain(`pod/${echo.podName}:8080 -> 127.0.0.1:${local.port} (mirror)\n`);
    // When a client calls the pod
    expect(await client.who(echo.podIP, 8080, '/mirrored'), run.output).toBe(echo.podName);
    // Then the local server saw the same request
    await waitFor('the mirrored copy', () => (local.seen.includes('/mirrored') ? true : undefined), 10_000);
    expect((await run.stop('SIGINT')).code, run.output).toBe(0);
  });

  it('--http-header-filter: only matching requests are stolen, the pod answers the rest', async () => {
    const run = devop([
      '-t',
      'deploy/echo',
      '-R',
      `8080:127.0.0.1:${local.port}`,
      '--http-header-filter',
      'x-user: al',
    ]);
    await run.ready();
    expect(await client.who(echo.podIP, 8080, '/for-al', { 'x-user': 'al' }), run.output).toBe('local');
    expect(await client.who(echo.podIP, 8080, '/for-bo', { 'x-user': 'bo' })).toBe(echo.podName);
    expect(local.seen).toContain('/for-al');
    expect(local.seen).not.toContain('/for-bo');
    expect((await run.stop('SIGINT')).code, run.output).toBe(0);
  });

  it('-L beside two -R: the pod port 9090 (nothing listens there in the pod) is answered here too', async () => {
    // Given a second local server, and a free local port for -L
    const second = await startLocalServer();
    const forwardPort = await freePort();
    try {
      const run = devop([
        '-t',
        'deploy/echo',
        '-R',
        `8080:127.0.0.1:${local.port}`,
        '-R',
        `9090:127.0.0.1:${second.port}`,
        '-L',
        `${forwardPort}:${echo.podIP}:8080`,
      ]);
      await run.ready();
      // Then each pod port reaches its own local server
      expect(await client.who(echo.podIP, 8080, '/to-first'), run.output).toBe('local');
      expect(await client.who(echo.podIP, 9090, '/to-second'), run.output).toBe('local');
      expect(local.seen).toContain('/to-first');
      expect(second.seen).toEqual(['/to-second']);
      // And -L connects from the pod's netns to its own address: local traffic, which the steal does not take
      const viaL = await httpGet({ host: '127.0.0.1', port: forwardPort }, '/', { timeoutMs: 5000 });
      expect(whoAnswered(viaL), run.output).toBe(echo.podName);
      expect((await run.stop('SIGINT')).code, run.output).toBe(0);
    } finally {
      second.server.close();
    }
  });

  it('-R from devop.json (portForward.remote, its target): stolen without a flag for either', async () => {
    // Given a project folder whose devop.json names the target and the forward
    const dir = mkdtempSync(join(tmpdir(), 'devop-pf-'));
    try {
      const config = { target: 'deploy/echo', portForward: { remote: [`8080:127.0.0.1:${local.port}`] } };
      writeFileSync(join(dir, 'devop.json'), JSON.stringify(config));
      // When devop port-forward runs there with no -R and no -t
      const run = devop([], { cwd: dir });
      await run.ready();
      // Then the pod's port is answered locally
      expect(await client.who(echo.podIP, 8080, '/from-config'), run.output).toBe('local');
      expect((await run.stop('SIGINT')).code, run.output).toBe(0);
      await podAnswersAgain();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a local address nobody listens on: requests get a 502 naming the fix, and devop says so in one line', async () => {
    // Given -R to a local port with nothing listening
    const nobody = await freePort();
    const run = devop(['-t', 'deploy/echo', '-R', `8080:127.0.0.1:${nobody}`]);
    await run.ready();
    // When clients call the pod three times
    const answers = [];
    for (const path of ['/a', '/b', '/c']) answers.push(await client.get(echo.podIP, 8080, path));
    // Then each gets a 502 saying what is wrong and the fix
    for (const answer of answers) {
      expect(answer.status, run.output).toBe(502);
      expect(answer.body).toContain(`nothing listens on 127.0.0.1:${nobody}`);
      expect(answer.body).toContain('— fix: start the local server there');
    }
    // And devop's output has one line about it, not one per request
    const lines = run.stderr.split('\n').filter((l) => l.includes(`nothing listens on 127.0.0.1:${nobody}`));
    expect(lines, run.output).toHaveLength(1);
    expect(lines[0]).toContain('— fix: start the local server');
    expect((await run.stop('SIGINT')).code, run.output).toBe(0);
  });

  it('devop sessions stop ID ends it as it ends exec: exit 1 saying why, and the pod answers again', async () => {
    // Given devop port-forward stealing the port, listed by devop sessions
    const run = devop(['-t', 'deploy/echo', '-R', `8080:127.0.0.1:${local.port}`]);
    await run.ready();
    const list = new DevopRun([
      'sessions',
      '--kubeconfig',
      cluster.kubeconfigPath,
      '-n',
      namespace,
      '--output',
      'json',
    ]);
    runs.push(list);
    expect((await list.exited).code, list.output).toBe(0);
    const id = (JSON.parse(list.stdout) as SessionRow[]).find((r) => r.pid === run.child.pid)?.id ?? '';
    expect(id, list.stdout).toMatch(/^[0-9a-f]{8}$/);
    // When the session is stopped by its ID
    const stop = new DevopRun(['sessions', 'stop', id, '--kubeconfig', cluster.kubeconfigPath, '-n', namespace]);
    runs.push(stop);
    expect((await stop.exited).code, stop.output).toBe(0);
    // Then devop port-forward has ended, saying why, and the pod serves its port
    expect((await run.exited).code, run.output).toBe(1);
    expect(run.stderr).toMatch(/^devop: this session was stopped: the steal lock of port 8080 \(Lease devop-steal-/m);
    await podAnswersAgain();
  });

  // Last of the cluster tests: the killed devop's Lease and the agent's session outlive it (both expire in seconds).
  it('kill -9 of devop port-forward: the pod answers its own port again within 2 s', async () => {
    const run = devop(['-t', 'deploy/echo', '-R', `8080:127.0.0.1:${local.port}`]);
    await run.ready();
    expect(await client.who(echo.podIP, 8080), run.output).toBe('local');
    // When devop is killed with no chance to clean up
    const killedAt = Date.now();
    run.child.kill('SIGKILL');
    await run.exited;
    // Then the agent gives the port back within 2 s
    expect((await podAnswersAgain()) - killedAt).toBeLessThanOrEqual(RESTORE_MS);
  });

  it('bad input: -R notaport is one line naming the fix, before any cluster call', async () => {
    const run = devop(['-t', 'deploy/echo', '-R', 'notaport']);
    expect((await run.exited).code).toBe(1);
    expect(run.stderr.trim().split('\n')).toEqual([
      'devop: -R notaport: not [REMOTE_PORT:]LOCAL_HOST:LOCAL_PORT — fix: ' +
        'write -R [REMOTE_PORT:]LOCAL_HOST:LOCAL_PORT, e.g. -R 8080:localhost:3000 (pod port 8080 to local 3000), ' +
        'or -R 3000 (pod port 3000 to 127.0.0.1:3000)',
    ]);
  });
});
