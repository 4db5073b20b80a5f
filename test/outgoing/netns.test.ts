// The network namespace of `--outgoing-netns` (dist/devop-netns, cli/native/outgoing-netns.c) against devop's side of
// it (cli/outgoing/netns.ts) with a "cluster" on this machine: a statically linked client that queries the
// nameserver of /etc/resolv.conf itself over UDP (as Go's resolver does) gets the cluster's answer and reaches the
// cluster address; an unknown name is NXDOMAIN; a port the cluster refuses is ECONNREFUSED; this machine's loopback
// services and the command's own in-namespace server stay reachable; the command keeps its uid, as root (a network
// namespace only) and as an unprivileged user (a user namespace too); a published port (--publish, the ports devop
// steals to) reaches the command's server inside from this machine's loopback once it listens there. The stand-in's
// end-to-end run is netns-e2e.test.ts.
import { execFile, execFileSync } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { Duplex } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DialError, createLocalDialer, toDialError, type ClusterDialer } from '../../cli/outgoing/dialer.js';
import { netnsLauncherPath, startNetnsBridge, type NetnsBridge } from '../../cli/outgoing/netns.js';
import { ROOT } from '../../testkit/e2e.js';
import { recordingDialer, startHttpEcho, type Closable } from '../../testkit/outgoing.js';
import { requireRoot } from '../../testkit/root.js';
import { freePort } from '../../testkit/sockets.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('the outgoing network namespace (a user namespace is tried as nobody)');

const CLIENT_SOURCE = join(ROOT, 'test', 'outgoing', 'fixtures', 'static-client.c');
const DNS_QUERY = join(ROOT, 'test', 'outgoing', 'fixtures', 'dns-query.py');
const PYTHON = '/usr/bin/python3';
/** A "service IP" of the test's cluster: TEST-NET-2 (RFC 5737), routed nowhere from this machine. */
const SERVICE_IP = '198.51.100.7';
/** Its IPv6 address (the documentation prefix, RFC 3849). */
const SERVICE_IP6 = '2001:db8::7';
/** A name only the test's cluster knows (.test is reserved: no resolver of this machine answers it). */
const SERVICE_NAME = 'db.shop.svc.cluster.test';
const SECRET = 'netns-test-secret';
const NOBODY = 65534;
const ECONNREFUSED = 111;
const NXDOMAIN = 3;
const NOTIMP = 4;

interface ClientLine {
  target: string;
  address?: string;
  body?: { name: string; url: string } | null;
  error?: string;
  code?: number;
  rcode?: number;
}

function lines(stdout: string): ClientLine[] {
  return stdout
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as ClientLine);
}

/** The test's cluster: SERVICE_NAME is SERVICE_IP, and a connect to SERVICE_IP:port reaches 127.0.0.1:port. */
function testCluster(): ClusterDialer {
  const names = createLocalDialer({ hosts: { [SERVICE_NAME]: [SERVICE_IP, SERVICE_IP6] } });
  return {
    ...names,
    connect(host, port): Promise<Duplex> {
      if (host !== SERVICE_IP) {
        return Promise.reject(new DialError('EHOSTUNREACH', `connect ${host}:${port}: no route in the test cluster`));
      }
      return new Promise((resolve, reject) => {
        const socket = netConnect({ host: '127.0.0.1', port, allowHalfOpen: true });
        socket.once('connect', () => resolve(socket));
        socket.once('error', (err) => reject(toDialError(err, `connect ${host}:${port}`)));
      });
    },
  };
}

function runIn(
  bridge: NetnsBridge,
  script: string,
  as?: number,
  publish: number[] = [],
  launcher = netnsLauncherPath() ?? '',
): Promise<{ stdout: string; stderr: string; code: number }> {
  return new Promise((resolve) => {
    execFile(
      launcher,
      [...publish.flatMap((port) => ['--publish', String(port)]), '--', '/bin/sh', '-c', script],
      { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...bridge.env }, timeout: 60_000, uid: as, gid: as },
      (err, stdout, stderr) =>
        resolve({
          stdout,
          stderr: `${stderr}${err && typeof err.code !== 'number' ? String(err) : ''}`,
          code: err ? Number(err.code ?? 1) || 1 : 0,
        }),
    );
  });
}

/** The body of GET path from 127.0.0.1:port, or undefined when nothing answers. */
function answerOf(port: number, path = '/'): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = netConnect({ host: '127.0.0.1', port });
    let text = '';
    socket.on('connect', () => socket.write(`GET ${path} HTTP/1.0\r\n\r\n`));
    socket.on('data', (chunk) => (text += chunk.toString()));
    socket.on('error', () => resolve(undefined));
    socket.on('close', () => resolve(text.includes('\r\n\r\n') ? text.split('\r\n\r\n')[1] : undefined));
  });
}

