// devop exec on a dual-stack pod with the real agent image: a client in another pod that calls the target's IPv6
// address is stolen (whole and by an HTTP filter) and mirrored like one that calls its IPv4 address, and the pod
// answers IPv6 clients again when devop stops.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type DevopRun,
  LOCAL_SERVER_COMMAND,
  deployEcho,
  devopExec,
  seenRequests,
  startE2ETarget,
  startPodClient,
  type E2ETarget,
  type PodClient,
} from '../../testkit/e2e.js';
import { requireRoot } from '../../testkit/root.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('e2e IPv6');

describe('devop exec on a dual-stack pod', () => {
  let env: E2ETarget;
  let client: PodClient;
  let podName = '';
  let ip4 = '';
  let ip6 = '';
  const runs: DevopRun[] = [];
  const exec = (args: string[]): DevopRun => {
    const run = devopExec(env.cluster, ['-t', 'deploy/echo6', ...args], [...LOCAL_SERVER_COMMAND]);
    runs.push(run);
    return run;
  };

  beforeAll(async () => {
    env = await startE2ETarget('e2e-ipv6');
    // An http-echo that listens on both families, as most servers do by default
    const { pod } = await deployEcho(env, 'echo6', env.namespace, [{ name: 'LISTEN_HOST', value: '::' }]);
    podName = pod.metadata?.name ?? '';
    [ip4, ip6] = (pod.status?.podIPs ?? []).map((p) => p.ip ?? '');
    client = await startPodClient(env);
  });

  afterAll(async () => {
    client?.close();
    await Promise.all(runs.map((r) => r.dispose()));
    await env?.cluster.stop();
  });

  it('--steal takes clients of both families; the pod answers its IPv6 clients again after Ctrl-C', async () => {
    // Given the pod answers a client over IPv6
    expect(await client.who(ip6, 8080)).toBe(podName);
    // When devop steals its port
    const run = exec(['--steal']);
    await run.ready();
    // Then the local server answers clients over IPv6 and over IPv4
    expect(await client.who(ip6, 8080, '/six'), run.output).toBe('local');
    expect(await client.who(ip4, 8080, '/four'), run.output).toBe('local');
    expect(seenRequests(run).map((r) => r.path)).toEqual(expect.arrayContaining(['/six', '/four']));
    // And after Ctrl-C the pod answers over IPv6 again
    run.child.kill('SIGINT');
    expect((await run.exited).code, run.output).toBe(0);
    await waitFor('the pod to answer over IPv6', async () => (await client.who(ip6, 8080)) === podName, 5000);
  });

  it('an HTTP filter routes each IPv6 request', async () => {
    const run = exec(['--steal', '--http-header-filter', 'x-dev: ^me$']);
    await run.ready();
    expect(await client.who(ip6, 8080, '/mine', { 'x-dev': 'me' }), run.output).toBe('local');
    expect(await client.who(ip6, 8080, '/theirs'), run.output).toBe(podName);
    await run.stop('SIGINT');
  });

  it("the local command reaches a pod's IPv6 address through the target pod", async () => {
    // Given a local command that calls the pod's IPv6 address (a raw fetch, through devop's Node preload)
    const fetchSix =
      `fetch('http://[${ip6}]:8080/outgoing-six').then((r) => r.json())` +
      '.then((b) => console.log(`OUT ${b.pod} ${b.path} ${b.remoteAddress}`))';
    const run = devopExec(env.cluster, ['-t', 'deploy/echo6'], [process.execPath, '-e', fetchSix]);
    runs.push(run);
    // Then it is answered by the pod, and the connection came from the target pod's own IPv6 address
    expect((await run.exited).code, run.output).toBe(0);
    expect(run.stdout, run.output).toContain(`OUT ${podName} /outgoing-six ${ip6}\n`);
  });

  it("--mirror copies an IPv6 client's requests to the local server while the pod answers", async () => {
    const run = exec(['--mirror']);
    await run.ready();
    expect(await client.who(ip6, 8080, '/mirrored-six'), run.output).toBe(podName);
    await waitFor('the copy at the local server', () => seenRequests(run).some((r) => r.path === '/mirrored-six'));
    await run.stop('SIGINT');
  });
});
