// devop replay against real local servers and real HAR files: the same answers are "same", a changed one is named with
// its differences; AdmissionReviews are named by what they ask; a bad file or a silent port is one line.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { isUserError } from '../../shared/errors.js';
import { compareAnswer, jsonDifferences } from '../record/compare.js';
import type { Har, HarEntry } from '../record/har.js';
import { REDACTED } from '../record/redact.js';
import { sealKey, sealPorts } from '../record/seal.js';
import { formatReplayReport, replayOptions, runReplay, type ReplayOptions } from './replay.js';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'devop-replay-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

async function serve(handler: (req: IncomingMessage, body: string, res: ServerResponse) => void): Promise<number> {
  const server: Server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (t: string) => (body += t));
    req.on('end', () => handler(req, body, res));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => server.close());
  return (server.address() as AddressInfo).port;
}

function entry(
  method: string,
  path: string,
  status: number,
  answer: unknown,
  localPort: number,
  requestBody?: unknown,
): HarEntry {
  const text = JSON.stringify(answer);
  return {
    startedDateTime: new Date().toISOString(),
    time: 3,
    request: {
      method,
      url: `http://farm.default.svc${path}`,
      httpVersion: 'HTTP/1.1',
      cookies: [],
      headers: [{ name: 'accept', value: 'application/json' }],
      queryString: [],
      ...(requestBody ? { postData: { mimeType: 'application/json', text: JSON.stringify(requestBody) } } : {}),
      headersSize: -1,
      bodySize: requestBody ? JSON.stringify(requestBody).length : 0,
    },
    response: {
      status,
      statusText: '',
      httpVersion: 'HTTP/1.1',
      cookies: [],
      headers: [],
      content: { mimeType: 'application/json', text, size: text.length },
      redirectURL: '',
      headersSize: -1,
      bodySize: text.length,
    },
    cache: {},
    timings: { blocked: -1, dns: -1, connect: -1, ssl: -1, send: 0, wait: 2, receive: 1 },
    _pod: 'farm-operator-abc',
    _port: 8443,
    _localPort: localPort,
  };
}

/** This user's seal key lives here in these tests (XDG_CONFIG_HOME), not in the real home. */
const keyHome = mkdtempSync(join(tmpdir(), 'devop-replay-key-'));
const env = { XDG_CONFIG_HOME: keyHome };
afterAll(() => rmSync(keyHome, { recursive: true, force: true }));

/** A HAR as another tool (or person) writes it: no seal. With `sealed`, as this user's devop writes it. */
function writeHar(entries: HarEntry[], sealed?: { redacted: boolean; ports?: number[] }): string {
  const file = join(tempDir(), 'session.har');
  const localPorts = sealed?.ports ?? [...new Set(entries.map((e) => e._localPort))];
  const har: Har = {
    log: {
      version: '1.2',
      creator: { name: 'devop', version: 'test' },
      entries,
      ...(sealed
        ? { _devop: { redacted: sealed.redacted, localPorts, seal: sealPorts(sealKey(env), localPorts) } }
        : {}),
    },
  };
  writeFileSync(file, JSON.stringify(har));
  return file;
}

function replay(file: string, flags: Parameters<typeof replayOptions>[1] = {}): ReturnType<typeof runReplay> {
  const options: ReplayOptions = { ...replayOptions(file, flags), env };
  return runReplay(options);
}

const dolly = (weight: number, createdAt: string) => ({
  kind: 'Llama',
  metadata: { name: 'dolly', creationTimestamp: createdAt },
  spec: { weight, height: 175 },
});

