// HAR 1.2 (http://www.softwareishard.com/blog/har-12-spec/) as `devop exec --record` writes it and `devop replay`
// reads it: one entry per stolen HTTP exchange, with devop's own fields `_pod`, `_port` and `_localPort`.
import { readFile, rename, writeFile } from 'node:fs/promises';
import { UserError } from '../../shared/errors.js';

/**
 * How much of each body a HAR keeps. Kubernetes answers (lists, AdmissionReviews) fit well below it; a body above it is
 * cut there and says so (`_cut`), so a long session cannot fill memory.
 */
export const BODY_LIMIT_BYTES = 1024 * 1024;

export interface HarHeader {
  name: string;
  value: string;
}

/** A body as HAR keeps it: text when it is UTF-8, else base64; `_cut` when only the first BODY_LIMIT_BYTES are kept. */
export interface HarBody {
  mimeType: string;
  text: string;
  encoding?: 'base64';
  /** The whole body's length (what `size` says for a response). */
  size: number;
  _cut?: boolean;
}

export interface HarEntry {
  startedDateTime: string;
  time: number;
  request: {
    method: string;
    url: string;
    httpVersion: string;
    cookies: [];
    headers: HarHeader[];
    queryString: HarHeader[];
    postData?: { mimeType: string; text: string; _encoding?: 'base64'; _cut?: boolean };
    headersSize: -1;
    bodySize: number;
  };
  response: {
    status: number;
    statusText: string;
    httpVersion: string;
    cookies: [];
    headers: HarHeader[];
    content: HarBody;
    redirectURL: '';
    headersSize: -1;
    bodySize: number;
  };
  cache: Record<string, never>;
  timings: { blocked: -1; dns: -1; connect: -1; ssl: -1; send: number; wait: number; receive: number };
  /** The pod whose traffic this was. */
  _pod?: string;
  /** The pod's port it reached. */
  _port: number;
  /** The local command's port that answered (replay's default destination). */
  _localPort: number;
}

export interface Har {
  log: { version: '1.2'; creator: { name: string; version: string }; entries: HarEntry[] };
}

/** A body kept for a HAR: as text when it is valid UTF-8, else base64; cut at `limit`. */
export function harBody(chunks: Buffer, size: number, mimeType: string): HarBody {
  const cut = size > chunks.length;
  const text = new TextDecoder('utf-8', { fatal: true });
  try {
    // A multi-byte character split by the cut is not a reason for base64: decode in streaming mode.
    return { mimeType, text: text.decode(chunks, { stream: cut }), size, ...(cut ? { _cut: true } : {}) };
  } catch {
    // Not UTF-8 (protobuf, gzip): base64 keeps every byte.
    return { mimeType, text: chunks.toString('base64'), encoding: 'base64', size, ...(cut ? { _cut: true } : {}) };
  }
}

/** The bytes of a kept body. */
export function bodyBytes(body: { text: string; encoding?: string; _encoding?: string }): Buffer {
  return body.encoding === 'base64' || body._encoding === 'base64'
    ? Buffer.from(body.text, 'base64')
    : Buffer.from(body.text, 'utf8');
}

/** Keeps the first `limit` bytes of a stream and counts all of them. */
export class BodyTap {
  private readonly kept: Buffer[] = [];
  private keptBytes = 0;
  size = 0;

  constructor(private readonly limit = BODY_LIMIT_BYTES) {}

  add(chunk: Buffer): void {
    this.size += chunk.length;
    const room = this.limit - this.keptBytes;
    if (room <= 0) return;
    const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.kept.push(part);
    this.keptBytes += part.length;
  }

  bytes(): Buffer {
    return Buffer.concat(this.kept);
  }
}

/** `[name, value, name, value…]` (Node's rawHeaders) as HAR headers, in the order they came. */
export function harHeaders(raw: readonly string[]): HarHeader[] {
  const out: HarHeader[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) out.push({ name: raw[i], value: raw[i + 1] });
  return out;
}

export function queryString(url: URL): HarHeader[] {
  return [...url.searchParams].map(([name, value]) => ({ name, value }));
}

/** Rewrites the file at most once per WRITE_DELAY_MS, through a temporary file, so it is always a whole HAR. */
const WRITE_DELAY_MS = 300;

/** The HAR of a session: entries are added as exchanges end; the file is rewritten shortly after each. */
export class HarRecorder {
  private readonly entries: HarEntry[] = [];
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> = Promise.resolve();

  constructor(
    readonly path: string,
    private readonly version: string,
    private readonly onError: (message: string) => void = () => undefined,
  ) {}

  get size(): number {
    return this.entries.length;
  }

  add(entry: HarEntry): void {
    this.entries.push(entry);
    this.timer ??= setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, WRITE_DELAY_MS);
  }

  /** Writes the empty HAR: a path devop cannot write is one line before anything runs. */
  async start(): Promise<void> {
    try {
      await writeFile(this.path, `${JSON.stringify(this.har(), null, 2)}\n`);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      throw new UserError(`--record ${this.path}: cannot write the file (${code})`, 'pass a path in a writable folder');
    }
  }

  private har(): Har {
    return { log: { version: '1.2', creator: { name: 'devop', version: this.version }, entries: [...this.entries] } };
  }

  /** Writes the file now (also when there is no entry: the file then says nothing was recorded). */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const har = this.har();
    this.writing = this.writing.then(async () => {
      const tmp = `${this.path}.tmp-${process.pid}`;
      try {
        await writeFile(tmp, `${JSON.stringify(har, null, 2)}\n`);
        await rename(tmp, this.path);
      } catch (err) {
        this.onError(`could not write ${this.path}: ${(err as Error).message}`);
      }
    });
    return this.writing;
  }
}

function badFile(path: string, why: string): UserError {
  return new UserError(
    `${path} is not a HAR file devop can replay: ${why}`,
    'pass a file written by `devop exec --record FILE` (or another HAR 1.2 file)',
  );
}

/** Reads a HAR file; anything unusable is one line naming the file and what is wrong with it. */
export async function readHar(path: string): Promise<HarEntry[]> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new UserError(
      `cannot read ${path}: ${code === 'ENOENT' ? 'no such file' : (code ?? (err as Error).message)}`,
      'pass the file `devop exec --record FILE` wrote',
    );
  }
  let har: unknown;
  try {
    har = JSON.parse(text);
  } catch (err) {
    throw badFile(path, `it is not JSON (${(err as Error).message})`);
  }
  const entries = (har as { log?: { entries?: unknown } } | null)?.log?.entries;
  if (!Array.isArray(entries)) throw badFile(path, 'it has no log.entries list');
  entries.forEach((e: unknown, i) => {
    const entry = e as Partial<HarEntry> | null;
    const where = `entry ${i + 1}`;
    if (typeof entry?.request?.method !== 'string') throw badFile(path, `${where} has no request.method`);
    if (typeof entry.request.url !== 'string') throw badFile(path, `${where} has no request.url`);
    try {
      new URL(entry.request.url);
    } catch {
      throw badFile(path, `${where} has request.url "${entry.request.url}", which is not a URL`);
    }
    if (typeof entry.response?.status !== 'number') throw badFile(path, `${where} has no response.status`);
    if (!Array.isArray(entry.request.headers)) throw badFile(path, `${where} has no request.headers list`);
  });
  return entries as HarEntry[];
}
