// --record over a real mux on a real socket pair: stolen HTTP and HTTPS exchanges reach the local command as before and
// land in the HAR file (request, answer, timing, pod); other bytes are spliced unrecorded.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, request as httpRequest, type IncomingMessage } from 'node:http';
import { createServer as createHttpsServer, request as httpsRequest } from 'node:https';
import { createServer as createNetServer, type AddressInfo, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { afterEach, describe, expect, it } from 'vitest';
import { createAgentMux, createClientMux, type AgentMux, type MuxStream } from '../../shared/mux.js';
import { incomingStreamHandler } from '../services/incoming.js';
import { makeSessionCert } from '../process/session-cert.js';
import { BODY_LIMIT_BYTES, HarRecorder, readHar, type Har } from './har.js';
import { REDACTED } from './redact.js';
import { ExchangeRecorder, sniff } from './tap.js';
import { socketPair } from '../../testkit/sockets.js';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

async function listening(server: Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => server.close());
  return (server.address() as AddressInfo).port;
}

/** The local command: answers JSON naming what it got. */
function answer(req: IncomingMessage, res: import('node:http').ServerResponse): void {
  let body = '';
  req.setEncoding('utf8').on('data', (t: string) => (body += t));
  req.on('end', () => {
    res.writeHead(req.url === '/missing' ? 404 : 200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ method: req.method, url: req.url, body }));
  });
}

