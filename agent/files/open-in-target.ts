// The target container's files, read inside its root by devop-open (agent/native/open-in-root.c): what a session's
// file streams (agent/files/serve-file.ts) and the pod's DNS files (agent/outgoing/dns.ts) read.
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { PassThrough, type Readable } from 'node:stream';
import { UserError } from '../../shared/errors.js';

/** The helper that opens a file inside the target's root (agent/native/open-in-root.c), next to the agent's bundle. */
export function openProgram(): string {
  return join(dirname(process.argv[1] ?? '.'), 'devop-open');
}

/**
 * Bound on devop-open's answer (it resolves and opens in microseconds; a file system that hangs, a dead NFS server in
 * the container, must not hang a session's read or every DNS lookup).
 */
const OPEN_TIMEOUT_MS = 10_000;

/** Bound on devop-open's first line (`ok SIZE` or `error CODE WHY`): anything longer is not devop-open speaking. */
const MAX_HEADER_BYTES = 4096;

export interface TargetFile {
  /** The size fstat gave for the opened file. */
  size: number;
  /** Its bytes, from the descriptor devop-open opened; errors (EIO) if the read failed part way. */
  content: Readable;
  /** Stops the read (the reader went away). */
  close(): void;
}

export interface OpenOptions {
  procRoot?: string;
  /** devop-open's command (tests). */
  program?: string;
}

/**
 * Opens a file of the target container for reading: devop-open resolves it inside the container's root
 * (openat2 RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS from /proc/PID/root), checks that it opened a regular file, and
 * streams it from that descriptor. The agent never opens a container's path by name itself: a path checked here
 * and opened again could have had a component swapped for a symlink to the node's files in between. Rejects with an
 * error whose code is the errno name (ENOENT, EISDIR, ELOOP, …).
 */
export function openInTarget(pid: number, path: string, opts: OpenOptions = {}): Promise<TargetFile> {
  if (!path.startsWith('/'))
    return Promise.reject(
      new UserError(`remote path "${path}" is not absolute`, "give the file's absolute path inside the container"),
    );
  const root = join(opts.procRoot ?? '/proc', String(pid), 'root');
  const child = spawn(opts.program ?? openProgram(), [root, path], { stdio: ['ignore', 'pipe', 'ignore'] });
  const content = new PassThrough();
  return new Promise<TargetFile>((resolve, reject) => {
    let header = Buffer.alloc(0);
    let opened = false;
    const timer = setTimeout(() => {
      reject(
        Object.assign(new Error(`no answer within ${OPEN_TIMEOUT_MS / 1000} s opening ${path}`), { code: 'ETIMEDOUT' }),
      );
      child.kill('SIGKILL');
    }, OPEN_TIMEOUT_MS);
    const onData = (chunk: Buffer): void => {
      header = Buffer.concat([header, chunk]);
      const eol = header.indexOf(10);
      if (eol < 0) {
        if (header.length > MAX_HEADER_BYTES) child.kill('SIGKILL');
        return;
      }
      child.stdout.off('data', onData);
      clearTimeout(timer);
      const line = header.subarray(0, eol).toString();
      const ok = /^ok (\d+)$/.exec(line);
      if (!ok) {
        const [, code = 'EIO', why = line] = /^error (\S+) (.*)$/.exec(line) ?? [];
        reject(Object.assign(new Error(why), { code }));
        child.kill('SIGKILL');
        return;
      }
      opened = true;
      content.write(header.subarray(eol + 1));
      child.stdout.pipe(content, { end: false });
      resolve({ size: Number(ok[1]), content, close: () => child.kill('SIGKILL') });
    };
    child.stdout.on('data', onData);
    child.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        err.code === 'ENOENT'
          ? Object.assign(new Error('devop-open is missing next to the agent: use the devop agent image'), {
              code: 'ENOSYS',
            })
          : err,
      ),
    );
    // 'close': the exit status and the whole of stdout are in. Only a clean exit ends the content: a read that failed
    // part way must not look like a short file.
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (!opened)
        reject(Object.assign(new Error(`devop-open ended (${signal ?? code}) before it answered`), { code: 'EIO' }));
      else if (code === 0) content.end();
      else content.destroy(Object.assign(new Error(`reading ${path} failed part way`), { code: 'EIO' }));
    });
  });
}

/** Bound on a file read whole (resolv.conf, hosts): the resolver needs a few lines of it. */
const MAX_WHOLE_BYTES = 1024 * 1024;

/** Reads a small file of the target container whole, as openInTarget opens it. */
export async function readTargetFile(pid: number, path: string, opts: OpenOptions = {}): Promise<string> {
  const file = await openInTarget(pid, path, opts);
  const chunks: Buffer[] = [];
  let length = 0;
  for await (const chunk of file.content) {
    length += (chunk as Buffer).length;
    if (length > MAX_WHOLE_BYTES) {
      file.close();
      throw Object.assign(new Error(`${path} is larger than ${MAX_WHOLE_BYTES} bytes`), { code: 'EFBIG' });
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}
