// devop replay against real local servers and real HAR files: the same answers are "same", a changed one is named with
// its differences; AdmissionReviews are named by what they ask; a bad file or a silent port is one line.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isUserError } from '../../shared/errors.js';
import { compareAnswer, jsonDifferences } from '../record/compare.js';
import type { Har, HarEntry } from '../record/har.js';
import { formatReplayReport, replayOptions, runReplay } from './replay.js';

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

function writeHar(entries: HarEntry[]): string {
  const file = join(tempDir(), 'session.har');
  const har: Har = { log: { version: '1.2', creator: { name: 'devop', version: 'test' }, entries } };
  writeFileSync(file, JSON.stringify(har));
  return file;
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
    const file = writeHar([
      entry(
        'POST',
        '/validate',
        200,
        { kind: 'AdmissionReview', response: { uid: 'u1', allowed: false } },
        port,
        review,
      ),
    ]);
    // When it is replayed without --to
    const report = await runReplay(replayOptions(file, {}));
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
    const file = writeHar([entry('GET', '/a', 200, {}, port), entry('GET', '/b/farmpods', 200, {}, port)]);
    const report = await runReplay(replayOptions(file, { filter: 'farmpods' }));
    expect(report.results.map((r) => r.request)).toEqual(['GET /b/farmpods']);
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
    const silent = writeHar([entry('GET', '/', 200, {}, 1)]);
    const silentPort = await closedPort();
    const cases: Array<[() => Promise<unknown>, RegExp]> = [
      [() => runReplay(replayOptions(join(dir, 'missing.har'), {})), /^cannot read .*missing\.har: no such file$/],
      [() => runReplay(replayOptions(notJson, {})), /x\.har is not a HAR file devop can replay: it is not JSON/],
      [
        () => runReplay(replayOptions(noEntries, {})),
        /y\.har is not a HAR file devop can replay: it has no log\.entries list/,
      ],
      [() => runReplay(replayOptions(badUrl, {})), /entry 1 has request\.url "x", which is not a URL/],
      [() => runReplay(replayOptions(silent, { filter: 'nothing-like-this' })), /no request of .* matches --filter/],
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
