// The stand-in's containerd is one daemon per machine: processes that find its socket silent at the same moment start
// one daemon between them (flock), and a later one finds it answering.
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';

requireRoot('stand-in containerd');

const runFile = promisify(execFile);
const base = mkdtempSync(join(tmpdir(), 'devop-containerd-'));
const runDir = join(base, 'run');
const root = join(base, 'root');
let started: number[] = [];

function ensureFromAnotherProcess(): Promise<string> {
  return runFile(process.execPath, ['--import', 'tsx', 'test/standin/fixtures/ensure-containerd.ts', runDir, root], {
    timeout: 60_000,
  }).then((r) => r.stdout.trim());
}

/** containerd processes whose command line names this test's config. */
function daemonsOfThisTest(): number[] {
  const config = join(runDir, 'containerd.toml');
  return readdirPids().filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes(config);
    } catch {
      return false;
    }
  });
}

function readdirPids(): number[] {
  return readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .map(Number);
}

afterAll(async () => {
  // Only the daemon this test started, by its PID.
  for (const pid of started) {
    try {
      process.kill(pid, 'SIGTERM');
    } catch {
      // already gone
    }
  }
  await new Promise((r) => setTimeout(r, 500));
  rmSync(base, { recursive: true, force: true });
});

describe('stand-in containerd', () => {
  it('two processes starting it at once start one daemon; a third finds it running', async () => {
    const [a, b] = await Promise.all([ensureFromAnotherProcess(), ensureFromAnotherProcess()]);
    started = [a, b].filter((x) => /^\d+$/.test(x)).map(Number);
    expect(started).toHaveLength(1);
    expect([a, b].filter((x) => x === 'running')).toHaveLength(1);
    expect(daemonsOfThisTest()).toEqual(started);
    expect(await ensureFromAnotherProcess()).toBe('running');
    const { stdout } = await runFile('ctr', ['-a', join(runDir, 'containerd.sock'), 'version']);
    expect(stdout).toContain('Server:');
  });

  it('says what to install when containerd is missing', async () => {
    const failed = await runFile(
      process.execPath,
      ['--import', 'tsx', 'test/standin/fixtures/ensure-containerd.ts', runDir, root],
      { env: { ...process.env, PATH: '/nonexistent' }, timeout: 60_000 },
    ).then(
      () => undefined,
      (err: { stderr?: string }) => err.stderr ?? '',
    );
    expect(failed).toMatch(/containerd is not installed/);
    expect(failed).toMatch(/apt-get install containerd runc/);
  });
});