describe('devop replay', () => {
  it('reports the one request whose answer changed, with what changed', async () => {
    // Given a recording of three requests, and a local server that now answers one of them differently (and was
    // started at another time: its creationTimestamps differ everywhere)
    const port = await serve((req, _body, res) => {
      res.writeHead(req.url === '/llamas/nobody' ? 404 : 200, { 'content-type': 'application/json' });
      if (req.url === '/llamas/dolly') res.end(JSON.stringify(dolly(131, '2026-01-02T00:00:00Z')));
      else if (req.url === '/llamas/fernando') res.end(JSON.stringify({ kind: 'Llama', spec: { weight: 160 } }));
      else res.end(JSON.stringify({ kind: 'Status', code: 404 }));
    });
    const file = writeHar([
      entry('GET', '/llamas/dolly', 200, dolly(130, '2026-01-01T00:00:00Z'), 1),
      entry('GET', '/llamas/fernando', 200, { kind: 'Llama', spec: { weight: 160 } }, 1),
      entry('GET', '/llamas/nobody', 404, { kind: 'Status', code: 404 }, 1),
    ]);
    // When it is replayed to that server
    const report = await runReplay(replayOptions(file, { to: String(port) }));
    // Then only the first differs, by its weight; the timestamp is not a difference
    expect(report.results.map((r) => r.outcome)).toEqual(['different', 'same', 'same']);
    expect(report.summary).toEqual({ same: 2, different: 1, failed: 0, skipped: 0 });
    const first = report.results[0];
    expect(first.outcome === 'different' && first.differences).toEqual(['spec.weight: 130 → 131']);
    const text = formatReplayReport(report);
    expect(text).toContain('✗ GET /llamas/dolly 200 → 200');
    expect(text).toContain('    spec.weight: 130 → 131');
    expect(text).toMatch(/✓ GET \/llamas\/fernando 200 \(\d+ ms\) \[farm-operator-abc\]/);
    expect(text).toMatch(/3 requests replayed from .*session\.har: 2 same, 1 different\n$/);
  });

  it('sends the recorded body again, to the recorded local port by default, and names AdmissionReviews', async () => {
    // Given a webhook that allows what it is asked about, recorded on its local port
    const seen: string[] = [];
    const port = await serve((req, body, res) => {
      seen.push(`${req.method} ${req.url} ${body}`);
      const review = JSON.parse(body) as { request: { uid: string } };
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'AdmissionReview', response: { uid: review.request.uid, allowed: true } }));
    });
    const review = {
      kind: 'AdmissionReview',
      request: { uid: 'u1', operation: 'CREATE', kind: { kind: 'Deployment' }, namespace: 'default', name: 'web' },
    };
    const file = writeHar(
      [
        entry(
          'POST',
          '/validate',
          200,
          { kind: 'AdmissionReview', response: { uid: 'u1', allowed: false } },
          port,
          review,
        ),
      ],
      { redacted: true },
    );
    // When it is replayed without --to
    const report = await replay(file);
    // Then the same body reached it, and the line names the review and the changed decision
    expect(seen).toEqual([`POST /validate ${JSON.stringify(review)}`]);
    expect(report.results[0]).toMatchObject({
      request: 'POST /validate (AdmissionReview CREATE Deployment default/web)',
      outcome: 'different',
      differences: ['response.allowed: false → true'],
    });
  });

  it('replays only what --filter matches', async () => {
    const port = await serve((_req, _body, res) => res.end('{}'));
    const file = writeHar([entry('GET', '/a', 200, {}, port), entry('GET', '/b/farmpods', 200, {}, port)], {
      redacted: true,
    });
    const report = await replay(file, { filter: 'farmpods' });
    expect(report.results.map((r) => r.request)).toEqual(['GET /b/farmpods']);
  });

  it("does not send a HAR's requests to the local ports it names unless this user's devop sealed them", async () => {
    // Given a local service that is not the user's command (say, kubectl proxy), and a HAR from someone else that
    // names its port
    const seen: string[] = [];
    const port = await serve((req, _body, res) => {
      seen.push(`${req.method} ${req.url}`);
      res.end('{}');
    });
    const foreign = writeHar([entry('DELETE', '/api/v1/namespaces/prod', 200, {}, port)]);
    // And a HAR of this user's devop whose port was changed afterwards
    const edited = writeHar([entry('GET', '/llamas', 200, {}, port)], { redacted: true, ports: [port + 1] });
    for (const file of [foreign, edited]) {
      // When either is replayed without --to
      const err = await replay(file).then(
        () => undefined,
        (e: unknown) => e,
      );
      // Then devop refuses in one line naming the port and --to, and nothing reached the port
      expect(isUserError(err), String(err)).toBe(true);
      expect((err as Error).message).toMatch(
        new RegExp(`was not recorded by your devop on this machine .*local port it names \\(${port}\\)`),
      );
      expect((err as Error).message).not.toContain('\n');
      expect((err as { hint: string }).hint).toContain('--to PORT');
    }
    expect(seen).toEqual([]);
    // And with --to naming the port, the user's choice, the request is sent
    const report = await replay(foreign, { to: String(port) });
    expect(report.summary.same).toBe(1);
    expect(seen).toEqual(['DELETE /api/v1/namespaces/prod']);
  });

  it('replays a redacted HAR: redacted headers are not sent (and named), Secret values compare equal', async () => {
    // Given a local command that answers a Secret, and a redacted recording of a call to it with a bearer token
    const got: Array<string | undefined> = [];
    const port = await serve((req, _body, res) => {
      got.push(req.headers.authorization);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Secret', metadata: { name: 'db' }, data: { password: 'c2VjcmV0' } }));
    });
    const recorded = entry(
      'GET',
      '/secrets/db',
      200,
      { kind: 'Secret', metadata: { name: 'db' }, data: { password: REDACTED } },
      port,
    );
    recorded.request.headers.push({ name: 'Authorization', value: REDACTED });
    const file = writeHar([recorded], { redacted: true });
    // When it is replayed
    const report = await replay(file);
    // Then the request went without the marker as a credential, the answer is the same, and the line says so
    expect(got).toEqual([undefined]);
    expect(report.results[0]).toMatchObject({ outcome: 'same', withoutHeaders: ['authorization'] });
    expect(formatReplayReport(report)).toContain('sent without authorization (redacted when recorded)');
  });

  it('bad input is one line naming the problem and the fix', async () => {
    const dir = tempDir();
    const notJson = join(dir, 'x.har');
    writeFileSync(notJson, 'not json');
    const noEntries = join(dir, 'y.har');
    writeFileSync(noEntries, '{"log":{}}');
    const badUrl = writeHar([
      { ...entry('GET', '/', 200, {}, 1), request: { ...entry('GET', '/', 200, {}, 1).request, url: 'x' } },
    ]);
    const silent = writeHar([entry('GET', '/', 200, {}, 1)], { redacted: true });
    const silentPort = await closedPort();
    const cases: Array<[() => Promise<unknown>, RegExp]> = [
      [() => runReplay(replayOptions(join(dir, 'missing.har'), {})), /^cannot read .*missing\.har: no such file$/],
      [() => runReplay(replayOptions(notJson, {})), /x\.har is not a HAR file devop can replay: it is not JSON/],
      [
        () => runReplay(replayOptions(noEntries, {})),
        /y\.har is not a HAR file devop can replay: it has no log\.entries list/,
      ],
      [() => runReplay(replayOptions(badUrl, {})), /entry 1 has request\.url "x", which is not a URL/],
      [() => replay(silent, { filter: 'nothing-like-this' }), /no request of .* matches --filter/],
      [() => runReplay(replayOptions(silent, { to: String(silentPort) })), /^nothing listens on 127\.0\.0\.1:\d+/],
      [async () => replayOptions(silent, { to: 'abc' }), /--to abc is not a port/],
      [async () => replayOptions(silent, { filter: '(' }), /--filter "\(" is not a valid regular/],
    ];
    for (const [run, message] of cases) {
      const err = await run().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isUserError(err), String(err)).toBe(true);
      expect((err as Error).message).toMatch(message);
      expect((err as Error).message).not.toContain('\n');
      expect((err as { hint: string }).hint.length).toBeGreaterThan(0);
    }
  });
});

