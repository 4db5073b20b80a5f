// The other start modes: ephemeral (started inside the pod's netns, finds the target by container ID) and targetless
// (outgoing and DNS only; steal, env and files refused with a reason).
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { PodNet } from '../../testkit/netns.js';
import { connectSession, startLocalCommand, type LocalCommand } from '../../testkit/session-client.js';
import { httpGet } from '../../testkit/http.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent modes');

describe.runIf(run)('agent: ephemeral and targetless modes', () => {
  const net = new PodNet();
  let client: string;
  let local: LocalCommand;

  beforeAll(async () => {
    await net.setup();
    await net.startPod({ port: 3000, env: { FROM_POD: 'yes' } });
    client = await net.relay(net.clientNs, net.podIP, 3000);
    local = await startLocalCommand('local');
  });
  afterAll(async () => {
    await local?.close();
    await net.teardown();
  });

  test('ephemeral mode: started in the pod netns, it finds the target by container ID, steals, and reads its env', async () => {
    const agent = await net.startAgent({ DEVOP_AGENT_MODE: 'ephemeral' }, { inPodNetns: true });
    expect(agent.innerPid).toBe(agent.pid); // no re-exec: it already lives in the netns
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    const session = await connectSession(control, { local });
    expect((await session.subscribe(3000, 'steal')).type).toBe('subscribed');
    expect((await httpGet(client, '/eph')).body).toBe('local: GET /eph');
    const env = await session.request({ type: 'envRead', id: 'e' }, ['env']);
    expect(env.vars.FROM_POD).toBe('yes');
    const code = new Promise<number | null>((r) => agent.child.once('exit', (c) => r(c)));
    process.kill(agent.pid, 'SIGTERM');
    expect(await code).toBe(0);
    expect((await httpGet(client, '/after')).body).toBe('pod: GET /after');
    expect(await net.devopRules()).toEqual([]);
  });

  test("job mode through the image's entry point: one resident process, inside the target's netns", async () => {
    const agent = await net.startAgent({}, { viaEntryPoint: true });
    // sh execs nsenter, which execs node: the agent is the process that was started, and nothing stays behind it.
    expect(agent.innerPid).toBe(agent.pid);
    const netnsOf = (pid: number | string): string => readlinkSync(`/proc/${pid}/ns/net`);
    expect(netnsOf(agent.pid)).toBe(netnsOf(await net.podPid()));
    expect(netnsOf(agent.pid)).not.toBe(netnsOf('self'));
    const session = await connectSession(await net.relay(net.podNs, '127.0.0.1', agent.port), { local });
    expect((await session.subscribe(3000, 'steal')).type).toBe('subscribed');
    expect((await httpGet(client, '/entry')).body).toBe('local: GET /entry');
    const code = new Promise<number | null>((r) => agent.child.once('exit', (c) => r(c)));
    process.kill(agent.pid, 'SIGTERM');
    expect(await code).toBe(0);
    expect((await httpGet(client, '/after-entry')).body).toBe('pod: GET /after-entry');
    expect(await net.devopRules()).toEqual([]);
  });

  test("job mode's entry point finds the target's PID with the shell alone (no Node run first)", async () => {
    // Given the entry point whose Node PID lookup fails if it runs
    // When the agent starts in job mode through it
    const agent = await net.startAgent({}, { viaEntryPoint: true, noNodeLookup: true });
    // Then it runs in the target's netns, found by the shell's scan of /proc/*/cgroup
    expect(readlinkSync(`/proc/${agent.pid}/ns/net`)).toBe(readlinkSync(`/proc/${await net.podPid()}/ns/net`));
    const code = new Promise<number | null>((r) => agent.child.once('exit', (c) => r(c)));
    process.kill(agent.pid, 'SIGTERM');
    expect(await code).toBe(0);
  });

  test('the control port listens while the start sets up its chain; a hello sent then is answered once ready', async () => {
    // Given a start whose nat-table reads are held until the test lets them go (an iptables-legacy-save in front)
    const bin = mkdtempSync(join(tmpdir(), 'devop-held-save-'));
    const go = join(bin, 'go');
    writeFileSync(
      join(bin, 'iptables-legacy-save'),
      `#!/bin/sh\nwhile [ ! -e ${go} ]; do sleep 0.05; done\nexec /usr/sbin/iptables-legacy-save "$@"\n`,
      { mode: 0o755 },
    );
    const port = 20000 + Math.floor(Math.random() * 20000);
    let ready = false;
    const starting = net
      .startAgent({ DEVOP_AGENT_PORT: String(port), PATH: `${bin}:${process.env.PATH}` })
      .finally(() => (ready = true));
    try {
      // When the start is held in its chain set-up
      const listening = () =>
        execFileSync('nsenter', [`--net=/run/netns/${net.podNs}`, 'ss', '-Hltn', `sport = :${port}`], {
          encoding: 'utf8',
        }).includes('LISTEN');
      await waitFor(`the control port ${port} to listen`, listening);
      // Then the control port already listens, and a session's hello waits for the agent to be ready
      expect(ready).toBe(false);
      const session = connectSession(await net.relay(net.podNs, '127.0.0.1', port), { local });
      const answered = await Promise.race([session.then(() => true), delay(300).then(() => false)]);
      expect(answered).toBe(false);
      writeFileSync(go, '');
      const agent = await starting;
      expect((await (await session).subscribe(3000, 'steal')).type).toBe('subscribed');
      expect((await httpGet(client, '/held')).body).toBe('local: GET /held');
      const code = new Promise<number | null>((r) => agent.child.once('exit', (c) => r(c)));
      process.kill(agent.pid, 'SIGTERM');
      expect(await code).toBe(0);
    } finally {
      writeFileSync(go, '');
      await starting.catch(() => undefined);
      rmSync(bin, { recursive: true, force: true });
    }
  });

  test('the entry point passes on the one-line error of a target it cannot enter', async () => {
    const failed = net.startAgent(
      { DEVOP_AGENT_CONTAINER_ID: `containerd://${'f'.repeat(64)}` },
      { viaEntryPoint: true },
    );
    await expect(failed).rejects.toThrow(/no process of container ffffffffffff is visible/);
  });

  test('targetless mode: outgoing works from the pod netns; steal, env and files are refused with a reason', async () => {
    const agent = await net.startAgent(
      { DEVOP_AGENT_MODE: 'targetless', DEVOP_AGENT_CONTAINER_ID: '' },
      { inPodNetns: true },
    );
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    const session = await connectSession(control);
    const refused = await session.subscribe(3000, 'steal');
    expect(refused).toMatchObject({ type: 'refused' });
    expect((refused as { reason: string }).reason).toMatch(/targetless/);
    const env = await session.request({ type: 'envRead', id: 'e' }, ['env', 'error']);
    expect(env).toMatchObject({ type: 'error', code: 'unsupported' });
    const file = session.mux.openStream({ kind: 'file', path: '/etc/hostname' });
    file.end();
    await expect(
      new Promise((resolve, reject) => file.on('error', reject).on('end', resolve).resume()),
    ).rejects.toThrow(/targetless/);
    const stream = session.mux.openStream({ kind: 'outgoing', host: '127.0.0.1', port: 3000 });
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.end('GET /targetless HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    await waitFor('the answer through the outgoing stream', () =>
      Buffer.concat(chunks).toString().endsWith('pod: GET /targetless'),
    );
    expect(await net.devopRules()).toEqual([]);
    process.kill(agent.pid, 'SIGTERM');
  });
});
