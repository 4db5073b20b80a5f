// HAR 1.2 (http://www.softwareishard.com/blog/har-12-spec/) as `devop exec --record` writes it and `devop replay`
// reads it: one entry per stolen HTTP exchange, with devop's own fields `_pod`, `_port`, `_localPort` and `_redacted`.
// The file is private (0600, written through an exclusively created temporary file) and holds no credential unless
// asked (--record-secrets).
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { lstat, open, readFile, rename, unlink } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { UserError } from '../../shared/errors.js';
import type { HarBody, HarEntry, HarHeader } from './har-entry.js';
import { redactEntry } from './redact.js';
import { sealKey, sealPorts } from './seal.js';

/**
 * How much of each body a HAR keeps. Kubernetes answers (lists, AdmissionReviews) fit well below it; a body above it is
 * cut there and says so (`_cut`), so a long session cannot fill memory.
 */
export const BODY_LIMIT_BYTES = 1024 * 1024;

export type { HarBody, HarEntry, HarHeader } from './har-entry.js';

/** devop's own fields of a HAR's log. */
export interface HarDevopLog {
  /** Credentials were redacted (false: written with --record-secrets). */
  redacted: boolean;
  /** The local ports the entries name, sealed by this user's key (seal.ts): what replay may send to without --to. */
  localPorts: number[];
  /** Absent when devop could not make its key (an unwritable home): replay then needs --to. */
  seal?: string;
}

export interface Har {
  log: {
    version: '1.2';
    creator: { name: string; version: string };
    entries: HarEntry[];
    _devop?: HarDevopLog;
  };
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
/** Only the user may read a HAR: it holds requests and answers (and, with --record-secrets, credentials). */
const HAR_FILE_MODE = 0o600;

/**
 * Writes `text` to `path` as a new 0600 file: a temporary file with a random name beside it is created exclusively
 * (O_EXCL: a file or symlink already there is an error, never followed) and renamed over `path` (which replaces a
 * symlink at `path` rather than writing through it).
 */
export async function writePrivateFile(path: string, text: string): Promise<void> {
  const tmp = join(dirname(path), `.${basename(path)}.${randomBytes(8).toString('hex')}.tmp`);
  const file = await open(tmp, 'wx', HAR_FILE_MODE);
  try {
    await file.writeFile(text);
    // The mode given to open is masked by the umask; the file must be 0600 whatever the umask.
    await file.chmod(HAR_FILE_MODE);
  } catch (err) {
    await file.close();
    await unlink(tmp).catch(() => undefined); // already failing: the write's error is the one to report
    throw err;
  }
  await file.close();
  try {
    await rename(tmp, path);
  } catch (err) {
    await unlink(tmp).catch(() => undefined); // already failing: the rename's error is the one to report
    throw err;
  }
}

/** Fails as writePrivateFile would at `path` (no folder, no right to create a file there, a folder at `path`). */
async function probeWritable(path: string): Promise<void> {
  const found = await lstat(path).catch(() => undefined);
  if (found?.isDirectory()) throw Object.assign(new Error(`${path} is a folder`), { code: 'EISDIR' });
  const tmp = join(dirname(path), `.${basename(path)}.${randomBytes(8).toString('hex')}.tmp`);
  await (await open(tmp, 'wx', HAR_FILE_MODE)).close();
  await unlink(tmp);
}

export interface HarRecorderOptions {
  /** --record-secrets: keep credentials (headers, Secret values) as they were sent. */
  keepSecrets?: boolean;
  /** Where this user's seal key is looked up (tests). */
  env?: NodeJS.ProcessEnv;
}

/** The HAR of a session: entries are added as exchanges end; the file is rewritten shortly after each. */
export class HarRecorder {
  private readonly entries: HarEntry[] = [];
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> = Promise.resolve();
  private key: Buffer | undefined;

  constructor(
    readonly path: string,
    private readonly version: string,
    private readonly onError: (message: string) => void = () => undefined,
    private readonly options: HarRecorderOptions = {},
  ) {}

  get size(): number {
    return this.entries.length;
  }

  /** Adds an exchange; its credentials are redacted here, so they are not even held in memory. */
  add(entry: HarEntry): void {
    this.entries.push(this.options.keepSecrets ? entry : redactEntry(entry));
    this.timer ??= setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, WRITE_DELAY_MS);
  }

  /**
   * Checks that the HAR can be written there: a path devop cannot write is one line before anything runs. The file
   * itself is first written with the first exchange, or when the session ends (a failed session that recorded nothing
   * leaves a file already at `path` as it was).
   */
  async start(): Promise<void> {
    try {
      this.key = sealKey(this.options.env);
    } catch {
      // No key (an unwritable home): the HAR is written unsealed, and replaying it asks for --to.
      this.key = undefined;
    }
    try {
      await probeWritable(this.path);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      const folder = dirname(resolve(this.path));
      if (code === 'ENOENT' && !existsSync(folder))
        throw new UserError(
          `--record ${this.path}: the folder ${folder} does not exist`,
          'create it, or pass --record a file in a folder you can write',
        );
      throw new UserError(
        `--record ${this.path}: cannot write the file (${code})`,
        'pass --record a file in a folder you can write',
      );
    }
  }

  private har(): Har {
    const localPorts = [...new Set(this.entries.map((e) => e._localPort))].sort((a, b) => a - b);
    return {
      log: {
        version: '1.2',
        creator: { name: 'devop', version: this.version },
        entries: [...this.entries],
        _devop: {
          redacted: !this.options.keepSecrets,
          localPorts,
          ...(this.key ? { seal: sealPorts(this.key, localPorts) } : {}),
        },
      },
    };
  }

  /** Writes the file now (also when there is no entry: the file then says nothing was recorded). */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const text = `${JSON.stringify(this.har(), null, 2)}\n`;
    this.writing = this.writing.then(async () => {
      try {
        await writePrivateFile(this.path, text);
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

/** Reads a HAR file's entries; anything unusable is one line naming the file and what is wrong with it. */
export async function readHar(path: string): Promise<HarEntry[]> {
  return (await readHarLog(path)).entries;
}

/** Reads a HAR file: its entries and devop's own log fields (undefined when another tool wrote it). */
export async function readHarLog(path: string): Promise<{ entries: HarEntry[]; devop?: HarDevopLog }> {
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
  const devop = (har as { log: { _devop?: unknown } }).log._devop;
  return {
    entries: entries as HarEntry[],
    ...(typeof devop === 'object' && devop !== null ? { devop: devop as HarDevopLog } : {}),
  };
}
