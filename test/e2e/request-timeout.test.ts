// The built `devop` against an API server that completes the TLS handshake and never answers: exec, ls and doctor each
// give up after --request-timeout with one line naming the server, what devop was doing and the fix, and exit 1.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStalledApiServer, type FakeApiServer } from '../../testkit/stalled-api.js';
import { ROOT } from '../../testkit/e2e.js';

/** Far more than the 2 s timeout plus devop's start-up on a loaded machine; without the timeout devop never ends. */
const KILL_AFTER_MS = 20_000;
const FIX = 'fix: check that the cluster is reachable (kubectl cluster-info), or raise --request-timeout';

interface Run {
  code: number | null;
  ms: number;
  stdout: string;
  stderr: string;
}

function devop(args: string[], options: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): Promise<Run> {
  const started = Date.now();
  // An empty directory of its own unless the test gives one (so no devop.json is found); removed once devop has ended.
  const ownCwd = options.cwd === undefined ? mkdtempSync(join(tmpdir(), 'devop-timeout-cwd-')) : undefined;
  const child = spawn(process.execPath, [join(ROOT, 'bin', 'devop.js'), ...args], {
    cwd: options.cwd ?? ownCwd,
    env: { ...process.env, CI: '1', ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (t: string) => (stdout += t));
  child.stderr.setEncoding('utf8').on('data', (t: string) => (stderr += t));
  const killer = setTimeout(() => child.kill('SIGKILL'), KILL_AFTER_MS);
  return new Promise((resolve) =>
    child.once('close', (code) => {
      clearTimeout(killer);
      if (ownCwd) rmSync(ownCwd, { recursive: true, force: true });
      resolve({ code, ms: Date.now() - started, stdout, stderr });
    }),
  );
}

const lines = (text: string): string[] => text.split('\n').filter((l) => l.trim() !== '');
const escapeRegExp = (text: string): string => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');

describe('devop against an API server that does not answer', () => {
  let api: FakeApiServer;
  const timeoutFlags = (): string[] => ['--kubeconfig', api.kubeconfigPath, '--request-timeout', '2s'];

  beforeAll(async () => {
    api = await startStalledApiServer();
  });

  afterAll(async () => {
    await api?.close();
  });

  it('devop exec fails in the resolve target step after the timeout, in one error line', async () => {
    const run = await devop(['exec', '-t', 'deploy/echo', ...timeoutFlags(), '--output', 'plain', '--', 'true']);
    expect(run.code, run.stderr).toBe(1);
    expect(run.ms).toBeGreaterThanOrEqual(1_900);
    expect(run.ms).toBeLessThan(KILL_AFTER_MS);
    const errors = lines(run.stderr).filter((l) => l.includes('— fix:'));
    expect(errors, run.stderr).toHaveLength(1);
    expect(errors[0]).toMatch(
      new RegExp(
        `^devop: error \\[resolve target deploy/echo\\]: the API server ${escapeRegExp(api.url)} did not answer ` +
          `within 2 s ` +
          `\\(while trying to [^)]+\\) — ${escapeRegExp(FIX)}$`,
      ),
    );
    expect(api.connections()).toBeGreaterThan(0);
  });

  it('devop ls fails after the timeout with one line on stderr', async () => {
    const run = await devop(['ls', ...timeoutFlags()]);
    expect(run.code, run.stderr).toBe(1);
    expect(run.ms).toBeGreaterThanOrEqual(1_900);
    expect(run.stdout).toBe('');
    expect(lines(run.stderr), run.stderr).toEqual([
      expect.stringMatching(
        new RegExp(
          `^devop: the API server ${escapeRegExp(api.url)} did not answer within 2 s ` +
            `\\(while trying to list [^)]+\\) — ${escapeRegExp(FIX)}$`,
        ),
      ),
    ]);
  });

  it('devop doctor fails the API server check after the timeout, and checks nothing more', async () => {
    const run = await devop(['doctor', ...timeoutFlags()]);
    expect(run.code, run.stdout).toBe(1);
    expect(run.ms).toBeGreaterThanOrEqual(1_900);
    expect(run.ms).toBeLessThan(KILL_AFTER_MS);
    const failed = lines(run.stdout).filter((l) => l.startsWith('✗'));
    expect(failed, run.stdout).toEqual([
      `✗ API server: the API server ${api.url} did not answer within 2 s (while trying to read the server version)`,
    ]);
    expect(run.stdout).toContain(`    ${FIX}\n`);
  });

  it('devop exec takes the timeout from devop.json, the flag winning', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'devop-timeout-config-'));
    try {
      writeFileSync(join(dir, 'devop.json'), JSON.stringify({ requestTimeout: '1500ms' }));
      const base = ['exec', '-t', 'deploy/echo', '--kubeconfig', api.kubeconfigPath, '--output', 'plain'];
      const fromConfig = await devop([...base, '--', 'true'], { cwd: dir });
      expect(fromConfig.stderr).toContain('did not answer within 1.5 s');
      const fromFlag = await devop([...base, '--request-timeout', '1', '--', 'true'], { cwd: dir });
      expect(fromFlag.stderr).toContain('did not answer within 1 s');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('says in one line when --request-timeout is not a duration', async () => {
    const run = await devop(['ls', '--kubeconfig', api.kubeconfigPath, '--request-timeout', 'soon']);
    expect(run.code).toBe(1);
    expect(lines(run.stderr)).toEqual([
      'devop: invalid --request-timeout "soon": not a number of seconds or a duration — fix: pass a whole number of ' +
        'seconds or a number with a unit (e.g. 10s, 1m, 1m30s, 500ms), or 0 for no timeout',
    ]);
  });
});