describe.skipIf(process.platform !== 'linux')('the outgoing network namespace (dist/devop-netns)', () => {
  let work: string;
  let client: string;
  let clusterEcho: Closable;
  let localEcho: Closable;
  let closedPort: number;
  let dialer: ReturnType<typeof recordingDialer>;
  let bridge: NetnsBridge;

  beforeAll(async () => {
    // Given dist/devop-netns (npm run build), and a client built with cc -static that resolves by its own UDP query
    expect(netnsLauncherPath(), 'dist/devop-netns is missing: run npm run build').toBeDefined();
    work = mkdtempSync(join(tmpdir(), 'devop-netns-test-'));
    client = join(work, 'static-client');
    execFileSync('cc', ['-O2', '-static', '-o', client, CLIENT_SOURCE], { stdio: 'ignore' });
    execFileSync('chmod', ['755', work, client]);
    // And a cluster echo (reached as SERVICE_IP), an echo of this machine's own on its loopback, a closed port
    clusterEcho = await startHttpEcho('cluster-echo');
    localEcho = await startHttpEcho('this-machine');
    const closed = await startHttpEcho('closed');
    closedPort = closed.port;
    await closed.close();
    dialer = recordingDialer(testCluster());
    // And devop's side: its Unix socket, with the outgoing rules' always-local loopback
    bridge = await startNetnsBridge({ dialer, secret: SECRET, include: [], exclude: [] });
  });

  afterAll(async () => {
    await bridge?.close();
    await Promise.all([clusterEcho?.close(), localEcho?.close()]);
    if (work) rmSync(work, { recursive: true, force: true });
  });

  const script = (): string =>
    [
      `${client} ${SERVICE_NAME} ${clusterEcho.port} /by-name`,
      `${client} ${SERVICE_IP} ${clusterEcho.port} /by-ip`,
      `${client} nosuch.shop.svc.cluster.test 80 /`,
      `${client} ${SERVICE_IP} ${closedPort} /`,
      `${client} 127.0.0.1 ${localEcho.port} /this-machine`,
      'id -u',
    ].join('; ');

  function expectCovered(stdout: string, stderr: string): void {
    const [byName, byIp, unknown, refused, local] = lines(stdout);
    // Then the name was answered by the cluster's DNS and the connection dialled by the cluster
    expect(byName, stderr).toMatchObject({ address: SERVICE_IP, body: { name: 'cluster-echo', url: '/by-name' } });
    expect(byIp, stderr).toMatchObject({ body: { name: 'cluster-echo', url: '/by-ip' } });
    // And a name the cluster does not know is NXDOMAIN, a port it refuses the program's own connect() failing
    expect(unknown).toMatchObject({ error: 'dns', rcode: NXDOMAIN });
    expect(refused).toMatchObject({ error: 'connect', code: ECONNREFUSED });
    // And this machine's loopback is this machine's: dialled from here, not by the cluster
    expect(local).toMatchObject({ body: { name: 'this-machine', url: '/this-machine' } });
    expect(dialer.calls.map((call) => call.target)).not.toContain(`127.0.0.1:${localEcho.port}`);
  }

  it('as root: a static client resolves and connects through the cluster; refusals, unknown names and loopback behave', async () => {
    // When the client runs under devop-netns as root
    dialer.calls.length = 0;
    const { stdout, stderr, code } = await runIn(bridge, script());
    expect(code, stderr).toBe(0);
    expectCovered(stdout, stderr);
    expect(dialer.calls).toContainEqual({ op: 'lookup', target: SERVICE_NAME });
    expect(dialer.calls).toContainEqual({ op: 'connect', target: `${SERVICE_IP}:${clusterEcho.port}` });
    // And the command is still root
    expect(stdout.trim().split('\n').at(-1)).toBe('0');
  });

  it('as an unprivileged user: a user namespace too, and the command keeps its uid', async () => {
    // Given devop's socket owned by that user (devop and its command run as the same user)
    chownSync(dirname(bridge.socketPath), NOBODY, NOBODY);
    chownSync(bridge.socketPath, NOBODY, NOBODY);
    try {
      // When the same client runs under devop-netns as nobody (a copy nobody may run: the checkout may be in a
      // directory only root can enter, as a clean clone in a 0700 temporary directory is)
      chmodSync(work, 0o755);
      const launcher = join(work, 'devop-netns');
      copyFileSync(netnsLauncherPath() ?? '', launcher);
      chmodSync(launcher, 0o755);
      dialer.calls.length = 0;
      const { stdout, stderr, code } = await runIn(bridge, script(), NOBODY, [], launcher);
      expect(code, stderr).toBe(0);
      // Then the same holds, and the command sees its own uid
      expectCovered(stdout, stderr);
      expect(stdout.trim().split('\n').at(-1)).toBe(String(NOBODY));
    } finally {
      chownSync(bridge.socketPath, 0, 0);
      chownSync(dirname(bridge.socketPath), 0, 0);
    }
  });

  it("the command's own server inside the namespace is reached there, without devop", async () => {
    // When the command starts a server on the namespace's loopback and connects to it
    dialer.calls.length = 0;
    const server =
      `${process.execPath} -e "require('http').createServer((q, s) => s.end(JSON.stringify({name: 'inside', ` +
      `url: q.url}))).listen(18099, '127.0.0.1', () => console.log('ready'))" &`;
    const { stdout, stderr } = await runIn(
      bridge,
      `${server} sleep 1; ${client} 127.0.0.1 18099 /inside; kill $! 2>/dev/null; true`,
    );
    // Then it answers, and devop was not asked
    expect(lines(stdout)[0], stderr).toMatchObject({ body: { name: 'inside', url: '/inside' } });
    expect(dialer.calls).toEqual([]);
  });

  it("a published port reaches the command's server inside from this machine's loopback, once it listens", async () => {
    // Given a free port of this machine
    const port = await freePort();
    // When the command, published on it, starts listening there inside its namespace after a while
    const server =
      `sleep 1; exec ${process.execPath} -e "require('http').createServer((q, s) => s.end(JSON.stringify({name: ` +
      `'inside', url: q.url}))).listen(${port}, () => setTimeout(() => process.exit(0), 3000))"`;
    const running = runIn(bridge, server, undefined, [port]);
    // Then this machine's port is not taken before the command listens (devop waits for the command by connecting)
    expect(await answerOf(port)).toBeUndefined();
    // And once it listens, a connection to this machine's 127.0.0.1:port is answered by it
    const answer = await waitFor('the published port to answer', () => answerOf(port, '/published'), 5000);
    expect(JSON.parse(answer)).toEqual({ name: 'inside', url: '/published' });
    expect((await running).code).toBe(0);
  });

  it("DNS over UDP and TCP: A and AAAA from the cluster's DNS, NXDOMAIN for an unknown name, NOTIMP for other types", async () => {
    // When a program sends its own queries to the nameserver of /etc/resolv.conf, over UDP and over TCP
    const query = (transport: string, name: string, type: number): string =>
      `${PYTHON} ${DNS_QUERY} ${transport} ${name} ${type}`;
    const { stdout, stderr } = await runIn(
      bridge,
      [
        query('udp', SERVICE_NAME, 1),
        query('tcp', SERVICE_NAME, 1),
        query('udp', SERVICE_NAME, 28),
        query('tcp', 'nosuch.shop.svc.cluster.test', 28),
        query('udp', SERVICE_NAME, 33),
      ].join('; '),
    );
    // Then the namespace's forwarder answers each with the cluster's answer for its type
    expect(lines(stdout), stderr).toEqual([
      { transport: 'udp', name: SERVICE_NAME, type: 1, rcode: 0, addresses: [SERVICE_IP] },
      { transport: 'tcp', name: SERVICE_NAME, type: 1, rcode: 0, addresses: [SERVICE_IP] },
      { transport: 'udp', name: SERVICE_NAME, type: 28, rcode: 0, addresses: [SERVICE_IP6] },
      { transport: 'tcp', name: 'nosuch.shop.svc.cluster.test', type: 28, rcode: NXDOMAIN, addresses: [] },
      { transport: 'udp', name: SERVICE_NAME, type: 33, rcode: NOTIMP, addresses: [] },
    ]);
  });

  it('a request without the session secret is refused', async () => {
    // When something else connects to devop's socket and asks without the secret
    const answer = await new Promise<string>((resolve) => {
      const socket = netConnect(bridge.socketPath);
      let text = '';
      socket.on('data', (chunk) => (text += chunk.toString()));
      socket.on('close', () => resolve(text));
      socket.write(`wrong connect ${SERVICE_IP} ${clusterEcho.port}\n`);
    });
    // Then it gets one line saying so, and nothing was dialled
    expect(answer).toMatch(/^ERR EACCES /);
  });
});
