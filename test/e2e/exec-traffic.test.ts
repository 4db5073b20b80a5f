// `devop exec` end to end against the stand-in cluster (or a real one: testkit/target-cluster.ts): steal, mirror,
// HTTP filters, concurrent sessions, kill -9 of the CLI, the pod's env, and a local command that never listens.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { standinOnly, type TargetCluster } from '../../testkit/target-cluster.js';
import {
  type DevopRun,
  LOCAL_SERVER_COMMAND,
  deployEcho,
  devopExec,
  killLocalServer,
  seenRequests,
  startE2ETarget,
  startPodClient,
  whoAnswers,
  type EchoDeployment,
  type PodClient,
} from '../../testkit/e2e.js';
import { waitFor } from '../../testkit/wait.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('e2e exec traffic');

describe('devop exec: traffic', () => {
  let cluster: TargetCluster;
  let echo: EchoDeployment;
  /** Requests come from another pod: the host is the node, whose connections count as kubelet probes. */
  let client: PodClient;
  const runs: DevopRun[] = [];
  const track = (run: DevopRun): DevopRun => {
    runs.push(run);
    return run;
  };

  beforeAll(async () => {
    const env = await startE2ETarget('e2e-traffic');
    cluster = env.cluster;
    [echo, client] = await Promise.all([deployEcho(env, 'echo'), startPodClient(env)]);
  });

  afterAll(async () => {
    client?.close();
    await Promise.all(runs.map((r) => r.dispose()));
    await cluster?.stop();
  });

  it('steals: requests to the pod IP are answered by the local command, and by the pod again after devop exits', async () => {
    // Given the echo pod answers its own traffic
    expect(await client.who(echo.podIP, 8080)).toBe(echo.podName);
    // When devop steals its port for a local server
    const local = await freePort();
    const run = track(
      devopExec(cluster, ['-t', 'deploy/echo', '--steal', '-p', `8080:${local}`], [...LOCAL_SERVER_COMMAND], {
        env: { LOCAL_PORT: String(local) },
      }),
    );
    await run.ready();
    // Then the local server answers requests sent to the pod
    expect(await client.who(echo.podIP, 8080, '/stolen'), run.output).toBe('local');
    expect(seenRequests(run).map((r) => r.path)).toContain('/stolen');
    expect(run.stderr).toMatch(/resolve target deploy\/echo: pod echo-\S+ \(its only pod\)/);
    // When devop stops (SIGTERM: forwarded to the local server, which exits 0)
    const exit = await run.stop('SIGTERM');
    expect(exit.code).toBe(0);
    // Then the pod answers again
    await waitFor(
      'the pod to answer again',
      async () => ((await client.who(echo.podIP, 8080)) === echo.podName ? true : undefined),
      5000,
    );
  });

  // On a real cluster the test machine is not a node: its requests are not the node's.
  const onStandin = standinOnly('requests from the test machine come from the node');
  onStandin('does not steal connections from the node (kubelet probes) unless asked', async () => {
    const local = await freePort();
    const run = track(
      devopExec(cluster, ['-t', 'deploy/echo', '--steal', '-p', `8080:${local}`], [...LOCAL_SERVER_COMMAND], {
        env: { LOCAL_PORT: String(local) },
      }),
    );
    await run.ready();
    expect(await client.who(echo.podIP, 8080), run.output).toBe('local');
    expect(await whoAnswers(echo.podIP, 8080, '/from-node')).toBe(echo.podName);
    await run.stop();
  });

  it('mirrors: the pod still answers, the local command receives a copy', async () => {
    const local = await freePort();
    const run = track(
      devopExec(cluster, ['-t', 'deploy/echo', '--mirror', '-p', `8080:${local}`], [...LOCAL_SERVER_COMMAND], {
        env: { LOCAL_PORT: String(local) },
      }),
    );
    await run.ready();
    // When a request reaches the pod
    expect(await client.who(echo.podIP, 8080, '/mirrored')).toBe(echo.podName);
    // Then the local server saw the same request
    await waitFor(
      'the mirrored copy',
      () => (seenRequests(run).some((r) => r.path === '/mirrored') ? true : undefined),
      10_000,
    );
    await run.stop();
  });

  it('mirrors with a header filter: the pod answers all, only matching requests reach the local command', async () => {
    // Given devop mirroring the port with a header filter
    const local = await freePort();
    const run = track(
      devopExec(
        cluster,
        ['-t', 'deploy/echo', '--mirror', '-p', `8080:${local}`, '--http-header-filter', 'x-dev: ^me$'],
        [...LOCAL_SERVER_COMMAND],
        { env: { LOCAL_PORT: String(local) } },
      ),
    );
    await run.ready();
    // When a request without the header and one with it reach the pod
    expect(await client.who(echo.podIP, 8080, '/not-mine')).toBe(echo.podName);
    expect(await client.who(echo.podIP, 8080, '/mine', { 'x-dev': 'me' })).toBe(echo.podName);
    // Then the local server saw a copy of the matching one only, and devop listed both
    await waitFor('the copy', () => (seenRequests(run).some((r) => r.path === '/mine') ? true : undefined), 10_000);
    await waitFor('both lines', () =>
      run.output.includes('mirror GET /not-mine :8080: not matched, not copied') &&
      run.output.includes('mirror GET /mine :8080: copied to the local command')
        ? true
        : undefined,
    );
    expect(seenRequests(run).map((r) => r.path)).toEqual(['/mine']);
    await run.stop();
  });

  it('filters: only requests with the matching header reach the local command', async () => {
    const local = await freePort();
    const run = track(
      devopExec(
        cluster,
        ['-t', 'deploy/echo', '--steal', '-p', `8080:${local}`, '--http-header-filter', 'x-user: alice'],
        [...LOCAL_SERVER_COMMAND],
        { env: { LOCAL_PORT: String(local) } },
      ),
    );
    await run.ready();
    expect(await client.who(echo.podIP, 8080, '/a', { 'x-user': 'alice' }), run.output).toBe('local');
    expect(await client.who(echo.podIP, 8080, '/b', { 'x-user': 'bob' })).toBe(echo.podName);
    expect(await client.who(echo.podIP, 8080, '/c')).toBe(echo.podName);
    expect(seenRequests(run).map((r) => r.path)).toEqual(['/a']);
    await run.stop();
  });

  it('filters on a JSON body: only requests whose JSON body says so reach the local command', async () => {
    // Given a session stealing the requests whose JSON body names alice
    const local = await freePort();
    const run = track(
      devopExec(
        cluster,
        ['-t', 'deploy/echo', '--steal', '-p', `8080:${local}`, '--http-body-filter', '$.user.name: ^alice$'],
        [...LOCAL_SERVER_COMMAND],
        { env: { LOCAL_PORT: String(local) } },
      ),
    );
    await run.ready();
    const json = { 'content-type': 'application/json' };
    // When the pod gets requests for alice, for bob, and alice's in a body that is not JSON
    const who = (path: string, body: object, headers = json) =>
      client.whoAnswersPost(echo.podIP, 8080, path, JSON.stringify(body), headers);
    // Then alice's JSON request reached the local command, the others the pod
    expect(await who('/alice', { user: { name: 'alice' } }), run.output).toBe('local');
    expect(await who('/bob', { user: { name: 'bob' } })).toBe(echo.podName);
    expect(await who('/text', { user: { name: 'alice' } }, { 'content-type': 'text/plain' })).toBe(echo.podName);
    expect(seenRequests(run).map((r) => `${r.method} ${r.path}`)).toEqual(['POST /alice']);
    expect(run.stderr).toContain('body $.user.name: ^alice$');
    await run.stop();
  });

  it('runs two filtered sessions at once on one target and refuses a third unfiltered steal, naming the holder', async () => {
    // Given alice's and bob's sessions with different header filters
    const [portA, portB, portC] = [await freePort(), await freePort(), await freePort()];
    const alice = track(
      devopExec(
        cluster,
        ['-t', 'deploy/echo', '--steal', '-p', `8080:${portA}`, '--http-header-filter', 'x-user: alice'],
        [...LOCAL_SERVER_COMMAND],
        { env: { LOCAL_PORT: String(portA) } },
      ),
    );
    await alice.ready();
    const bob = track(
      devopExec(
        cluster,
        ['-t', 'deploy/echo', '--steal', '-p', `8080:${portB}`, '--http-header-filter', 'x-user: bob'],
        [...LOCAL_SERVER_COMMAND],
        { env: { LOCAL_PORT: String(portB) } },
      ),
    );
    await bob.ready();
    // Then the second session reused the first one's agent, and each gets its own requests
    expect(bob.stderr).toMatch(/reused Job devop-agent-/);
    expect(await client.who(echo.podIP, 8080, '/for-alice', { 'x-user': 'alice' }), alice.output).toBe('local');
    expect(await client.who(echo.podIP, 8080, '/for-bob', { 'x-user': 'bob' }), bob.output).toBe('local');
    expect(seenRequests(alice).map((r) => r.path)).toEqual(['/for-alice']);
    expect(seenRequests(bob).map((r) => r.path)).toEqual(['/for-bob']);
    // When a third session asks for the whole port
    const third = track(
      devopExec(cluster, ['-t', 'deploy/echo', '--steal', '-p', `8080:${portC}`], [...LOCAL_SERVER_COMMAND], {
        env: { LOCAL_PORT: String(portC) },
      }),
    );
    const exit = await third.exited;
    // Then it is refused in one line naming who holds the port
    expect(exit.code).toBe(1);
    expect(third.stderr).toMatch(
      new RegExp(
        /devop: port 8080 of pod echo-\S+ cannot be stolen: port 8080 is stolen \(.*x-user: (alice|bob).*\) /.source +
          /by \S+@\S+ since /.source,
      ),
    );
    expect(third.stderr).toMatch(/since .* — fix: /);
    await Promise.all([alice.stop(), bob.stop()]);
  });

  it('kill -9 of the devop CLI: the pod answers its own traffic again within 2 s', async () => {
    const local = await freePort();
    const run = track(
      devopExec(cluster, ['-t', 'deploy/echo', '--steal', '-p', `8080:${local}`], [...LOCAL_SERVER_COMMAND], {
        env: { LOCAL_PORT: String(local) },
      }),
    );
    await run.ready();
    expect(await client.who(echo.podIP, 8080), run.output).toBe('local');
    // When the CLI is killed without a chance to clean up
    const killedAt = Date.now();
    run.child.kill('SIGKILL');
    await run.exited;
    // Then within 2 s the pod answers (the local server is an orphan now: it is killed after the check)
    let answeredAt = 0;
    await waitFor(
      'the pod to answer after kill -9',
      async () => {
        const who = await client.who(echo.podIP, 8080).catch(() => 'error');
        if (who === echo.podName) {
          answeredAt = Date.now();
          return true;
        }
        return undefined;
      },
      10_000,
    );
    killLocalServer(run);
    expect(answeredAt - killedAt).toBeLessThanOrEqual(2000);
  });

  it("gives the local command the pod's env (with the configmap value), minus excluded keys", async () => {
    const run = track(
      devopExec(
        cluster,
        ['-t', 'deploy/echo', '--env-exclude', 'SECRET_*'],
        [
          'sh',
          '-c',
          'echo "GREETING=$GREETING"; echo "APP_MODE=$APP_MODE"; echo "SECRET_TOKEN=${SECRET_TOKEN:-unset}"; echo ' +
            '"KSH=${KUBERNETES_SERVICE_HOST:-unset}"',
        ],
      ),
    );
    const exit = await run.exited;
    expect(exit.code, run.output).toBe(0);
    expect(run.stdout).toContain("GREETING=hello from echo's configmap");
    expect(run.stdout).toContain('APP_MODE=production');
    expect(run.stdout).toContain('SECRET_TOKEN=unset');
    expect(run.stdout).toContain('KSH=unset');
  });

  it('a local command that never listens: the pod keeps serving and devop says why', async () => {
    const local = await freePort();
    const run = track(
      devopExec(
        cluster,
        ['-t', 'deploy/echo', '--steal', '-p', `8080:${local}`, '--startup-timeout', '3'],
        ['sleep', '60'],
      ),
    );
    await run.waitForStderr(/does not listen on 127\.0\.0\.1:\d+ after 3 s: the pod keeps serving port 8080/);
    expect(await client.who(echo.podIP, 8080)).toBe(echo.podName);
    // Stopping devop ends the command: a normal stop, exit code 0
    const exit = await run.stop('SIGTERM');
    expect(exit.code).toBe(0);
  });
});
