// `devop exec` end to end: the local command never outlives devop (SIGINT, SIGTERM, kill -9 of devop, with children
// and grandchildren), a stop by devop — a signal or the TUI's q — exits 0, and a command that exits before it
// listens fails the listen step with the reason.
import { spawn, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { type DevopRun, LOCAL_SERVER, ROOT, deployEcho, devopExec, startE2ECluster } from '../../testkit/e2e.js';
import type { Cluster } from '../../testkit/e2e.js';
import { waitFor } from '../../testkit/wait.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('e2e exec lifecycle');

/** PIDs of live processes whose argv contains the marker (zombies have an empty cmdline, so they never match). */
function processesWith(marker: string): number[] {
  const found: number[] = [];
  for (const pid of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(marker)) found.push(Number(pid));
    } catch {
      // The process ended between the listing and the read.
    }
  }
  return found;
}

/** For waitFor: true once no process carries the marker. */
const gone = (marker: string): true | undefined => processesWith(marker).length === 0 || undefined;

/** Unique per test: a number, since it ends up as sleep's argument (sleep 1000.<marker>). */
const newMarker = (): string => `${Date.now() % 1_000_000}${Math.floor(Math.random() * 1000)}`;

/**
 * Like `npx tsx main.ts`: a shell whose background job sleeps, and a node process whose own child (another node)
 * runs the server on $LOCAL_PORT. Every process carries the marker in its argv.
 */
function chain(marker: string): string[] {
  const grandchild = [
    `require('child_process').spawn(process.execPath, ['${LOCAL_SERVER}', '${marker}'], { stdio: 'inherit' });`,
    'setInterval(() => {}, 1000);',
  ].join(' ');
  return ['sh', '-c', `sleep 1000.${marker} & ${JSON.stringify(process.execPath)} -e "${grandchild}" ${marker}; wait`];
}

