// Session directories left by a killed devop: made 0700, removed by the next run once their devop is gone, a live
// session's kept, and nothing but this user's own real directories touched.
import { type ChildProcess, spawn } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { makeSessionDir, sweepSessionDirs } from './session-dirs.js';

/** A process standing in for a devop session (it only waits). */
function session(): ChildProcess {
  return spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
}

function killed(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

describe('session directories', () => {
  const cleanup: (() => void)[] = [];
  afterEach(() => {
    for (const undo of cleanup.splice(0)) undo();
  });
  const parentDir = (): string => {
    const dir = mkdtempSync(join(tmpdir(), 'devop-sweep-test-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    return dir;
  };

  it("removes a kill -9'd session's directory on the next sweep and keeps a live session's", async () => {
    // Given two sessions, each with its directory holding a token, and one of them killed with SIGKILL
    const parent = parentDir();
    const live = session();
    const dead = session();
    cleanup.push(() => live.kill('SIGKILL'));
    const liveDir = await makeSessionDir('root', parent, live.pid);
    const deadDir = await makeSessionDir('shadow', parent, dead.pid);
    writeFileSync(join(deadDir, 'token'), 'secret', { mode: 0o600 });
    writeFileSync(join(liveDir, 'token'), 'secret', { mode: 0o600 });
    await killed(dead);
    // Then both are readable by their owner only, and the dead one is still there
    expect(statSync(liveDir).mode & 0o777).toBe(0o700);
    expect(statSync(deadDir).mode & 0o777).toBe(0o700);
    expect(existsSync(deadDir)).toBe(true);
    // When the next run sweeps (first as devop clean --dry-run would)
    expect(await sweepSessionDirs({ parent, dryRun: true })).toEqual([{ path: deadDir, pid: dead.pid }]);
    expect(existsSync(deadDir)).toBe(true);
    const swept = await sweepSessionDirs({ parent });
    // Then the dead session's directory is gone and the live one's is kept
    expect(swept).toEqual([{ path: deadDir, pid: dead.pid, removed: true }]);
    expect(existsSync(deadDir)).toBe(false);
    expect(existsSync(join(liveDir, 'token'))).toBe(true);
  });

  it("follows no symlink and leaves files and other users' directories alone", async () => {
    // Given names of dead sessions that are a symlink to a directory, a file, and a directory of another user
    const parent = parentDir();
    const dead = session();
    await killed(dead);
    const victim = join(parent, 'victim');
    mkdirSync(victim);
    writeFileSync(join(victim, 'keep'), 'x');
    symlinkSync(victim, join(parent, `devop-root-${dead.pid}-aaaaaa`));
    writeFileSync(join(parent, `devop-root-${dead.pid}-bbbbbb`), 'x');
    const others = join(parent, `devop-shadow-${dead.pid}-cccccc`);
    mkdirSync(others);
    const asRoot = process.getuid?.() === 0;
    if (asRoot) chownSync(others, 65534, 65534);
    // And a dead session's own directory with a symlink inside that points out of it
    const own = await makeSessionDir('root', parent, dead.pid);
    symlinkSync(victim, join(own, 'link'));
    // When the sweep runs
    const swept = await sweepSessionDirs({ parent });
    // Then only the own directory is removed, and what its link pointed at stays
    expect(swept.map((d) => d.path)).toEqual(asRoot ? [own] : [own, others]);
    expect(existsSync(join(victim, 'keep'))).toBe(true);
    expect(existsSync(join(parent, `devop-root-${dead.pid}-aaaaaa`))).toBe(true);
    expect(existsSync(join(parent, `devop-root-${dead.pid}-bbbbbb`))).toBe(true);
    if (asRoot) expect(existsSync(others)).toBe(true);
  });
});
