// The HAR file on disk: private to the user (0600) whatever the umask, written through a temporary file that devop
// creates exclusively, so a symlink planted at the target or at a temporary name is never written through.
import {
  lstatSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { HarRecorder, readHarLog, type HarEntry } from './har.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'devop-har-'));
  dirs.push(dir);
  return dir;
}

function exchange(localPort: number): HarEntry {
  return {
    startedDateTime: new Date().toISOString(),
    time: 1,
    request: {
      method: 'GET',
      url: 'http://farm.default.svc/llamas',
      httpVersion: 'HTTP/1.1',
      cookies: [],
      headers: [],
      queryString: [],
      headersSize: -1,
      bodySize: 0,
    },
    response: {
      status: 200,
      statusText: 'OK',
      httpVersion: 'HTTP/1.1',
      cookies: [],
      headers: [],
      content: { mimeType: 'text/plain', text: 'ok', size: 2 },
      redirectURL: '',
      headersSize: -1,
      bodySize: 2,
    },
    cache: {},
    timings: { blocked: -1, dns: -1, connect: -1, ssl: -1, send: 0, wait: 1, receive: 0 },
    _port: 8443,
    _localPort: localPort,
  };
}

async function record(path: string, dir: string): Promise<HarRecorder> {
  const har = new HarRecorder(path, 'test', undefined, { env: { XDG_CONFIG_HOME: dir } });
  await har.start();
  har.add(exchange(9443));
  await har.flush();
  return har;
}

describe('the HAR file', () => {
  it('is readable by its user only (0600)', async () => {
    // Given a recording in a folder
    const dir = tempDir();
    const path = join(dir, 'session.har');
    // When it is started and an exchange is written
    await record(path, dir);
    // Then the file is 0600, and no temporary file is left beside it
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readdirSync(dir).filter((name) => name.includes('tmp'))).toEqual([]);
  });

  it('does not write through a symlink planted at the target', async () => {
    // Given a symlink at the HAR path pointing at another file of the user
    const dir = tempDir();
    const victim = join(dir, 'victim.txt');
    writeFileSync(victim, 'keep me');
    const path = join(dir, 'session.har');
    symlinkSync(victim, path);
    // When the recording writes its HAR
    await record(path, dir);
    // Then the other file is untouched and the HAR is a file of its own, in place of the link
    expect(readFileSync(victim, 'utf8')).toBe('keep me');
    expect(lstatSync(path).isSymbolicLink()).toBe(false);
    expect((await readHarLog(path)).entries).toHaveLength(1);
  });

  it('does not write through a symlink planted at a temporary name', async () => {
    // Given symlinks at the temporary name devop once used (path.tmp-PID), pointing at another file of the user
    const dir = tempDir();
    const victim = join(dir, 'victim.txt');
    writeFileSync(victim, 'keep me');
    const path = join(dir, 'session.har');
    symlinkSync(victim, `${path}.tmp-${process.pid}`);
    // When the recording writes its HAR
    await record(path, dir);
    // Then the other file is untouched
    expect(readFileSync(victim, 'utf8')).toBe('keep me');
    expect((await readHarLog(path)).entries).toHaveLength(1);
  });

  it("seals the local ports it names with the user's key, for replay", async () => {
    const dir = tempDir();
    const path = join(dir, 'session.har');
    await record(path, dir);
    const { devop } = await readHarLog(path);
    expect(devop).toMatchObject({ redacted: true, localPorts: [9443], seal: expect.any(String) });
    expect(statSync(join(dir, 'devop', 'har-key')).mode & 0o777).toBe(0o600);
  });
});