describe('devop exec: the local command ends with devop', () => {
  let cluster: Cluster;
  const runs: DevopRun[] = [];
  const markers: string[] = [];
  const track = (run: DevopRun): DevopRun => {
    runs.push(run);
    return run;
  };

  beforeAll(async () => {
    const env = await startE2ECluster();
    cluster = env.cluster;
    await deployEcho(env, 'echo');
  });

  afterAll(async () => {
    await Promise.all(runs.map((r) => r.dispose()));
    // A failed test must not leave its processes behind.
    for (const pid of markers.flatMap(processesWith)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Ended meanwhile.
      }
    }
    await cluster?.stop();
  });

  async function readyChain(): Promise<{ run: DevopRun; marker: string }> {
    const marker = newMarker();
    markers.push(marker);
    const local = await freePort();
    const execArgs = ['-t', 'deploy/echo', '-p', `8080:${local}`];
    const run = track(devopExec(cluster, execArgs, chain(marker), { env: { LOCAL_PORT: String(local) } }));
    await run.ready();
    expect(processesWith(marker).length, run.output).toBeGreaterThanOrEqual(4);
    return { run, marker };
  }

  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    it(`${signal} to devop (not from a terminal) ends the command's processes within 3 s; exit 0`, async () => {
      // Given devop running a command with children and grandchildren
      const { run, marker } = await readyChain();
      // When devop gets the signal
      run.child.kill(signal);
      // Then no process of the command remains within 3 s, and the stop is a normal end
      await waitFor(
        () => `no process with ${marker}\n${run.output}`,
        () => gone(marker),
        3000,
      );
      expect((await run.exited).code, run.output).toBe(0);
    });
  }

  it('kill -9 of devop ends every process of the command within 3 s', async () => {
    const { run, marker } = await readyChain();
    run.child.kill('SIGKILL');
    await waitFor(`no process with ${marker} after kill -9 of devop`, () => gone(marker), 3000);
  });

  it('a command that exits before it listens fails the listen step with the reason; exit with its code', async () => {
    // Given a command that exits with code 3 without listening
    const local = await freePort();
    const command = ['sh', '-c', 'sleep 0.5; exit 3'];
    const run = track(devopExec(cluster, ['-t', 'deploy/echo', '-p', `8080:${local}`], command));
    // Then devop exits with its code, and the listen step failed, saying why
    expect((await run.exited).code, run.output).toBe(3);
    const step = `waiting for the local command to listen on :${local}`;
    const why = `the local command exited with code 3 before listening on 127.0.0.1:${local}`;
    expect(run.stderr).toContain(`devop: ✗ ${step}: ${why} (`);
    expect(run.stderr).not.toMatch(/✓ waiting for the local command/);
    // …reported before the session's end, which it explains
    const exitLine = run.stderr.indexOf('devop: local command exited with code 3');
    expect(run.stderr.indexOf('✗ waiting'), run.output).toBeLessThan(exitLine);
  });

  it('stopping devop while it waits for the command to listen: the listen step fails, devop exits 0', async () => {
    // Given a command that never listens, past the start-up timeout (devop keeps waiting)
    const local = await freePort();
    const execArgs = ['-t', 'deploy/echo', '-p', `8080:${local}`, '--startup-timeout', '1'];
    const run = track(devopExec(cluster, execArgs, ['sleep', '60']));
    await run.waitForStderr(/does not listen on 127\.0\.0\.1:\d+ after 1 s/);
    // When devop is stopped
    expect((await run.stop('SIGTERM')).code, run.output).toBe(0);
    // Then the step that never succeeded says so, with no tick
    const why = `the local command was ended by SIGTERM before listening on 127.0.0.1:${local}`;
    expect(run.stderr).toContain(`devop: ✗ waiting for the local command to listen on :${local}: ${why} (`);
    expect(run.stderr).not.toMatch(/✓ waiting for the local command/);
  });

  const hasScript = spawnSync('script', ['--version']).status === 0;
  it.skipIf(!hasScript)('quitting the TUI with q stops the command and exits 0', async () => {
    // Given devop drawing its TUI in a terminal (script(1) gives it a pty; CI unset so the TUI is chosen)
    const marker = newMarker();
    markers.push(marker);
    const local = await freePort();
    const devop = [process.execPath, join(ROOT, 'bin', 'devop.js'), 'exec', '--kubeconfig', cluster.kubeconfigPath];
    devop.push('-t', 'deploy/echo', '-p', `8080:${local}`, '--', ...chain(marker));
    const quoted = `exec ${devop.map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ')}`;
    // script(1)'s pty has no size of its own: COLUMNS/LINES give the TUI room for its lines
    const screenSize = { TERM: 'xterm-256color', COLUMNS: '120', LINES: '40' };
    const env: NodeJS.ProcessEnv = { ...process.env, LOCAL_PORT: String(local), ...screenSize };
    delete env.CI;
    const term = spawn('script', ['-qfec', quoted, '/dev/null'], { cwd: ROOT, env, stdio: ['pipe', 'pipe', 'pipe'] });
    let screen = '';
    term.stdout!.setEncoding('utf8').on('data', (t: string) => (screen += t));
    const exited = new Promise<number | null>((r) => term.once('exit', (c) => r(c)));
    /** The screen without escape sequences (colours, cursor moves). */
    const text = (): string => screen.replace(/\x1b\[[0-9;?]*[a-zA-Z]/g, '');
    try {
      // The session is up (the port line) and the local server listens (its first line, in the output pane)
      const shown = (): boolean => text().includes(':8080 mirroring') && text().includes('"seen":"listening"');
      const up = (): true | undefined => (shown() && processesWith(marker).length >= 4) || undefined;
      await waitFor('the TUI to show the session', up).catch((err: Error) => {
        throw new Error(`${err.message}\n${screen.slice(-3000)}`);
      });
      // When the user presses q
      term.stdin!.write('q');
      // Then the command ends, and devop exits 0
      expect(await exited, screen.slice(-2000)).toBe(0);
      await waitFor(`no process with ${marker}`, () => gone(marker), 3000);
    } finally {
      term.kill('SIGKILL');
    }
  });
});
