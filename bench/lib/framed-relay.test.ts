// bench/lib/framed-relay.c carries every byte in order and keeps half-closes, in its copying and its splice modes: the
// tunnel bench's references are only worth reading if the pairs they time deliver what they are sent.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hasCc } from './has-cc.js';

const MiB = 1024 * 1024;
/** Sent each way: many frames of the largest size (1 MiB in splice mode) and many pipefuls of the smallest. */
const UPLOAD = 6 * MiB + 12_345;
const DOWNLOAD = 3 * MiB + 777;
/** The smallest pipe Linux gives (one page): frames of a 1 MiB entry take many pipefuls at such an exit. */
const ONE_PAGE_PIPE = '4096';
/** The copying mode's buffer (BUF in framed-relay.c), its largest frame. */
const COPY_BUFFER = 256 * 1024;
/** One exchange through a pair on loopback takes well under a second; this is a hang, not a slow machine. */
const EXCHANGE_DEADLINE_MS = 30_000;

const sha = (data: Buffer): string => createHash('sha256').update(data).digest('hex');

/**
 * A server that reads a whole upload, and only after the client's half-close answers with the upload's hash, then
 * `download` bytes, then its own half-close: the answer proves the half-close crossed the pair, and bulk data then
 * crosses it the other way.
 */
function startServer(download: Buffer): Promise<net.Server> {
  const server = net.createServer({ allowHalfOpen: true }, (sock) => {
    const hash = createHash('sha256');
    sock.on('data', (d: Buffer) => hash.update(d));
    sock.on('end', () => {
      sock.write(`${hash.digest('hex')}\n`);
      sock.end(download);
    });
    sock.on('error', () => sock.destroy()); // the client's side reports a broken exchange
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

/** Sends `upload` in writes of uneven sizes, half-closes, and resolves with everything received until the far end. */
function exchange(port: number, upload: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    const got: Buffer[] = [];
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`no end from the pair within ${EXCHANGE_DEADLINE_MS / 1000} s`));
    }, EXCHANGE_DEADLINE_MS);
    sock.on('data', (d: Buffer) => got.push(d));
    sock.on('end', () => {
      clearTimeout(timer);
      sock.end();
      resolve(Buffer.concat(got));
    });
    sock.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    for (let at = 0, size = 1; at < upload.length; at += size, size = (size * 7 + 13) % 300_000) {
      sock.write(upload.subarray(at, at + size));
    }
    sock.end();
  });
}

describe.skipIf(!hasCc)(`framed-relay.c${hasCc ? '' : ' (skipped: no cc to build it)'}`, () => {
  const dir = mkdtempSync(join(tmpdir(), 'devop-framed-relay-'));
  const binary = join(dir, 'framed-relay');
  const children: ChildProcess[] = [];
  const upload = randomBytes(UPLOAD);
  const download = randomBytes(DOWNLOAD);
  let server: net.Server;

  /** Starts `framed-relay <mode> <target> [pipe bytes]` and resolves with the port it listens on. */
  const start = (args: string[]): Promise<number> => {
    const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(child);
    return new Promise((resolve, reject) => {
      child.stdout.once('data', (d: Buffer) => resolve((JSON.parse(d.toString()) as { port: number }).port));
      child.once('exit', (code) => reject(new Error(`framed-relay ${args.join(' ')} exited with ${code}`)));
    });
  };

  beforeAll(async () => {
    execFileSync('cc', ['-O2', '-o', binary, resolve(import.meta.dirname, 'framed-relay.c')]);
    server = await startServer(download);
  });

  afterAll(() => {
    for (const child of children) child.kill();
    server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it.each([
    ['copying', ['entry'], ['exit']],
    ['splicing, default pipes', ['entry-splice'], ['exit-splice']],
    ['splicing, 1 MiB frames into a one-page pipe', ['entry-splice', String(MiB)], ['exit-splice', ONE_PAGE_PIPE]],
    // The copying side takes frames up to its 256 KiB buffer, so the splicing side's pipe (its largest frame) is that.
    ['copying entry, splicing exit (one wire format)', ['entry'], ['exit-splice', String(COPY_BUFFER)]],
  ])('%s: carries a few MiB each way in order and the half-closes of both ends', async (_, entry, exit) => {
    // Given a pair in front of the server
    const address = server.address() as net.AddressInfo;
    const exitPort = await start([exit[0], String(address.port), ...exit.slice(1)]);
    const entryPort = await start([entry[0], String(exitPort), ...entry.slice(1)]);

    // When a client sends its upload through it and half-closes
    const got = await exchange(entryPort, upload);

    // Then the server saw exactly the upload, then its answer came back whole and ended
    const nl = got.indexOf(10);
    expect(got.subarray(0, nl).toString(), 'hash of the bytes that reached the server').toBe(sha(upload));
    expect(got.length - nl - 1, 'bytes that came back').toBe(download.length);
    expect(sha(got.subarray(nl + 1)), 'hash of the bytes that came back').toBe(sha(download));
  });

  it('refuses a pipe size that is not a positive number, naming it', () => {
    let stderr = '';
    try {
      execFileSync(binary, ['entry-splice', '1', 'lots'], { stdio: 'pipe' });
    } catch (err) {
      stderr = String((err as { stderr: Buffer }).stderr);
    }
    expect(stderr).toContain('pipe bytes must be a positive number, not lots');
  });
});
