// `devop replay FILE`: sends the requests a `devop exec --record` session wrote to the local command again, in their
// recorded order, and compares each answer with the recorded one (status; body field by field for JSON). It sends only
// to 127.0.0.1: to the port --to names, or else to the local ports the HAR names when this user's devop sealed them.
import { request as httpRequest, type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import { connect as connectHttp2 } from 'node:http2';
import { request as httpsRequest } from 'node:https';
import { UserError } from '../../shared/errors.js';
import { ALWAYS_IGNORED, compareAnswer, describeRequest } from '../record/compare.js';
import { bodyBytes, readHarLog, type HarDevopLog, type HarEntry } from '../record/har.js';
import { REDACTED, redactBody } from '../record/redact.js';
import { portsSealed } from '../record/seal.js';

export interface ReplayOptions {
  file: string;
  /** The local command's port; default: the one each request reached when it was recorded. */
  to?: number;
  /** Only requests whose "METHOD PATH" matches. */
  filter?: RegExp;
  /** JSON fields whose values may differ (besides ALWAYS_IGNORED). */
  ignore?: string[];
  /** Where this user's HAR seal key is looked up (tests). */
  env?: NodeJS.ProcessEnv;
}

export type ReplayResult = {
  /** The entry's number in the file (1-based). */
  entry: number;
  request: string;
  pod?: string;
  recordedStatus: number;
} & (
  | {
      outcome: 'same' | 'different';
      status: number;
      ms: number;
      differences: string[];
      partial?: boolean;
      /** Headers redacted when recorded, sent without them. */
      withoutHeaders?: string[];
    }
  | { outcome: 'failed'; error: string }
  | { outcome: 'skipped'; reason: string }
);

export interface ReplayReport {
  file: string;
  results: ReplayResult[];
  summary: { same: number; different: number; failed: number; skipped: number };
}

/** How long one replayed request may take: a local command that hangs is reported, not waited for. */
const REQUEST_TIMEOUT_MS = 30_000;
/** Hop-by-hop headers, and the length (devop sends the recorded body and sets its own). */
const NOT_SENT = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'upgrade',
  'te',
  'trailer',
  'content-length',
]);

function parseFilter(text: string): RegExp {
  try {
    return new RegExp(text);
  } catch (err) {
    throw new UserError(
      `--filter "${text}" is not a valid regular expression (${(err as Error).message})`,
      'fix the pattern, e.g. --filter "GET .*/llamas"',
    );
  }
}

/** `--to` as a port number. */
export function parseReplayPort(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const port = Number(text);
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new UserError(`--to ${text} is not a port`, "pass the local command's port, e.g. --to 9443");
  return port;
}

export function replayOptions(file: string, flags: { to?: string; filter?: string; ignore?: string[] }): ReplayOptions {
  return {
    file,
    to: parseReplayPort(flags.to),
    ...(flags.filter !== undefined ? { filter: parseFilter(flags.filter) } : {}),
    ignore: flags.ignore ?? [],
  };
}

interface Sent {
  status: number;
  mimeType: string;
  body: Buffer;
  ms: number;
  grpc?: { status?: string; message?: string };
}

/** The headers of a recorded request that were redacted (they are not sent: the marker is no credential). */
function redactedHeaders(entry: HarEntry): string[] {
  return [...new Set(entry.request.headers.filter((h) => h.value === REDACTED).map((h) => h.name.toLowerCase()))];
}

