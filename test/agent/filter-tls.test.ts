// Filtered steal of a port whose workload serves TLS itself: given the workload's certificate and key on the subscribe,
// the agent ends the client's TLS (ALPN h2 or http/1.1, as the client offers), routes each request by the filter and
// opens TLS again towards the pod's own listener and the local command (both serve the same certificate); without
// them a TLS connection goes to the pod untouched and the session hears one line naming --tls-secret.
import { spawn } from 'node:child_process';
import { copyFile, mkdtemp, readFile, rm } from 'node:fs/promises';
import { connect as connectHttp2 } from 'node:http2';
import { request } from 'node:https';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as connectTls } from 'node:tls';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { TlsMaterial } from '../../shared/protocol.js';
import { makeCerts } from '../../standin/index.js';
import { requireRoot } from '../../testkit/root.js';
import { PodNet, type AgentProc, type Proc } from '../../testkit/netns.js';
import { connectSession, type TestSession } from '../../testkit/session-client.js';
import { freePort } from '../../testkit/sockets.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent TLS filter');
const POD_PORT = 3443;
const NAME = 'tls-server.test';
const HTTPS_ECHO = join(import.meta.dirname, '../e2e/fixtures/https-echo.mjs');

interface Answer {
  from: string;
  /** The protocol the client got from the agent, and the one the answering server got. */
  clientAlpn: string;
  serverAlpn: string;
}

