// What a session does through the pod besides incoming traffic: outgoing connections from the pod's netns, DNS with the
// target's resolv.conf (search, ndots) and /etc/hosts, the container's env, and files of its filesystem.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { MuxStream } from '../../shared/mux.js';
import { requireRoot } from '../../testkit/root.js';
import { PodNet, type Proc } from '../../testkit/netns.js';
import { connectSession, type TestSession } from '../../testkit/session-client.js';

const run = requireRoot('agent pod io');

function collect(stream: MuxStream): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.once('end', () => resolve(Buffer.concat(chunks).toString()));
    stream.once('error', reject);
  });
}

describe.runIf(run)('agent: outgoing, DNS, env and files through the pod', () => {
  const net = new PodNet();
  let dns: Proc;
  let session: TestSession;

  beforeAll(async () => {
    await net.setup();
    await net.startPod({ port: 3000, env: { SECRET_FROM_POD: 's3cr3t', DATABASE_URL: 'postgres://db:5432/app' } });
    dns = await net.startDns({ 'api.team.svc.cluster.local': net.podIP, 'db.svc.cluster.local': '10.88.0.8' });
    const agent = await net.startAgent();
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    session = await connectSession(control);
  });
  afterAll(async () => {
    session?.mux.close('test over');
    await net.teardown();
  });

  test("an outgoing connection to 127.0.0.1 is made inside the pod netns (it reaches the pod's own app)", async () => {
    const stream = session.mux.openStream({ kind: 'outgoing', host: '127.0.0.1', port: 3000 });
    const accepted = new Promise((r) => stream.once('accepted', r));
    stream.end('GET /from-outgoing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect(await accepted).toMatchObject({ remoteAddress: '127.0.0.1', remotePort: 3000 });
    expect(await collect(stream)).toMatch(/\r\n\r\npod: GET \/from-outgoing$/);
  });

  test("an outgoing connection by short name resolves through the pod's search domains", async () => {
    const stream = session.mux.openStream({ kind: 'outgoing', host: 'api', port: 3000 });
    stream.end('GET /by-name HTTP/1.1\r\nHost: api\r\nConnection: close\r\n\r\n');
    expect(await collect(stream)).toMatch(/pod: GET \/by-name$/);
  });

  test('a refused outgoing connection resets the stream with the errno', async () => {
    const stream = session.mux.openStream({ kind: 'outgoing', host: '127.0.0.1', port: 1 });
    stream.end();
    await expect(collect(stream)).rejects.toThrow(/ECONNREFUSED/);
  });

  test("DNS uses the target's resolv.conf (search, ndots) and /etc/hosts", async () => {
    const api = await session.request({ type: 'dnsResolve', id: 'd1', name: 'api', family: 4 }, ['dnsResult']);
    expect(api.addresses).toEqual([{ address: net.podIP, family: 4 }]);
    // ndots:5 → "api" is tried with the first search domain before anything else
    expect(dns.lines.find((l) => l.startsWith('QUERY'))).toBe('QUERY api.team.svc.cluster.local 1');
    const db = await session.request({ type: 'dnsResolve', id: 'd2', name: 'db', family: 4 }, ['dnsResult']);
    expect(db.addresses).toEqual([{ address: '10.88.0.8', family: 4 }]);
    // /etc/hosts of the container (bind-mounted in its mount namespace), not the node's
    const pinned = await session.request({ type: 'dnsResolve', id: 'd3', name: 'pinned.example' }, ['dnsResult']);
    expect(pinned.addresses).toEqual([{ address: '10.77.0.7', family: 4 }]);
    const missing = await session.request({ type: 'dnsResolve', id: 'd4', name: 'nope', family: 4 }, ['dnsResult']);
    expect(missing.addresses).toEqual([]);
    expect(missing.error?.code).toBe('ENOTFOUND');
  });

  test("env is the container's, read from /proc/PID/environ", async () => {
    const env = await session.request({ type: 'envRead', id: 'e1' }, ['env']);
    expect(env.vars).toMatchObject({
      SECRET_FROM_POD: 's3cr3t',
      DATABASE_URL: 'postgres://db:5432/app',
      POD_NAME: 'pod',
      PORT: '3000',
    });
  });

  test(
    "files are read from the container's filesystem (/proc/PID/root); a missing one resets with " + 'ENOENT',
    async () => {
      const stream = session.mux.openStream({ kind: 'file', path: '/etc/resolv.conf' });
      const accepted = new Promise<{ size?: number }>((r) => stream.once('accepted', r));
      stream.end();
      const text = await collect(stream);
      expect(text).toBe(net.readHostFile(`${net.dir}/resolv.conf`));
      expect((await accepted).size).toBe(Buffer.byteLength(text));
      const missing = session.mux.openStream({ kind: 'file', path: '/no/such/file' });
      missing.end();
      await expect(collect(missing)).rejects.toThrow(/ENOENT/);
    },
  );
});