function send(entry: HarEntry, port: number): Promise<Sent> {
  const url = new URL(entry.request.url);
  const headers: OutgoingHttpHeaders = {};
  for (const { name, value } of entry.request.headers) {
    if (NOT_SENT.has(name.toLowerCase()) || value === REDACTED) continue;
    const prev = headers[name];
    headers[name] = prev === undefined ? value : Array.isArray(prev) ? [...prev, value] : [String(prev), value];
  }
  const body = entry.request.postData ? bodyBytes(entry.request.postData) : Buffer.alloc(0);
  if (body.length > 0 || !['GET', 'HEAD', 'DELETE', 'OPTIONS'].includes(entry.request.method))
    headers['content-length'] = String(body.length);
  const tls = url.protocol === 'https:';
  if (entry.request.httpVersion === 'HTTP/2') return sendHttp2(entry, url, port, headers, body);
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const req = (tls ? httpsRequest : httpRequest)(
      {
        host: '127.0.0.1',
        port,
        method: entry.request.method,
        path: `${url.pathname}${url.search}`,
        headers,
        // The local command's own certificate: devop replays to the process it started, on loopback.
        ...(tls ? { rejectUnauthorized: false, servername: undefined } : {}),
        timeout: REQUEST_TIMEOUT_MS,
        agent: false,
      },
      (res: IncomingMessage) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            mimeType: res.headers['content-type'] ?? '',
            body: Buffer.concat(chunks),
            ms: Date.now() - started,
          }),
        );
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${REQUEST_TIMEOUT_MS / 1000} s`)));
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * A request recorded over HTTP/2 goes over HTTP/2 again (h2c with prior knowledge, as the agent sent it to the local
 * command, or h2 in TLS), on a connection of its own; `te: trailers` goes too (gRPC servers want it), and the answer's
 * trailers are read for a gRPC call's status.
 */
function sendHttp2(entry: HarEntry, url: URL, port: number, headers: OutgoingHttpHeaders, body: Buffer): Promise<Sent> {
  const started = Date.now();
  const te = entry.request.headers.find((h) => h.name.toLowerCase() === 'te')?.value;
  return new Promise((resolve, reject) => {
    // In TLS again when it was recorded in TLS (the local command's own certificate, on loopback).
    const session =
      url.protocol === 'https:'
        ? connectHttp2(`https://127.0.0.1:${port}`, { settings: { enablePush: false }, rejectUnauthorized: false })
        : connectHttp2(`http://127.0.0.1:${port}`, { settings: { enablePush: false } });
    const fail = (err: Error): void => {
      session.destroy();
      reject(err);
    };
    session.on('error', fail);
    const stream = session.request(
      {
        ...headers,
        ...(te === 'trailers' ? { te } : {}),
        ':method': entry.request.method,
        ':path': `${url.pathname}${url.search}`,
        ':authority': url.host,
      },
      { endStream: body.length === 0 },
    );
    stream.setTimeout(REQUEST_TIMEOUT_MS, () => fail(new Error(`no answer within ${REQUEST_TIMEOUT_MS / 1000} s`)));
    let status = 0;
    let mimeType = '';
    let grpc: Sent['grpc'];
    const grpcOf = (h: Record<string, unknown>): void => {
      if (h['grpc-status'] !== undefined)
        grpc = {
          status: String(h['grpc-status']),
          ...(h['grpc-message'] !== undefined ? { message: String(h['grpc-message']) } : {}),
        };
    };
    stream.on('response', (h) => {
      status = Number(h[':status'] ?? 0);
      mimeType = String(h['content-type'] ?? '');
      grpcOf(h);
    });
    stream.on('trailers', grpcOf);
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      session.close();
      resolve({ status, mimeType, body: Buffer.concat(chunks), ms: Date.now() - started, ...(grpc ? { grpc } : {}) });
    });
    stream.on('error', fail);
    if (body.length > 0) stream.end(body);
  });
}

/**
 * Without --to, the local ports a HAR names are trusted only when this user's devop sealed them (seal.ts): a HAR from
 * anyone else could name any port of this machine (kubectl proxy, a Docker socket on TCP, a database) and have devop
 * send it the requests the file holds.
 */
function refuseUnsealedPorts(
  file: string,
  entries: readonly HarEntry[],
  devop: HarDevopLog | undefined,
  env?: NodeJS.ProcessEnv,
): void {
  const named = [...new Set(entries.map((e) => e._localPort))].sort((a, b) => a - b);
  const sealed =
    devop !== undefined &&
    Array.isArray(devop.localPorts) &&
    portsSealed(devop.localPorts, devop.seal, env) &&
    named.every((port) => devop.localPorts.includes(port));
  if (sealed) return;
  throw new UserError(
    `${file} was not recorded by your devop on this machine (or was changed since): devop does not send its ` +
      `requests to the local port${named.length === 1 ? '' : 's'} it names (${named.join(', ')}) on its own`,
    "name the local command's port with --to PORT",
  );
}

