// Outgoing UDP through devop's real proxy, with a "cluster" on this machine: SOCKS5 UDP ASSOCIATE (RFC 1928 §7) with
// the session's secret, and the LD_PRELOAD shim's UDP: python3 with connect()+send/recv and with sendto/recvfrom
// reaches a cluster address, and a DNS query it sends itself to this machine's resolv.conf nameserver is answered by
// the cluster's nameserver, with the reply's source shown as the nameserver it asked; so are dig's, glibc's res_query
// and Java's JNDI DNS provider. The stand-in's run is udp-e2e.test.ts.
import { execFile, execFileSync } from 'node:child_process';
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { EventEmitter } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect as netConnect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocalDialer, type ClusterDialer } from '../../cli/outgoing/dialer.js';
import { outgoingEnv } from '../../cli/outgoing/env.js';
import { startOutgoingProxy, type OutgoingProxy } from '../../cli/outgoing/proxy.js';
import type { UdpAssociation } from '../../cli/outgoing/udp.js';
import type { Datagram } from '../../shared/udp-datagrams.js';
import { ROOT } from '../../testkit/e2e.js';
import { readExactly } from '../../cli/outgoing/streams.js';

const SHIM = join(ROOT, 'dist', 'devop-outgoing.so');
const PYTHON = '/usr/bin/python3';
const UDP_CLIENT = join(ROOT, 'test', 'outgoing', 'fixtures', 'udp-client.py');
const RES_QUERY_SOURCE = join(ROOT, 'test', 'outgoing', 'fixtures', 'res-query.c');
const JNDI_DNS = join(ROOT, 'test', 'outgoing', 'fixtures', 'JndiDns.java');
/** A JDK (scripts/setup.sh does not install one: the JNDI case runs where there is one). */
const HAS_JAVA = existsSync('/usr/bin/java');
/** A "service IP" of the test's cluster: TEST-NET-2 (RFC 5737), routed nowhere from this machine. */
const SERVICE_IP = '198.51.100.9';
const SERVICE_NAME = 'echo.udp.svc.cluster.test';
/** What the test cluster's nameserver answers for every A query. */
const CLUSTER_ANSWER = '10.96.7.7';
const SECRET = 'udp-test-secret';

/** A UDP echo server on loopback: it answers each datagram with `echo:` and the datagram. */
async function udpEcho(): Promise<{ port: number; socket: UdpSocket }> {
  const socket = createSocket('udp4');
  socket.on('message', (msg, from) => socket.send(Buffer.concat([Buffer.from('echo:'), msg]), from.port, from.address));
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return { port: socket.address().port, socket };
}

