// Remote files against the real kernel: a target process chrooted into a root of the test's own (its /proc/PID/root is
// that directory, as a container's is its image), read as the agent reads files, through devop-open
// (agent/native/open-in-root.c, built to dist/). Whatever the target does to its own tree — symlinks, absolute or
// climbing with "..", or a directory swapped for a symlink to / while files are read — no read returns a host file.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { readTargetFile } from '../../agent/files/open-in-target.js';
import { requireRoot } from '../../testkit/root.js';
import { waitFor } from '../../testkit/wait.js';

const program = resolve(import.meta.dirname, '../../dist/devop-open');
/** How long the swapping loop runs while files are read (the old check-then-open lost within a few hundred reads). */
const RACE_MS = 4000;

const run = requireRoot('agent remote files');

describe.runIf(run)('remote files: read inside the target root, never the host', () => {
  const tag = randomBytes(6).toString('hex');
  // The host's file: outside the target's root, at a path the target's root also has (with its own content).
  const hostDir = mkdtempSync(join(tmpdir(), 'devop-host-'));
  const hostFile = join(hostDir, 'hostname');
  const hostContent = `HOST-${tag}`;
  const root = mkdtempSync(join(tmpdir(), 'devop-target-root-'));
  let target: ChildProcess;
  let pid: number;
  const read = (path: string): Promise<string> => readTargetFile(pid, path, { program });

  beforeAll(async () => {
    writeFileSync(hostFile, hostContent);
    // Given a target root with its own /etc/hostname and its own copy of the host file's path
    for (const dir of ['etc', 'usr', 'a/b', `.${hostDir}`, `d/.${hostDir}`])
      mkdirSync(join(root, dir), { recursive: true });
    writeFileSync(join(root, 'etc/hostname'), 'target\n');
    execFileSync('mkfifo', [join(root, 'etc/fifo')]);
    writeFileSync(join(root, `.${hostFile}`), 'target-copy');
    writeFileSync(join(root, `d/.${hostFile}`), 'target-d');
    // an absolute symlink to the host file's path, one that climbs with "..", and one through its own dirs
    symlinkSync(hostFile, join(root, 'etc/abs-link'));
    symlinkSync(`../../../../../../../../..${hostFile}`, join(root, 'a/b/climb'));
    symlinkSync('../../etc/hostname', join(root, 'a/b/own'));
    symlinkSync('usr/lib', join(root, 'lib'));
    symlinkSync('usr/lib64', join(root, 'lib64'));
    // the target: sleep, chrooted into that root in a mount namespace of its own (where /usr is bound, to run sleep)
    target = spawn('unshare', [
      '-m',
      '--propagation',
      'private',
      'sh',
      '-c',
      'mount --bind /usr "$1/usr" && exec chroot "$1" /usr/bin/sleep 600',
      'target',
      root,
    ]);
    pid = target.pid ?? -1;
    await waitFor("the target's chroot", () => readlinkSync(`/proc/${pid}/root`) === root);
  });
  afterAll(() => {
    target?.kill('SIGKILL');
    rmSync(root, { recursive: true, force: true });
    rmSync(hostDir, { recursive: true, force: true });
  });

  test('symlinks resolve inside the root: an absolute one, one climbing with "..", a relative one', async () => {
    expect(await read('/etc/hostname')).toBe('target\n');
    expect(await read('/etc/abs-link')).toBe('target-copy');
    expect(await read('/a/b/climb')).toBe('target-copy');
    expect(await read('/a/b/own')).toBe('target\n');
    expect(await read(`/../../../..${hostFile}`)).toBe('target-copy');
  });

  test('what is not a regular file is refused, by its errno name', async () => {
    await expect(read('/etc')).rejects.toMatchObject({ code: 'EISDIR' });
    await expect(read('/etc/missing')).rejects.toMatchObject({ code: 'ENOENT' });
    // a FIFO nobody writes to: refused at once, never opened (an open for reading would wait for a writer)
    await expect(read('/etc/fifo')).rejects.toMatchObject({ code: 'EINVAL' });
    await expect(read('etc/hostname')).rejects.toThrow(/not absolute/);
  });

  test('a directory swapped for a symlink to / while files are read never yields the host file', async () => {
    // Given a loop in the target's root that swaps the directory d for a symlink to / and back, without pause
    const swapper = spawn(process.execPath, [
      '-e',
      `const fs = require('fs'); process.chdir(process.argv[1]); fs.symlinkSync('/', 'dl');
       const end = Date.now() + Number(process.argv[2]);
       while (Date.now() < end) { fs.renameSync('d', 'dd'); fs.renameSync('dl', 'd'); fs.renameSync('d', 'dl');
         fs.renameSync('dd', 'd'); }`,
      root,
      String(RACE_MS),
    ]);
    const ended = new Promise((done) => swapper.once('close', done));
    // When the file under d is read again and again meanwhile
    const seen = new Map<string, number>();
    const deadline = Date.now() + RACE_MS;
    const reader = async (): Promise<void> => {
      while (Date.now() < deadline) {
        const got = await read(`/d${hostFile}`).catch((err: NodeJS.ErrnoException) => err.code ?? 'error');
        seen.set(got, (seen.get(got) ?? 0) + 1);
      }
    };
    await Promise.all([reader(), reader(), reader()]);
    await ended;
    // Then every read gave the target's own files (through d, or through the symlink: the root's copy), or a miss
    // while d was being renamed — never the host's
    expect(seen.get(hostContent)).toBeUndefined();
    expect([...seen.keys()].filter((k) => !['target-d', 'target-copy', 'ENOENT'].includes(k))).toEqual([]);
    expect(seen.get('target-d')).toBeGreaterThan(0);
    expect(seen.get('target-copy')).toBeGreaterThan(0);
  }, 30_000);
});