async function closedPort(): Promise<number> {
  const port = await serve(() => undefined);
  const last = cleanups.pop();
  last?.();
  return port;
}

describe('answer comparison', () => {
  it('lists added, removed and changed fields, with list indexes; ignored fields by name or dotted path', () => {
    const before = { items: [{ metadata: { uid: 'a', name: 'x' } }, { n: 1 }], gone: true };
    const after = { items: [{ metadata: { uid: 'b', name: 'y' } }], added: 1 };
    expect(jsonDifferences(before, after, ['metadata.uid'])).toEqual([
      'items[0].metadata.name: "x" → "y"',
      'items[1]: removed (was {"n":1})',
      'gone: removed (was true)',
      'added: added 1',
    ]);
  });

  it('names the kinds (and a Status message) rather than every field when the answer is of another kind', () => {
    const e = entry('GET', '/farmpods', 200, { kind: 'Table', rows: [{ cells: ['a'] }] }, 1);
    const status = { kind: 'Status', code: 404, message: 'the server could not find the requested resource' };
    expect(
      compareAnswer(e, { status: 404, mimeType: 'application/json', body: Buffer.from(JSON.stringify(status)) }),
    ).toEqual({
      same: false,
      differences: [
        'status 200 → 404',
        'kind: "Table" → "Status"',
        'message: "the server could not find the requested resource"',
      ],
    });
  });

  it('compares non-JSON bodies byte for byte, and only the start of a body cut when recorded', () => {
    const e = entry('GET', '/', 200, {}, 1);
    const text = { ...e, response: { ...e.response, content: { mimeType: 'text/plain', text: 'hello', size: 5 } } };
    expect(compareAnswer(text, { status: 200, mimeType: 'text/plain', body: Buffer.from('hello') }).same).toBe(true);
    expect(compareAnswer(text, { status: 200, mimeType: 'text/plain', body: Buffer.from('bye') }).differences).toEqual([
      'body: 5 bytes of text/plain → 3 bytes of text/plain',
    ]);
    const cut = {
      ...e,
      response: { ...e.response, content: { mimeType: 'text/plain', text: 'hel', size: 5, _cut: true } },
    };
    expect(compareAnswer(cut, { status: 200, mimeType: 'text/plain', body: Buffer.from('hello') })).toEqual({
      same: true,
      differences: [],
      partial: true,
    });
  });
});
