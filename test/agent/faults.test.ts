// Faults: kill -9 of the agent (or of its parent), SIGTERM, a dropped session (fallback, then resume), bad frames from
// one session, stale chains of dead agents, and the idle exit. The pod's port must work again within 2 s, rule-free.
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type AddressInfo } from 'node:net';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { AGENT_BUNDLE, PodNet, sh, type AgentProc } from '../../testkit/netns.js';
import { connectSession, startLocalCommand, type LocalCommand } from '../../testkit/session-client.js';
import { httpGet } from '../../testkit/http.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent faults');
/** The design's failure rule; the poll below measures it from the kill to the first answer of the pod. */
const RECOVERY_MS = 2000;

describe.runIf(run)('agent: faults', () => {
  const net = new PodNet();
  let client: string;
  /** The same client over IPv6 (the pod is dual-stack, its app listens on both families). */
  let client6: string;
  let local: LocalCommand;

  beforeAll(async () => {
    await net.setup();
    await net.startPod({ port: 3000, env: { LISTEN_HOST: '::' } });
    client = await net.relay(net.clientNs, net.podIP, 3000);
    client6 = await net.relay(net.clientNs, net.podIP6, 3000);
    local = await startLocalCommand('local');
  });
  afterAll(async () => {
    await local?.close();
    await net.teardown();
  });

  async function stealingAgent(
    env: Record<string, string> = {},
    opts: { cgroup?: string; bundle?: string } = {},
  ): Promise<{ agent: AgentProc; control: string }> {
    const agent = await net.startAgent(env, opts);
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    const session = await connectSession(control, { local });
    expect((await session.subscribe(3000, 'steal')).type).toBe('subscribed');
    expect((await httpGet(client, '/stolen')).body).toBe('local: GET /stolen');
    return { agent, control };
  }

  /** Time from now until the pod's own app answers on the pod IP again. */
  async function timeUntilPodAnswers(): Promise<number> {
    const start = Date.now();
    // Each attempt is a fresh connection with a short timeout, as a retrying client's would be: a connection caught in
    // the middle of the agent's shutdown must not hide that the next one works.
    await waitFor(
      'the pod to answer again',
      async () => (await httpGet(client, '/back', { timeoutMs: 1000 })).body === 'pod: GET /back',
      10_000,
    );
    return Date.now() - start;
  }

  /**
   * Milliseconds from `since` until the pod's app answers a new connection: one is started every 100 ms (each may
   * wait up to 3 s for its answer) until one is answered by the pod.
   */
  async function firstPodAnswer(since: number, path: string): Promise<number> {
    let answeredAt = 0;
    const pending: Promise<void>[] = [];
    for (let tries = 0; answeredAt === 0 && tries < 100; tries++) {
      pending.push(
        httpGet(client, path, { timeoutMs: 3000 }).then(
          (a) => {
            if (a.body === `pod: GET ${path}` && answeredAt === 0) answeredAt = Date.now();
          },
          () => undefined,
        ),
      );
      await new Promise((r) => setTimeout(r, 100));
    }
    await Promise.all(pending);
    if (answeredAt === 0) throw new Error(`the pod did not answer ${path} within 10 s`);
    return answeredAt - since;
  }

  async function exited(pid: number): Promise<void> {
    await waitFor(`process ${pid} to exit`, () => {
      try {
        process.kill(pid, 0);
        return false;
      } catch {
        return true;
      }
    });
  }

  /** The devop rules left in the pod netns (owned nft table, iptables chains of both backends), as one text. */
  async function rules(): Promise<string> {
    return (await net.devopRules()).join('\n');
  }

  /** The agent's rules must be gone within the 2 s of the failure rule (after the pod already answers). */
  async function rulesGone(what: string): Promise<void> {
    await waitFor(what, async () => (await net.devopRules()).length === 0, RECOVERY_MS);
  }

  /** Command lines of the processes left in the pod netns that belong to an agent (its devop-nft, its guard). */
  async function agentHelpers(agentId: string): Promise<string[]> {
    const pids = (await sh(`ip netns pids ${net.podNs}`)).trim().split('\n').filter(Boolean);
    return pids
      .map((pid) => net.readCmdline(Number(pid)))
      .filter((c) => c.includes(`DEVOP-${agentId}`) || c.includes('devop-nft'));
  }

  /**
   * The agent's bundle in a directory of its own, next to a devop-nft that answers as on a kernel older than 5.12
   * (which refuses owned tables). Removed by the returned function.
   */
  function bundleWithoutOwnedTables(): { bundle: string; remove: () => void } {
    const dir = mkdtempSync(join(tmpdir(), 'devop-nonft-'));
    const bundle = join(dir, 'agent.cjs');
    copyFileSync(AGENT_BUNDLE, bundle);
    const answer = 'error create table: Operation not supported (owned tables need Linux 5.12 or later)';
    writeFileSync(join(dir, 'devop-nft'), `#!/bin/sh\nwhile read line; do echo "${answer}"; done\n`, { mode: 0o755 });
    return { bundle, remove: () => rmSync(dir, { recursive: true, force: true }) };
  }

  test(
    'kill -9 of the agent (owned nft table): the kernel drops the table; the pod answers within 2 s, no rule is ' +
      'left',
    async () => {
      const { agent } = await stealingAgent();
      // Given the rules in the agent's owned table, and no guard process (the kernel is the guard)
      expect(await rules()).toContain(`table inet devop_${agent.agentId} {`);
      expect(await net.iptablesSave()).not.toContain('DEVOP');
      expect((await agentHelpers(agent.agentId)).some((c) => c.includes('DEVOP-'))).toBe(false);
      process.kill(agent.innerPid, 'SIGKILL');
      expect(await timeUntilPodAnswers()).toBeLessThan(RECOVERY_MS);
      await rulesGone('the owned table to go with the agent');
      await exited(agent.pid); // the job-mode parent follows its child
      await waitFor("the agent's devop-nft to exit", async () => (await agentHelpers(agent.agentId)).length === 0);
    },
  );

  test('SIGTERM while a stolen request waits for its answer: the client learns at once that its connection ended', async () => {
    // Given a steal whose local command takes requests and never answers
    const held: string[] = [];
    const silent = createServer((req) => held.push(req.url ?? ''));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const agent = await net.startAgent();
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    const session = await connectSession(control, { local: { port: (silent.address() as AddressInfo).port } });
    expect((await session.subscribe(3000, 'steal')).type).toBe('subscribed');
    try {
      // And a client's request in flight, held by the local command
      const answer = httpGet(client, '/held', { timeoutMs: 10_000 }).then(
        (a) => `answered: ${a.body}`,
        (err: Error) => `ended: ${err.message}`,
      );
      await waitFor('the local command to hold the request', () => held.includes('/held'));
      // When the agent is told to stop (a deleted agent pod: the kubelet's SIGTERM)
      const stoppedAt = Date.now();
      process.kill(agent.pid, 'SIGTERM');
      // Then the client's connection ends at once (its end reaches the client through the redirect's NAT: the
      // agent's table goes only after its redirected connections have closed), not at the client's own timeout
      expect(await answer).toMatch(/^ended: /);
      expect(Date.now() - stoppedAt).toBeLessThan(RECOVERY_MS);
      // And the pod answers new connections
      expect((await httpGet(client, '/after-term')).body).toBe('pod: GET /after-term');
    } finally {
      silent.closeAllConnections();
      silent.close();
    }
  });

  test(
    "the agent's whole container is killed (cgroup.kill, as the runtime does): the pod answers within 2 s, no " +
      'rule is left',
    async () => {
      const cgroup = net.agentCgroup();
      const { agent } = await stealingAgent({}, { cgroup });
      expect(await rules()).toContain(`table inet devop_${agent.agentId} {`);
      // When every process of the agent's cgroup gets SIGKILL at once (agent, its job-mode parent, its devop-nft)
      writeFileSync(join(cgroup, 'cgroup.kill'), '1');
      expect(await timeUntilPodAnswers()).toBeLessThan(RECOVERY_MS);
      await rulesGone('the owned table to go with the container');
      await exited(agent.pid);
    },
  );

  test('kill -9 of the agent with the iptables fallback: its guard removes the chain; the pod answers within 2 s', async () => {
    const { agent } = await stealingAgent({ DEVOP_AGENT_IPTABLES: 'nft' });
    expect(await rules()).toContain(`-A PREROUTING -p tcp -m comment --comment devop -j DEVOP-${agent.agentId}`);
    expect(await rules()).not.toContain('devop_');
    process.kill(agent.innerPid, 'SIGKILL');
    expect(await timeUntilPodAnswers()).toBeLessThan(RECOVERY_MS);
    await rulesGone('the guard to remove the chain');
    await exited(agent.pid);
  });

  test(
    'the iptables fallback steals IPv6 clients too (ip6tables, same chain and jump); kill -9: its guard removes ' +
      'both families',
    async () => {
      // Given an agent on the iptables fallback stealing port 3000 of the dual-stack pod
      const { agent } = await stealingAgent({ DEVOP_AGENT_IPTABLES: 'nft' });
      // Then an IPv6 client is stolen as the IPv4 one is
      expect((await httpGet(client6, '/stolen-six')).body).toBe('local: GET /stolen-six');
      // By ip6tables rules of the same shape (the node's address is IPv4: the IPv6 rule skips no source)
      const ip6 = await sh(`ip netns exec ${net.podNs} ip6tables-nft-save -t nat`);
      expect(ip6).toContain(`-A PREROUTING -p tcp -m comment --comment devop -j DEVOP-${agent.agentId}`);
      expect(ip6).toMatch(
        new RegExp(`-A DEVOP-${agent.agentId} -p tcp -m tcp --dport 3000 -j REDIRECT --to-ports \\d+`),
      );
      const ip4 = await sh(`ip netns exec ${net.podNs} iptables-nft-save -t nat`);
      expect(ip4).toContain(`-A DEVOP-${agent.agentId} ! -s ${net.nodeIP}/32 -p tcp -m tcp --dport 3000 -j REDIRECT`);
      // When the agent is killed
      process.kill(agent.innerPid, 'SIGKILL');
      // Then IPv6 clients reach the pod again within 2 s, and no rule of either family is left
      const start = Date.now();
      await waitFor(
        'the pod to answer IPv6 clients again',
        async () => (await httpGet(client6, '/back-six', { timeoutMs: 1000 })).body === 'pod: GET /back-six',
        10_000,
      );
      expect(Date.now() - start).toBeLessThan(RECOVERY_MS);
      await rulesGone('the guard to remove both chains');
      await exited(agent.pid);
    },
  );

  test('kill -9 of the job-mode parent: the agent in the netns stops, the rules go within 2 s', async () => {
    const { agent } = await stealingAgent();
    process.kill(agent.pid, 'SIGKILL');
    expect(await timeUntilPodAnswers()).toBeLessThan(RECOVERY_MS);
    await exited(agent.innerPid);
    await rulesGone('the rules to go with the agent');
  });

  for (const backend of ['auto', 'nft'] as const) {
    test(
      `SIGTERM ends the agent cleanly (DEVOP_AGENT_IPTABLES=${backend}): exit code 0, no rule, no devop-nft or ` +
        'guard left',
      async () => {
        const { agent } = await stealingAgent({ DEVOP_AGENT_IPTABLES: backend });
        expect(await rules()).toContain(backend === 'auto' ? `devop_${agent.agentId}` : `DEVOP-${agent.agentId}`);
        expect((await httpGet(client6, '/stolen-six')).body).toBe('local: GET /stolen-six');
        const code = new Promise<number | null>((r) => agent.child.once('exit', (c) => r(c)));
        process.kill(agent.pid, 'SIGTERM');
        expect(await code).toBe(0);
        expect(await net.devopRules()).toEqual([]);
        expect((await httpGet(client, '/after-term')).body).toBe('pod: GET /after-term');
        expect((await httpGet(client6, '/after-term')).body).toBe('pod: GET /after-term');
        await waitFor(
          "the agent's devop-nft or guard to exit",
          async () => (await agentHelpers(agent.agentId)).length === 0,
        );
      },
    );
  }

  test(
    'without owned tables (kernel < 5.12), a pod whose rules are iptables-legacy gets legacy rules, and its guard ' +
      'cleans them up after kill -9',
    async () => {
      // Given a kernel that refuses owned tables and a pod netns with a legacy rule (a legacy-only CNI)
      const old = bundleWithoutOwnedTables();
      const marker = ['-t', 'nat', '-A', 'OUTPUT', '-p', 'tcp', '-d', '127.0.0.3', '--dport', '9', '-j', 'RETURN'].join(
        ' ',
      );
      await sh(`ip netns exec ${net.podNs} iptables-legacy ${marker}`);
      try {
        const { agent } = await stealingAgent({}, { bundle: old.bundle });
        expect(agent.lines.some((l) => l.includes('no owned nft table') && l.includes('need Linux 5.12'))).toBe(true);
        const legacy = await sh(
          `ip netns exec ${net.podNs} sh -c 'iptables-legacy-save -t nat; ip6tables-legacy-save'`,
        );
        const nft = await sh(`ip netns exec ${net.podNs} sh -c 'iptables-nft-save -t nat; ip6tables-nft-save'`);
        const jump = `-A PREROUTING -p tcp -m comment --comment devop -j DEVOP-${agent.agentId}`;
        expect(legacy.split('\n').filter((l) => l === jump)).toHaveLength(2); // IPv4 and IPv6
        expect(nft).not.toContain('DEVOP');
        expect((await httpGet(client6, '/stolen-six')).body).toBe('local: GET /stolen-six');
        expect(await rules()).not.toContain('devop_');
        process.kill(agent.innerPid, 'SIGKILL');
        expect(await timeUntilPodAnswers()).toBeLessThan(RECOVERY_MS);
        await rulesGone('the guard to remove the legacy chain');
        await exited(agent.pid);
      } finally {
        await sh(`ip netns exec ${net.podNs} iptables-legacy ${marker.replace('-A', '-D')}`);
        old.remove();
      }
    },
  );

  test(
    'DEVOP_AGENT_IPTABLES=nft-owned without owned tables: a steal is refused with the reason, nothing is ' +
      'installed',
    async () => {
      const old = bundleWithoutOwnedTables();
      try {
        const agent = await net.startAgent({ DEVOP_AGENT_IPTABLES: 'nft-owned' }, { bundle: old.bundle });
        const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
        const session = await connectSession(control, { local });
        const refused = await session.subscribe(3000, 'steal');
        expect(refused).toMatchObject({ type: 'refused' });
        expect((refused as { reason: string }).reason).toMatch(
          new RegExp(
            'cannot install the redirect rule for port 3000: devop-nft: create table: Operation not supported ' +
              '\\(owned tables need Linux 5\\.12',
          ),
        );
        expect(await net.devopRules()).toEqual([]);
        expect((await httpGet(client, '/not-stolen')).body).toBe('pod: GET /not-stolen');
        session.mux.close('done');
        process.kill(agent.pid, 'SIGTERM');
        await exited(agent.pid);
      } finally {
        old.remove();
      }
    },
  );

  test('a new agent removes stale DEVOP chains whose agent is gone', async () => {
    // Given a chain and jump left behind by an agent that died with its guard
    await sh(
      `ip netns exec ${net.podNs} sh -c 'iptables-nft -t nat -N DEVOP-stale1 && iptables-nft -t nat -A DEVOP-stale1 ` +
        `-p tcp --dport 3000 -j REDIRECT --to-ports 9 && iptables-nft -t nat -I PREROUTING 1 -p tcp -m comment ` +
        `--comment devop -j DEVOP-stale1'`,
    );
    await expect(httpGet(client, '/broken')).rejects.toThrow();
    // When a new agent starts
    const agent = await net.startAgent();
    // Then the stale chain is gone and the pod answers
    expect(await net.iptablesSave()).not.toContain('DEVOP-stale1');
    expect((await httpGet(client, '/fixed')).body).toBe('pod: GET /fixed');
    expect(agent.lines.some((l) => l.includes('removed stale chain'))).toBe(true);
    process.kill(agent.pid, 'SIGTERM');
    await exited(agent.pid);
  });

  test(
    'a dropped session: its traffic goes to the pod meanwhile, a resume takes the steal back, bye releases the ' +
      'port',
    async () => {
      const agent = await net.startAgent({ DEVOP_AGENT_RESUME_GRACE_SECONDS: '60' });
      const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
      const first = await connectSession(control, { local });
      expect((await first.subscribe(3000, 'steal')).type).toBe('subscribed');
      expect((await httpGet(client, '/s1')).body).toBe('local: GET /s1');
      // When the tunnel drops without a goodbye
      first.socket.destroy();
      // Then the pod answers meanwhile (the rule stays, the agent forwards)
      expect(await timeUntilPodAnswers()).toBeLessThan(RECOVERY_MS);
      expect(await rules()).toContain(`devop_${agent.agentId}`);
      // When the CLI reconnects with the session id
      const again = await connectSession(control, { local, resumeSessionId: first.sessionId });
      expect(again.sessionId).toBe(first.sessionId);
      // Then stealing resumes without a new subscribe
      expect((await httpGet(client, '/s2')).body).toBe('local: GET /s2');
      // When the session says bye, its rule goes
      again.send({ type: 'bye', reason: 'done' });
      await again.closed;
      await waitFor('the redirect rule to go', async () => !(await rules()).includes('dport 3000'));
      expect((await httpGet(client, '/s3')).body).toBe('pod: GET /s3');
      process.kill(agent.pid, 'SIGTERM');
      await exited(agent.pid);
    },
  );

  test("a killed devop's steal, waiting for a resume, is taken over by the same user's next session, not by another's", async () => {
    const agent = await net.startAgent({ DEVOP_AGENT_RESUME_GRACE_SECONDS: '60' });
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    // Given alice's session steals the port, and its devop is killed (the tunnel drops, no bye, no resume to come)
    const killed = await connectSession(control, { local, user: 'alice' });
    expect((await killed.subscribe(3000, 'steal')).type).toBe('subscribed');
    killed.socket.destroy();
    await waitFor('the session to wait for its resume', () =>
      agent.lines.some((l) => l.includes('waiting for resume')),
    );
    // When bob steals the port: refused, naming alice, as while her session was connected
    const bob = await connectSession(control, { local, user: 'bob' });
    expect(await bob.subscribe(3000, 'steal')).toMatchObject({ type: 'refused', holder: { user: 'alice' } });
    // When alice's next devop steals it: taken over at once, not refused until the resume grace (60 s) ends
    const next = await connectSession(control, { local, user: 'alice' });
    expect((await next.subscribe(3000, 'steal')).type).toBe('subscribed');
    await waitFor('the agent to log the take-over', () =>
      agent.lines.some((l) => l.includes('steal taken over from a disconnected session')),
    );
    // Then the port's traffic is hers again
    expect((await httpGet(client, '/next')).body).toBe('local: GET /next');
    for (const s of [bob, next]) s.socket.destroy();
    process.kill(agent.pid, 'SIGTERM');
    await exited(agent.pid);
  });

  test('a stalled tunnel (open but silent): the pod answers within 2 s, the steal takes new connections again once ' +
    'the tunnel speaks, and a stall of 10 s ends the session', async () => {
    const agent = await net.startAgent();
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    const session = await connectSession(control, { local });
    expect((await session.subscribe(3000, 'steal')).type).toBe('subscribed');
    expect((await httpGet(client, '/before-stall')).body).toBe('local: GET /before-stall');
    // When the tunnel stalls: the connection stays open, but nothing comes back from the CLI any more
    session.socket.pause();
    const stalledAt = Date.now();
    // Then the pod answers new connections within the failure rule's 2 s (a connection the session took before the
    // agent stopped trusting the tunnel waits with it: new ones are started every 100 ms, as many clients' would be)
    expect(await firstPodAnswer(stalledAt, '/during-stall')).toBeLessThan(RECOVERY_MS);
    expect(agent.lines.some((l) => l.includes('tunnel silent'))).toBe(true);
    // When the tunnel speaks again before the stall timeout: the session goes on and takes new connections
    session.socket.resume();
    await waitFor(
      'the local command to answer once the tunnel speaks again',
      async () => (await httpGet(client, '/after-stall', { timeoutMs: 1000 })).body === 'local: GET /after-stall',
      5000,
    );
    expect(agent.lines.some((l) => l.includes('tunnel stalled'))).toBe(false);
    // When it stalls for 10 s: the session is taken for disconnected
    session.socket.pause();
    await waitFor('the stall to end the session', () => agent.lines.some((l) => l.includes('tunnel stalled')), 20_000);
    expect((await httpGet(client, '/after-close')).body).toBe('pod: GET /after-close');
    session.socket.destroy();
    process.kill(agent.pid, 'SIGTERM');
    await exited(agent.pid);
  }, 40_000);

  test('bad frames from one session close that session with a reason; the other session goes on', async () => {
    const agent = await net.startAgent();
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    const bad = await connectSession(control, { local, user: 'bad' });
    const goodLocal = await startLocalCommand('local-good');
    const good = await connectSession(control, { local: goodLocal, user: 'good' });
    expect((await bad.subscribe(3000, 'steal', { filter: { header: 'x-user: bad', match: 'all' } })).type).toBe(
      'subscribed',
    );
    expect((await good.subscribe(3000, 'steal', { filter: { header: 'x-user: good', match: 'all' } })).type).toBe(
      'subscribed',
    );
    // When one session's connection carries garbage (a frame with an unknown kind)
    bad.socket.write(Buffer.from([0, 0, 0, 5, 0xee, 0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef, 0]));
    // Then that session is closed with a reason
    const err = await bad.closed;
    expect(String(err)).toMatch(/protocol error|malformed|unknown/i);
    // And the other goes on, while the bad one's requests go to the pod (its session ended for good)
    expect((await httpGet(client, '/g', { headers: { 'x-user': 'good' } })).body).toBe('local-good: GET /g');
    expect((await httpGet(client, '/b', { headers: { 'x-user': 'bad' } })).body).toBe('pod: GET /b');
    expect(agent.lines.some((l) => l.includes('session closed: bad frames'))).toBe(true);
    good.mux.close('done');
    await goodLocal.close();
    process.kill(agent.pid, 'SIGTERM');
    await exited(agent.pid);
  });

  test('a wrong token or protocol version is refused with a reason', async () => {
    const agent = await net.startAgent();
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    await expect(connectSession(control, { token: 'wrong' })).rejects.toThrow(/token does not match/);
    await expect(connectSession(control, { protocolVersion: 999 })).rejects.toThrow(/protocol/);
    // A connection that never says hello is not a session and does not crash anything
    const idle = connect(control);
    idle.resume();
    idle.write('GET / HTTP/1.1\r\n\r\n');
    await new Promise((r) => idle.once('close', r));
    process.kill(agent.pid, 'SIGTERM');
    await exited(agent.pid);
  });

  test('the agent exits by itself when idle, never while a session is connected', async () => {
    const agent = await net.startAgent({ DEVOP_AGENT_IDLE_SECONDS: '1', DEVOP_AGENT_RESUME_GRACE_SECONDS: '0' });
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    const session = await connectSession(control, { local });
    // While connected, well past the idle time, it stays
    await new Promise((r) => setTimeout(r, 2500));
    expect(agent.child.exitCode).toBe(null);
    expect((await session.request({ type: 'ping', id: 1, sentAt: Date.now() }, ['pong'])).type).toBe('pong');
    // Once the session is gone, it exits on its own
    session.mux.close('done');
    await exited(agent.pid);
    expect(agent.child.exitCode).toBe(0);
  });
});
