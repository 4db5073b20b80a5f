// `npm run cluster` as a person runs it: Ctrl-C reaches the stand-in itself, which stops and removes what it made. No
// runner stands between them that would relay the signal and then SIGKILL a stand-in slow to confirm it (tsx's CLI
// does so after 30 ms without an answer, which a loaded machine's cleanup cannot give: it left netns and containers).
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../testkit/wait.js';

/** The command lines of the processes whose parent chain reaches `root`. */
function descendants(root: number): { pid: number; argv: string[] }[] {
  const procs = readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .map((name) => {
      try {
        const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        const argv = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0').filter(Boolean);
        return { pid: Number(name), ppid, argv };
      } catch {
        return undefined; // the process ended while the list was read
      }
    })
    .filter((p) => p !== undefined);
  const below = new Set([root]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const p of procs)
      if (below.has(p.ppid) && !below.has(p.pid)) {
        below.add(p.pid);
        grew = true;
      }
  }
  return procs.filter((p) => p.pid !== root && below.has(p.pid));
}

describe('npm run cluster', () => {
  it('Given the stand-in runs, When Ctrl-C, Then the stand-in gets it itself (no relay), stops and removes its folder', async () => {
    const run = spawn('npm', ['run', '--silent', 'cluster', '--', '--no-kubelet'], {
      cwd: new URL('../..', import.meta.url).pathname,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    run.stdout.on('data', (d: Buffer) => (out += d.toString()));
    run.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<string>((resolve) =>
      run.on('exit', (code, signal) => resolve(signal ?? `code ${code}`)),
    );
    try {
      await waitFor('the stand-in to be up', () => out.includes('Press Ctrl-C'), 90_000);
      const folder = /kubeconfig: (\S+)\/kubeconfig/.exec(out)?.[1] ?? '';
      expect(existsSync(folder), 'the stand-in made its folder').toBe(true);
      // Then exactly one process runs standin/main.ts: the stand-in, with no runner of its own above it
      const running = descendants(run.pid ?? 0).filter((p) => p.argv.some((a) => a.endsWith('standin/main.ts')));
      expect(running.map((p) => p.argv.join(' '))).toHaveLength(1);
      // When Ctrl-C is pressed (the terminal signals the whole foreground group)
      process.kill(-(run.pid ?? 0), 'SIGINT');
      // Then it stops on its own and its folder is gone (npm ends as its script did, or by the same signal)
      expect(['code 0', 'SIGINT']).toContain(await exited);
      expect(out).toContain('SIGINT: stopping the stand-in cluster');
      expect(existsSync(folder)).toBe(false);
    } finally {
      try {
        process.kill(-(run.pid ?? 0), 'SIGKILL');
      } catch {
        // the group has ended: nothing to stop
      }
    }
  }, 120_000);
});
