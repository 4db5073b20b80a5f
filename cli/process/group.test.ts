// The local command never outlives devop: a signal to devop reaches every process under the command (sh -c chains,
// node spawning children), SIGKILL follows for what ignores it, and kill -9 of devop still ends them all. "devop" here
// is test/helpers/local-command-parent.ts, a process that runs the command through startLocalCommand as devop exec
// does.
import { spawn, spawnSync, type ChildProcess, type StdioOptions } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '..', '..');
const PARENT = join(ROOT, 'test', 'helpers', 'local-command-parent.ts');
/** devop's grace between the stop signal and SIGKILL, short so that the SIGKILL path is exercised quickly. */
const GRACE_MS = 1000;

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

async function until(what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const started: { parent: ChildProcess; marker: string }[] = [];

afterEach(() => {
  // A failed test must not leave its sleeps behind.
  for (const { parent, marker } of started.splice(0)) {
    parent.kill('SIGKILL');
    for (const pid of processesWith(marker)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Ended meanwhile.
      }
    }
  }
});

type Started = { parent: ChildProcess; exited: Promise<number | null> };

function spawnParent(command: string[], stdio: StdioOptions): ChildProcess {
  return spawn(process.execPath, ['--import', 'tsx', PARENT, String(GRACE_MS), ...command], { cwd: ROOT, stdio });
}

/** Starts "devop" with the command; resolves once `count` processes carry the marker (the chain is fully up). */
async function startParent(command: string[], marker: string, count: number): Promise<Started> {
  const parent = spawnParent(command, ['ignore', 'pipe', 'inherit']);
  started.push({ parent, marker });
  const exited = new Promise<number | null>((r) => parent.once('exit', (code) => r(code)));
  // The parent itself carries the marker in its argv.
  await until(`${count} processes of ${command.join(' ')}`, () => processesWith(marker).length >= count + 1, 20_000);
  return { parent, exited };
}

/** Unique per test: a number, since it ends up as sleep's argument (sleep 1000.<marker>). */
const newMarker = (): string => `${Date.now() % 1_000_000}${Math.floor(Math.random() * 1000)}`;

const chains: { name: string; command: (m: string) => string[]; count: number }[] = [
  {
    // Background jobs of a non-interactive sh ignore SIGINT, and the inner sh never sees a signal to the outer one.
    name: 'sh -c \'sh -c "sleep" & sleep\'',
    command: (m) => ['sh', '-c', `sh -c "sleep 1000.${m}" & sleep 1000.${m}`],
    count: 4,
  },
  {
    // Like npx → tsx → node: the child of node ignores the stop signals, so only SIGKILL ends it.
    name: 'node -e spawning a child that ignores SIGINT/SIGTERM',
    command: (m) => [
      process.execPath,
      '-e',
      `require('child_process').spawn('sh', ['-c', 'trap "" INT TERM HUP; sleep 1000.${m}'], { stdio: 'inherit' });
      setInterval(() => {}, 1000);`,
    ],
    count: 3,
  },
];

describe.skipIf(process.platform !== 'linux')('the local command and every process under it end with devop', () => {
  for (const chain of chains) {
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      it(`${chain.name}: ${signal} to devop ends them all within 3 s, and devop exits 0`, async () => {
        // Given devop running a command whose processes have children of their own
        const marker = newMarker();
        const { parent, exited } = await startParent(chain.command(marker), marker, chain.count);
        // When devop gets the signal (not from a terminal: only devop receives it)
        const sentAt = Date.now();
        parent.kill(signal);
        // Then no process of the command remains within 3 s, and devop calls it a normal stop
        await until(`no process with ${marker}`, () => processesWith(marker).length === 0, 3000);
        expect(await exited).toBe(0);
        expect(Date.now() - sentAt).toBeLessThan(3000);
      });
    }

    it(`${chain.name}: kill -9 of devop ends them all within 3 s`, async () => {
      // Given devop running the command
      const marker = newMarker();
      const { parent } = await startParent(chain.command(marker), marker, chain.count);
      // When devop is killed without a chance to clean up
      parent.kill('SIGKILL');
      // Then its lifeline ends the command's group: nothing remains within 3 s
      await until(`no process with ${marker} after kill -9 of devop`, () => processesWith(marker).length === 0, 3000);
    });
  }

  it('devop waits for what the command left behind: a background process of an exited command is ended', async () => {
    // Given a command that starts a process in the background and exits at once
    const marker = newMarker();
    const parent = spawnParent(['sh', '-c', `sleep 1000.${marker} & exit 5`], 'ignore');
    started.push({ parent, marker });
    const code = await new Promise<number | null>((r) => parent.once('exit', (c) => r(c)));
    // Then devop exits with the command's code only once the background process is gone
    expect(code).toBe(5);
    expect(processesWith(marker)).toEqual([]);
  });

  const hasScript = spawnSync('script', ['--version']).status === 0;
  it.skipIf(!hasScript)('in a terminal: the command reads the terminal, and Ctrl-C reaches it once', async () => {
    // Given devop in a terminal (script(1) gives it a pty) running a command that reads stdin and counts SIGINTs
    const program = [
      'let n = 0;',
      "process.on('SIGINT', () => { n++; console.log('sigint ' + n); setTimeout(() => process.exit(0), 500); });",
      "process.stdin.setEncoding('utf8').once('data', (d) => console.log('read ' + d.trim()));",
      "console.log('waiting'); setInterval(() => {}, 1000);",
    ].join(' ');
    const parent = [process.execPath, '--import', 'tsx', PARENT, String(GRACE_MS), process.execPath, '-e', program];
    // exec: script(1) runs the line with $SHELL (set here); a non-interactive sh (dash) would otherwise stay as the
    // parent and die of the terminal's SIGINT itself. An interactive shell puts devop in a foreground group of its own.
    const inner = `exec ${parent.map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ')}`;
    const env = { ...process.env, SHELL: '/bin/sh' };
    const term = spawn('script', ['-qfec', inner, '/dev/null'], { cwd: ROOT, env, stdio: ['pipe', 'pipe', 'inherit'] });
    let screen = '';
    term.stdout!.setEncoding('utf8').on('data', (t: string) => (screen += t));
    const exited = new Promise<number | null>((r) => term.once('exit', (c) => r(c)));
    try {
      await until('the command to start', () => screen.includes('waiting'), 20_000);
      // When the user types a line, then presses Ctrl-C
      term.stdin!.write('hello\r');
      await until('the command to read the line', () => screen.includes('read hello'), 5000);
      term.stdin!.write('\x03');
      // Then the command got exactly one SIGINT (not one from the terminal and one from devop), and devop exits 0
      expect(await exited).toBe(0);
      expect(screen).toContain('sigint 1');
      expect(screen).not.toContain('sigint 2');
    } finally {
      term.kill('SIGKILL');
    }
  });
});