describe.runIf(run)('agent: HTTP-filtered steal of a TLS port with the workload certificate', () => {
  const net = new PodNet();
  let pod: Proc;
  let agent: AgentProc;
  let client: string;
  let session: TestSession;
  let material: TlsMaterial;
  let localStop: () => void;
  /** The test's throwaway CA, certificate and key: removed at the end. */
  const dirs: string[] = [];

  /** One request through the pod's port from the client netns that verifies the certificate for NAME. */
  function ask(alpn: 'h2' | 'http/1.1', dev?: string): Promise<Answer> {
    const timeout = new Promise<Answer>((r) =>
      setTimeout(() => r({ from: 'no answer within 10 s', clientAlpn: alpn, serverAlpn: '' }), 10_000).unref(),
    );
    return Promise.race([asked(alpn, dev), timeout]);
  }

  function asked(alpn: 'h2' | 'http/1.1', dev?: string): Promise<Answer> {
    const headers = dev ? { 'x-dev': dev } : {};
    const tlsTo = () =>
      connectTls({ socket: connect(client), servername: NAME, ca: material.ca, ALPNProtocols: [alpn] });
    return new Promise((resolve, reject) => {
      const done = (clientAlpn: string, text: string) => {
        let body: { from: string; alpn: string };
        try {
          body = JSON.parse(text) as { from: string; alpn: string };
        } catch {
          body = { from: `not JSON: ${text}`, alpn: '' }; // the agent's own answer (a 502) or nothing
        }
        resolve({ from: body.from, clientAlpn, serverAlpn: body.alpn });
      };
      if (alpn === 'h2') {
        const conn = connectHttp2(`https://${NAME}:${POD_PORT}`, { createConnection: tlsTo });
        conn.on('error', reject);
        const stream = conn.request({ ':path': '/', ...headers });
        let text = '';
        stream.setEncoding('utf8').on('data', (c: string) => (text += c));
        stream.on('end', () => {
          done(conn.alpnProtocol ?? '', text);
          conn.close();
        });
        stream.on('error', reject);
        return;
      }
      const req = request({ host: NAME, port: POD_PORT, path: '/', headers, createConnection: tlsTo }, (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (c: string) => (text += c));
        res.on('end', () => done(String((res.socket as { alpnProtocol?: string }).alpnProtocol), text));
      });
      req.on('error', reject);
      req.end();
    });
  }

  beforeAll(async () => {
    const dir = await mkdtemp(join(tmpdir(), 'devop-tls-'));
    dirs.push(dir);
    const certs = await makeCerts(dir, [`DNS:${NAME}`]);
    await copyFile(join(dir, 'apiserver.crt'), join(dir, 'tls.crt'));
    await copyFile(join(dir, 'apiserver.key'), join(dir, 'tls.key'));
    material = { cert: certs.certPem, key: certs.keyPem, ca: await readFile(certs.caPath, 'utf8') };
    await net.setup();
    await net.startPod({ port: 3000 });
    pod = await net.runListener(net.podNs, HTTPS_ECHO, ['serve', 'pod', String(POD_PORT), dir]);
    const localPort = await freePort();
    const local = spawn(process.execPath, [HTTPS_ECHO, 'serve', 'local', String(localPort), dir, '127.0.0.1']);
    localStop = () => local.kill();
    let out = '';
    local.stdout.on('data', (c: Buffer) => (out += c));
    await waitFor('the local HTTPS server', () => out.includes('LISTENING'));
    agent = await net.startAgent();
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    client = await net.relay(net.clientNs, net.podIP, POD_PORT);
    session = await connectSession(control, { local: { port: localPort }, user: 'alice' });
  });
  afterAll(async () => {
    session?.mux.close('test over');
    localStop?.();
    await net.teardown();
    await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
  });

  test('with the certificate: x-dev: me reaches the local command, the rest the pod, over h1 and h2', async () => {
    // Given a filtered steal of the TLS port with the workload's certificate, key and CA
    const subscribed = await session.subscribe(POD_PORT, 'steal', {
      filter: { header: 'x-dev: ^me$', match: 'all' },
      tls: material,
    });
    expect(subscribed.type).toBe('subscribed');
    // When clients that verify the certificate ask over each protocol, with and without the header
    const answers = await Promise.all([ask('http/1.1', 'me'), ask('http/1.1'), ask('h2', 'me'), ask('h2')]);
    // Then the header's requests were answered by the local command, the others by the pod, each in the protocol the
    // client chose, on both sides of the agent
    expect(answers, agent.lines.slice(-30).join('\n')).toEqual([
      { from: 'local', clientAlpn: 'http/1.1', serverAlpn: 'http/1.1' },
      { from: 'pod', clientAlpn: 'http/1.1', serverAlpn: 'http/1.1' },
      { from: 'local', clientAlpn: 'h2', serverAlpn: 'h2' },
      { from: 'pod', clientAlpn: 'h2', serverAlpn: 'h2' },
    ]);
  });

  test('without a certificate: TLS goes to the pod untouched, the session hears --tls-secret once', async () => {
    // Given the same filter with no certificate
    const subscribed = await session.subscribe(POD_PORT, 'steal', { filter: { header: 'x-dev: ^me$', match: 'all' } });
    expect(subscribed.type).toBe('subscribed');
    // When a client asks with the header, twice
    const answers = [await ask('http/1.1', 'me'), await ask('h2', 'me')];
    // Then the pod answered both, over the TLS the client made with it
    expect(answers.map((a) => a.from)).toEqual(['pod', 'pod']);
    // And the session heard one line naming the fix
    const lines = session.messages.filter((m) => m.type === 'log' && m.message.includes('--tls-secret'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 'warn' });
    expect((lines[0] as { message: string }).message).toContain(`port ${POD_PORT} speaks TLS`);
    expect(pod.lines.some((l) => l.includes('"dev":"me"'))).toBe(true);
  });

  test('a key that does not fit the certificate is refused at subscribe, naming the Secret', async () => {
    // Given a certificate with another certificate's key
    const otherDir = await mkdtemp(join(tmpdir(), 'devop-tls-'));
    dirs.push(otherDir);
    const other = await makeCerts(otherDir, [`DNS:${NAME}`]);
    // When it is given on a subscribe
    const answer = await session.subscribe(POD_PORT, 'steal', {
      filter: { header: 'x-dev: ^me$', match: 'all' },
      tls: { cert: material.cert, key: other.keyPem },
    });
    // Then the agent refuses it with the fix, without the key in its words
    expect(answer).toMatchObject({ type: 'refused' });
    expect(JSON.stringify(answer)).toContain("TLS Secret's certificate and key cannot be used");
    expect(JSON.stringify(answer)).not.toContain('PRIVATE KEY');
  });
});