/** The test cluster's nameserver: every A query gets CLUSTER_ANSWER (RFC 1035 §4.1, one answer with a pointer). */
async function clusterDns(): Promise<{ port: number; socket: UdpSocket; queries: string[] }> {
  const socket = createSocket('udp4');
  const queries: string[] = [];
  socket.on('message', (query, from) => {
    let at = 12;
    const labels: string[] = [];
    while (query[at] !== 0) {
      labels.push(query.subarray(at + 1, at + 1 + query[at]).toString());
      at += 1 + query[at];
    }
    queries.push(labels.join('.'));
    const question = query.subarray(12, at + 5);
    const header = Buffer.from([query[0], query[1], 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
    const answer = Buffer.from([0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, ...CLUSTER_ANSWER.split('.').map(Number)]);
    socket.send(Buffer.concat([header, question, answer]), from.port, from.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return { port: socket.address().port, socket, queries };
}

/**
 * The test cluster's UDP: SERVICE_IP and SERVICE_NAME are the echo server (any port maps to it), '' is the cluster's
 * nameserver; replies carry the cluster's names for their sources, as the agent's do.
 */
function testCluster(echoPort: number, dnsPort: number, opened: Datagram[][]): ClusterDialer {
  const base = createLocalDialer({ hosts: { [SERVICE_NAME]: SERVICE_IP } });
  return {
    ...base,
    udp(): UdpAssociation {
      const socket = createSocket('udp4');
      const events = new EventEmitter();
      const sent: Datagram[] = [];
      opened.push(sent);
      socket.on('message', (payload, from) => {
        const host = from.port === dnsPort ? '' : SERVICE_IP;
        events.emit('datagram', { host, port: from.port === dnsPort ? 53 : 7007, payload });
      });
      socket.on('close', () => events.emit('close'));
      return {
        send(datagram) {
          sent.push(datagram);
          if (datagram.host === '') socket.send(datagram.payload, dnsPort, '127.0.0.1');
          else if (datagram.host === SERVICE_IP || datagram.host === SERVICE_NAME)
            socket.send(datagram.payload, echoPort, '127.0.0.1');
          return true;
        },
        on(event: 'datagram' | 'close', listener: (...args: never[]) => void) {
          events.on(event, listener as (...args: unknown[]) => void);
          return this;
        },
        close: () => socket.close(),
      };
    },
  };
}

/** SOCKS5 greeting, RFC 1929 authentication and a UDP ASSOCIATE; resolves with the reply's code and bound port. */
async function socksAssociate(port: number, password: string): Promise<{ tcp: Socket; reply: number; port: number }> {
  const tcp = netConnect({ host: '127.0.0.1', port });
  await new Promise((resolve) => tcp.once('connect', resolve));
  tcp.write(Buffer.from([5, 1, 2]));
  await readExactly(tcp, 2, 'method');
  tcp.write(
    Buffer.concat([Buffer.from([1, 5]), Buffer.from('devop'), Buffer.from([password.length]), Buffer.from(password)]),
  );
  const [, status] = await readExactly(tcp, 2, 'auth');
  if (status !== 0) return { tcp, reply: -1, port: 0 };
  tcp.write(Buffer.from([5, 3, 0, 1, 0, 0, 0, 0, 0, 0]));
  const reply = await readExactly(tcp, 10, 'reply');
  return { tcp, reply: reply[1], port: reply.readUInt16BE(8) };
}

function socksDatagram(host: string, port: number, payload: string): Buffer {
  const head = Buffer.from([0, 0, 0, 3, host.length]);
  const portBytes = Buffer.alloc(2);
  portBytes.writeUInt16BE(port);
  return Buffer.concat([head, Buffer.from(host), portBytes, Buffer.from(payload)]);
}

function output(command: string, args: string[], env: Record<string, string>): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { env, timeout: 60_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${command} failed: ${err.message}\n${stderr}`)) : resolve(stdout),
    );
  });
}

async function run(args: string[], env: Record<string, string>): Promise<Record<string, unknown>[]> {
  const stdout = await output(PYTHON, [UDP_CLIENT, ...args], env);
  return stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** The env `devop exec` gives a local command, for a proxy. */
function shimEnv(proxy: OutgoingProxy): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    // A query that is not answered fails in a second (the default is two tries of 5 s), not after the test's timeout.
    RES_OPTIONS: 'timeout:1 attempts:1',
    ...outgoingEnv(
      {},
      {
        proxy: { host: proxy.host, port: proxy.port },
        credentials: proxy.credentials,
        include: [],
        exclude: [],
        shimPath: SHIM,
      },
    ),
  };
}

describe.skipIf(process.platform !== 'linux')('outgoing UDP: SOCKS5 UDP ASSOCIATE and the shim', () => {
  let echo: Awaited<ReturnType<typeof udpEcho>>;
  let dns: Awaited<ReturnType<typeof clusterDns>>;
  let proxy: OutgoingProxy;
  const opened: Datagram[][] = [];

  beforeAll(async () => {
    // Given a UDP echo server "in the cluster" behind SERVICE_IP, the cluster's nameserver, and devop's proxy over them
    echo = await udpEcho();
    dns = await clusterDns();
    proxy = await startOutgoingProxy({ dialer: testCluster(echo.port, dns.port, opened), secret: SECRET });
  });
  afterAll(async () => {
    await proxy?.close();
    echo?.socket.close();
    dns?.socket.close();
  });

  it('SOCKS5 UDP ASSOCIATE with the secret relays a datagram to a cluster name and back with its source in the header', async () => {
    // When a SOCKS5 client authenticates, asks for a UDP association and sends a datagram to the service by name
    const { tcp, reply, port } = await socksAssociate(proxy.port, SECRET);
    expect(reply).toBe(0);
    const client = createSocket('udp4');
    await new Promise<void>((resolve) => client.bind(0, '127.0.0.1', resolve));
    const answer = new Promise<Buffer>((resolve) => client.once('message', resolve));
    client.send(socksDatagram(SERVICE_NAME, 7007, 'ping'), port, '127.0.0.1');
    // Then the answer comes back with the §7 header naming the service's address and port, then the echo
    const got = await answer;
    expect([...got.subarray(0, 4)]).toEqual([0, 0, 0, 1]);
    expect([...got.subarray(4, 8)].join('.')).toBe(SERVICE_IP);
    expect(got.readUInt16BE(8)).toBe(7007);
    expect(got.subarray(10).toString()).toBe('echo:ping');
    // And the name went to the cluster unresolved
    expect(opened.at(-1)?.[0]).toMatchObject({ host: SERVICE_NAME, port: 7007 });
    // And another local port's datagrams to the same relay are not taken (the association is the first sender's)
    const stranger = createSocket('udp4');
    await new Promise<void>((resolve) => stranger.bind(0, '127.0.0.1', resolve));
    const before = opened.at(-1)?.length;
    stranger.send(socksDatagram(SERVICE_NAME, 7007, 'intruder'), port, '127.0.0.1');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(opened.at(-1)?.length).toBe(before);
    stranger.close();
    client.close();
    tcp.destroy();
  });

  it('SOCKS5 UDP ASSOCIATE without the secret is refused at authentication', async () => {
    const { tcp, reply } = await socksAssociate(proxy.port, 'wrong');
    expect(reply).toBe(-1);
    expect(proxy.refused()).toBeGreaterThan(0);
    tcp.destroy();
  });

  it('SOCKS5 UDP ASSOCIATE when the agent carries no UDP is "command not supported"', async () => {
    const noUdp = await startOutgoingProxy({
      dialer: testCluster(echo.port, dns.port, []),
      secret: SECRET,
      udpRefusal: 'agent 0.1.0 does not relay UDP',
    });
    const { tcp, reply } = await socksAssociate(noUdp.port, SECRET);
    expect(reply).toBe(7);
    tcp.destroy();
    await noUdp.close();
  });

  it.skipIf(!existsSync(SHIM))(
    'python3 under the shim: connected and unconnected UDP reach the cluster; its own DNS query, the cluster answers',
    async () => {
      const env = shimEnv(proxy);
      const nameserver = /^\s*nameserver\s+(\S+)/m.exec(readFileSync('/etc/resolv.conf', 'utf8'))?.[1] ?? '127.0.0.1';
      // When a Python program sends UDP to the service's address with connect()+send and with sendto, and asks this
      // machine's nameserver for a name itself
      const [connected, unconnected, query] = await run(
        [`connected,${SERVICE_IP},7007,one`, `sendto,${SERVICE_IP},7007,two`, `dns,api.team.svc.cluster.test`],
        env,
      );
      // Then both datagrams were echoed through the cluster, and each socket saw the service as its peer
      expect(connected).toMatchObject({ body: 'echo:one', peer: [SERVICE_IP, 7007] });
      expect(unconnected).toMatchObject({ body: 'echo:two', source: [SERVICE_IP, 7007] });
      // And the query was answered by the cluster's nameserver, the reply seemingly from the nameserver it asked
      expect(query).toMatchObject({ body: [CLUSTER_ANSWER], rcode: 0, idMatches: true, source: [nameserver, 53] });
      expect(dns.queries).toContain('api.team.svc.cluster.test');
    },
  );

  it.skipIf(!existsSync(SHIM))(
    'dig and a C program calling res_query under the shim are answered by the cluster',
    async () => {
      const work = mkdtempSync(join(tmpdir(), 'devop-udp-'));
      try {
        const resQuery = join(work, 'res-query');
        execFileSync('cc', ['-O2', '-o', resQuery, RES_QUERY_SOURCE, '-lresolv']);
        dns.queries.length = 0;
        // When dig asks this machine's nameserver (its own query, over UDP), and a C program calls glibc's res_query
        const dig = await output(
          'dig',
          ['+short', '+tries=1', '+time=3', 'dig.team.svc.cluster.test', 'A'],
          shimEnv(proxy),
        );
        const [resAnswer] = (await output(resQuery, ['res.team.svc.cluster.test'], shimEnv(proxy)))
          .split('\n')
          .filter(Boolean)
          .map((line) => JSON.parse(line) as Record<string, unknown>);
        // Then both got the cluster nameserver's answer
        expect(dig.trim()).toBe(CLUSTER_ANSWER);
        expect(resAnswer).toMatchObject({ body: [CLUSTER_ANSWER] });
        expect(dns.queries).toEqual(expect.arrayContaining(['dig.team.svc.cluster.test', 'res.team.svc.cluster.test']));
      } finally {
        rmSync(work, { recursive: true, force: true });
      }
    },
  );

  it.skipIf(!existsSync(SHIM) || !HAS_JAVA)(
    "Java's JNDI DNS provider under the shim is answered by the cluster",
    async () => {
      // When Java's JNDI DNS provider asks for a name (its own queries, to the resolv.conf nameservers)
      const [jndi] = (await output('java', [JNDI_DNS, 'jndi.team.svc.cluster.test'], shimEnv(proxy)))
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      // Then it got the cluster nameserver's answer
      expect(jndi).toMatchObject({ body: [CLUSTER_ANSWER] });
      expect(dns.queries).toContain('jndi.team.svc.cluster.test');
    },
  );
});