export async function runReplay(options: ReplayOptions): Promise<ReplayReport> {
  const { entries, devop } = await readHarLog(options.file);
  const ignore = [...ALWAYS_IGNORED, ...(options.ignore ?? [])];
  const chosen = entries
    .map((entry, i) => ({ entry, number: i + 1 }))
    .filter(({ entry }) => {
      if (!options.filter) return true;
      const url = new URL(entry.request.url);
      return options.filter.test(`${entry.request.method} ${url.pathname}${url.search}`);
    });
  if (chosen.length === 0)
    throw new UserError(
      entries.length === 0
        ? `${options.file} holds no exchange (nothing was stolen while it was recorded)`
        : `no request of ${options.file} matches --filter ${options.filter?.source}`,
      entries.length === 0
        ? 'record a session in which the local command answers requests (devop exec --steal --record FILE)'
        : 'loosen the pattern (it is matched against "METHOD PATH")',
    );
  if (options.to === undefined && chosen.some(({ entry }) => typeof entry._localPort !== 'number'))
    throw new UserError(
      `${options.file} does not say which local port answered (it was not written by devop exec --record)`,
      "pass the local command's port with --to PORT",
    );
  if (options.to === undefined)
    refuseUnsealedPorts(
      options.file,
      chosen.map(({ entry }) => entry),
      devop,
      options.env,
    );
  const results: ReplayResult[] = [];
  for (const { entry, number } of chosen) {
    const base = {
      entry: number,
      request: describeRequest(entry),
      ...(entry._pod ? { pod: entry._pod } : {}),
      recordedStatus: entry.response.status,
    };
    if (entry.request.postData?._cut) {
      results.push({ ...base, outcome: 'skipped', reason: 'its body was cut when it was recorded' });
      continue;
    }
    const port = options.to ?? entry._localPort;
    const withoutHeaders = redactedHeaders(entry);
    try {
      const got = await send(entry, port);
      // Secret values were redacted when recorded: the new answer's are too, so that they compare equal.
      const answer = devop?.redacted ? redactAnswer(got) : got;
      const c = compareAnswer(entry, answer, ignore);
      results.push({
        ...base,
        outcome: c.same ? 'same' : 'different',
        status: got.status,
        ms: got.ms,
        differences: c.differences,
        ...(c.partial ? { partial: true } : {}),
        ...(withoutHeaders.length > 0 ? { withoutHeaders } : {}),
      });
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      results.push({ ...base, outcome: 'failed', error: `127.0.0.1:${port}: ${e.code ?? e.message}` });
    }
  }
  if (results.every((r) => r.outcome === 'failed' && /ECONNREFUSED/.test(r.error))) {
    const ports = [...new Set(chosen.map(({ entry }) => options.to ?? entry._localPort))].join(', 127.0.0.1:');
    throw new UserError(
      `nothing listens on 127.0.0.1:${ports}: no request could be replayed`,
      'start the local command first, or pass its port with --to PORT',
    );
  }
  const count = (o: ReplayResult['outcome']) => results.filter((r) => r.outcome === o).length;
  return {
    file: options.file,
    results,
    summary: { same: count('same'), different: count('different'), failed: count('failed'), skipped: count('skipped') },
  };
}

function redactAnswer(got: Sent): Sent {
  const text = got.body.toString('utf8');
  // A body that is not UTF-8 is redacted as bytes (protobuf naming a Secret becomes the marker).
  const utf8 = Buffer.from(text, 'utf8').equals(got.body);
  const body = utf8 ? redactBody(text, undefined) : redactBody(got.body.toString('base64'), 'base64');
  return body.redacted ? { ...got, body: Buffer.from(body.text, 'utf8') } : got;
}

/** Said of a request whose recorded answer was cut at the HAR bound. */
const PARTIAL_NOTE = ', recorded body was cut: compared its start';

/** Names the headers a request was sent without because they were redacted when recorded. */
function without(r: { withoutHeaders?: string[] }): string {
  return r.withoutHeaders ? `, sent without ${r.withoutHeaders.join(', ')} (redacted when recorded)` : '';
}

/** The plain report: one line per request (✓ same, ✗ different, ! failed, - skipped), its differences, a summary. */
export function formatReplayReport(report: ReplayReport): string {
  const lines: string[] = [];
  for (const r of report.results) {
    const pod = r.pod ? ` [${r.pod}]` : '';
    switch (r.outcome) {
      case 'same':
        lines.push(`✓ ${r.request} ${r.status} (${r.ms} ms)${r.partial ? PARTIAL_NOTE : ''}${pod}${without(r)}`);
        break;
      case 'different':
        lines.push(`✗ ${r.request} ${r.recordedStatus} → ${r.status} (${r.ms} ms)${pod}${without(r)}`);
        for (const d of r.differences) lines.push(`    ${d}`);
        break;
      case 'failed':
        lines.push(`! ${r.request}: no answer (${r.error})${pod}`);
        break;
      case 'skipped':
        lines.push(`- ${r.request}: skipped, ${r.reason}${pod}`);
        break;
    }
  }
  const { same, different, failed, skipped } = report.summary;
  const parts = [`${same} same`, `${different} different`];
  if (failed > 0) parts.push(`${failed} without answer`);
  if (skipped > 0) parts.push(`${skipped} skipped`);
  const n = report.results.length;
  lines.push(`${n} request${n === 1 ? '' : 's'} replayed from ${report.file}: ${parts.join(', ')}`);
  return `${lines.join('\n')}\n`;
}