async function setup(
  localPort: number,
  options: { keepSecrets?: boolean } = {},
): Promise<{ agent: AgentMux; har: HarRecorder; file: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'devop-record-'));
  const file = join(dir, 'session.har');
  const [a, b] = await socketPair(cleanups);
  const agent = createAgentMux(a);
  const client = createClientMux(b);
  const har = new HarRecorder(file, '0.0.0-test', undefined, { ...options, env: { XDG_CONFIG_HOME: dir } });
  await har.start();
  const handler = incomingStreamHandler({
    ports: [{ remote: 8443, local: localPort }],
    recorder: new ExchangeRecorder(har),
  });
  client.on('stream', (stream) => handler(stream, 'farm-operator-abc'));
  cleanups.push(() => {
    agent.close();
    client.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { agent, har, file };
}

function stolen(agent: AgentMux): MuxStream {
  return agent.openStream({
    kind: 'incoming',
    port: 8443,
    mode: 'steal',
    remoteAddress: '10.0.0.2',
    remotePort: 40000,
  });
}

function send(
  tls: boolean,
  stream: MuxStream,
  options: { method: string; path: string; body?: string; headers?: Record<string, string> },
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const request = tls ? httpsRequest : httpRequest;
    const req = request(
      {
        method: options.method,
        path: options.path,
        headers: {
          host: 'farm.default.svc',
          'content-type': 'application/json',
          connection: 'close',
          ...options.headers,
        },
        createConnection: (() =>
          tls
            ? tlsConnect({ socket: stream, rejectUnauthorized: false, servername: 'farm.default.svc' })
            : stream) as never,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8').on('data', (t: string) => (body += t));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

describe('--record', () => {
  for (const tls of [false, true]) {
    it(`${tls ? 'HTTPS' : 'HTTP'}: the local command answers, and the exchange is in the HAR, with its pod`, async () => {
      // Given a local command (over TLS, with a certificate of its own, when the client speaks TLS), and a recording
      const server = tls ? createHttpsServer(makeSessionCert('devop --record test'), answer) : createHttpServer(answer);
      const { agent, har, file } = await setup(await listening(server));
      // When two stolen requests arrive, one with a body
      const a = await send(tls, stolen(agent), {
        method: 'POST',
        path: '/apis/x?dryRun=All',
        body: '{"kind":"Llama"}',
      });
      const b = await send(tls, stolen(agent), { method: 'GET', path: '/missing' });
      // Then the client got the local command's answers
      expect(a).toEqual({
        status: 200,
        body: JSON.stringify({ method: 'POST', url: '/apis/x?dryRun=All', body: '{"kind":"Llama"}' }),
      });
      expect(b.status).toBe(404);
      // And the HAR holds both, with request, answer, timing, pod and ports
      await har.flush();
      const written = JSON.parse(readFileSync(file, 'utf8')) as Har;
      expect(written.log.version).toBe('1.2');
      expect(written.log.creator.name).toBe('devop');
      const [first, second] = written.log.entries;
      expect(first.request).toMatchObject({
        method: 'POST',
        url: `${tls ? 'https' : 'http'}://farm.default.svc/apis/x?dryRun=All`,
        httpVersion: 'HTTP/1.1',
        queryString: [{ name: 'dryRun', value: 'All' }],
        postData: { mimeType: 'application/json', text: '{"kind":"Llama"}' },
        bodySize: 16,
      });
      expect(first.request.headers).toContainEqual({ name: 'content-type', value: 'application/json' });
      expect(first.response).toMatchObject({ status: 200, content: { mimeType: 'application/json', text: a.body } });
      expect(first.response.content.size).toBe(Buffer.byteLength(a.body));
      expect(first).toMatchObject({ _pod: 'farm-operator-abc', _port: 8443 });
      expect(first.time).toBeGreaterThanOrEqual(0);
      expect(first.timings.wait).toBeGreaterThanOrEqual(0);
      expect(first.time).toBe(first.timings.send + first.timings.wait + first.timings.receive);
      expect(new Date(first.startedDateTime).getTime()).toBeGreaterThan(Date.now() - 60_000);
      expect(second.response.status).toBe(404);
      expect(second.request.postData).toBeUndefined();
      // And replay can read it back
      expect((await readHar(file)).map((e) => e.request.method)).toEqual(['POST', 'GET']);
    });
  }

  it('keeps a body whole up to the bound, and says so when it cut it', async () => {
    // Given a local command that answers 1.5 × the bound
    const big = 'x'.repeat(BODY_LIMIT_BYTES * 1.5);
    const server = createHttpServer((_req, res) => res.end(big));
    const { agent, har, file } = await setup(await listening(server));
    // When it is asked once
    const r = await send(false, stolen(agent), { method: 'GET', path: '/big' });
    // Then the client got all of it, and the HAR keeps the bound's worth, the whole size and the cut
    expect(r.body.length).toBe(big.length);
    await har.flush();
    const content = (JSON.parse(readFileSync(file, 'utf8')) as Har).log.entries[0].response.content;
    expect(content.size).toBe(big.length);
    expect(content.text.length).toBe(BODY_LIMIT_BYTES);
    expect(content._cut).toBe(true);
  });

  it('splices bytes that are neither TLS nor HTTP, unrecorded', async () => {
    // Given a local command speaking its own protocol
    const server = createNetServer((s) => s.on('data', (d) => s.end(`echo ${d}`)));
    const { agent, har, file } = await setup(await listening(server));
    // When a stolen connection carries it
    const stream = stolen(agent);
    const got = new Promise<string>((resolve) => {
      let text = '';
      stream.setEncoding('utf8').on('data', (t: string) => (text += t));
      stream.on('end', () => resolve(text));
    });
    stream.write('\u0000hello');
    // Then it reaches the local command as is, and nothing is recorded
    expect(await got).toBe('echo \u0000hello');
    await har.flush();
    expect((JSON.parse(readFileSync(file, 'utf8')) as Har).log.entries).toEqual([]);
  });

  it('records a request whose Host is no host under the pod port, and devop keeps running', async () => {
    // Given a recording session
    const server = createHttpServer(answer);
    const { agent, har, file } = await setup(await listening(server));
    // When a client sends a Host header that no URL can hold
    const stream = stolen(agent);
    const got = new Promise<string>((resolve) => {
      let text = '';
      stream.setEncoding('utf8').on('data', (t: string) => (text += t));
      stream.on('end', () => resolve(text));
    });
    stream.write('GET /x HTTP/1.1\r\nHost: not a host\r\nConnection: close\r\n\r\n');
    // Then the local command answered, and the HAR names the pod's port with the path as sent
    expect(await got).toMatch(/^HTTP\/1\.1 200 /);
    await har.flush();
    const [entry] = (JSON.parse(readFileSync(file, 'utf8')) as Har).log.entries;
    expect(entry.request.url).toBe('http://127.0.0.1:8443/%2Fx');
  });

  describe('credentials', () => {
    /** An AdmissionReview as kube-apiserver sends it for an UPDATE of a Secret (whole objects, base64 data). */
    const review = {
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      request: {
        uid: 'u1',
        kind: { group: '', version: 'v1', kind: 'Secret' },
        operation: 'UPDATE',
        object: { kind: 'Secret', apiVersion: 'v1', metadata: { name: 'db' }, data: { password: 'bmV3LXB3' } },
        oldObject: { kind: 'Secret', apiVersion: 'v1', metadata: { name: 'db' }, data: { password: 'b2xkLXB3' } },
      },
    };
    const credentialHeaders = {
      authorization: 'Bearer sa-token-123',
      cookie: 'session=cookie-456',
      'x-remote-user': 'alice',
      'x-remote-group': 'system:masters',
      'x-remote-extra-scopes': 'scope-789',
    };
    /** The local command answers with a Secret and sets a cookie. */
    const secretServer = () =>
      createHttpServer((req, res) => {
        req.resume();
        req.on('end', () => {
          res.writeHead(200, { 'content-type': 'application/json', 'set-cookie': 'session=answer-cookie' });
          res.end(
            JSON.stringify({ kind: 'Secret', metadata: { name: 'db' }, data: { token: 'c2VjcmV0LWFuc3dlcg==' } }),
          );
        });
      });
    const recorded = async (keepSecrets: boolean): Promise<string> => {
      const { agent, har, file } = await setup(await listening(secretServer()), { keepSecrets });
      await send(false, stolen(agent), {
        method: 'POST',
        path: '/validate',
        body: JSON.stringify(review),
        headers: credentialHeaders,
      });
      await har.flush();
      return readFileSync(file, 'utf8');
    };
    const secrets = [
      'sa-token-123',
      'cookie-456',
      'alice',
      'system:masters',
      'scope-789',
      'bmV3LXB3',
      'b2xkLXB3',
      'answer-cookie',
      'c2VjcmV0LWFuc3dlcg==',
    ];

    it('are left out of the HAR, and the entry says what was left out', async () => {
      // Given a recording without --record-secrets
      // When a webhook call with credential headers and a Secret in its AdmissionReview is stolen
      const text = await recorded(false);
      // Then no credential and no Secret value is in the file, while the rest of the exchange is
      for (const secret of secrets) expect(text).not.toContain(secret);
      const [entry] = (JSON.parse(text) as Har).log.entries;
      expect(entry.request.headers).toContainEqual({ name: 'authorization', value: REDACTED });
      expect(entry.response.headers).toContainEqual({ name: 'set-cookie', value: REDACTED });
      const body = JSON.parse(entry.request.postData?.text ?? '') as typeof review;
      expect(body.request.object).toMatchObject({ metadata: { name: 'db' }, data: { password: REDACTED } });
      expect(body.request.oldObject.data.password).toBe(REDACTED);
      expect(entry._redacted).toEqual(
        expect.arrayContaining([
          'request header authorization',
          'request header x-remote-extra-scopes',
          'response header set-cookie',
          'request body Secret values',
          'response body Secret values',
        ]),
      );
      expect((JSON.parse(text) as Har).log._devop?.redacted).toBe(true);
    });

    it('are kept with --record-secrets', async () => {
      const text = await recorded(true);
      for (const secret of secrets) expect(text).toContain(secret);
      expect((JSON.parse(text) as Har).log._devop?.redacted).toBe(false);
    });
  });

  it('tells TLS, HTTP and anything else apart by the first bytes', () => {
    expect(sniff(Buffer.from([0x16, 0x03, 0x01]))).toBe('tls');
    expect(sniff(Buffer.from('GET / HTTP/1.1\r\n'))).toBe('http');
    expect(sniff(Buffer.from('PROPFIND /x HTTP/1.1'))).toBe('http');
    expect(sniff(Buffer.from('SSH-2.0-OpenSSH'))).toBe('other');
  });

  it('a path devop cannot write is one line before anything runs', async () => {
    const har = new HarRecorder('/nonexistent-dir/session.har', '0');
    await expect(har.start()).rejects.toThrow(
      /--record \/nonexistent-dir\/session\.har: the folder \/nonexistent-dir does not exist/,
    );
  });
});
