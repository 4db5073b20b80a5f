// Output when devop is not on a terminal: Plain lines on stderr without escape codes, NDJSON on stdout, no crash when
// the reader goes away. Drives the real reporters (createReporter) with the exec service's event sequence in a child
// process.
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { isInteractive } from '../../cli/ui/index.js';
import { ESCAPE_CODES, REPO_ROOT } from './helpers/cli.js';
import { waitFor } from '../../testkit/wait.js';
import { runNode } from '../../testkit/processes.js';

const replay = (...args: string[]) => runNode(['--import', 'tsx', 'test/ui/fixtures/replay.ts', ...args]);

describe('piped output (not a TTY)', () => {
  it('auto picks Plain: readable lines on stderr, no escape codes, the child output untouched', async () => {
    // When the session runs with stdout and stderr piped
    const result = await replay('--output', 'auto');
    // Then it ends well, with Plain lines and no escape code anywhere
    expect(result.code).toBe(0);
    expect(result.stderr).not.toMatch(ESCAPE_CODES);
    expect(result.stdout).not.toMatch(ESCAPE_CODES);
    const lines = result.stderr.split('\n').filter(Boolean);
    expect(lines).toContain('devop: → resolve target');
    expect(lines).toContain('devop: ✓ resolve target: pod/echo-7d9f8c6b5-x2x4q (Ready) (12 ms)');
    expect(lines).toContain('devop: ✓ stealing :3000 (8 ms)');
    expect(lines).toContain('devop: ready');
    expect(lines).toContain('devop: 200 GET /hello → local :3000 (3 ms, 42 B)');
    expect(lines).toContain('devop: local command exited with code 0');
    expect(lines.indexOf('devop: ready')).toBeGreaterThan(lines.indexOf('devop: ✓ stealing :3000 (8 ms)'));
  });

  it('a failed start-up names the step and the reason, without escape codes', async () => {
    // When the start-up fails at the agent step
    const result = await replay('--output', 'auto', '--fail');
    // Then the failed step and the error are plain lines
    expect(result.stderr).not.toMatch(ESCAPE_CODES);
    expect(result.stderr).toContain('devop: ✗ agent: image pull failed (3.0 s)\n');
    expect(result.stderr).toContain(
      'devop: error [agent]: the agent pod cannot pull ghcr.io/devop/agent:nope — fix: pass --agent-image',
    );
    expect(result.stderr).not.toContain('devop: ready');
  });

  it('--output json writes one JSON event per line on stdout, each with a type, including ready', async () => {
    // When the session runs with --output json
    const result = await replay('--output', 'json');
    // Then every stdout line parses and has a type and a time, and the child's output came as output events
    expect(result.code).toBe(0);
    const events = result.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { type: string; time: string; [key: string]: unknown });
    for (const event of events) {
      expect(typeof event.type).toBe('string');
      expect(Number.isNaN(Date.parse(event.time))).toBe(false);
    }
    const types = events.map((event) => event.type);
    expect(types.filter((type) => type === 'ready')).toHaveLength(1);
    expect(types).toEqual(
      expect.arrayContaining(['step', 'ready', 'request', 'response', 'connection', 'output', 'exit']),
    );
    expect(events.find((event) => event.type === 'ready')).toMatchObject({
      session: { target: 'deploy/echo', ports: [{ remotePort: 3000, mode: 'steal' }] },
    });
    // And nothing else is on stdout, nothing on stderr
    expect(result.stderr).toBe('');
  });

  it('does not crash when the reader closes the pipe early (devop … | head -1)', async () => {
    // Given a JSON session whose stdout reader goes away after the first line
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'test/ui/fixtures/replay.ts', '--output', 'json', '--hold'],
      { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stderr = '';
    let stdout = '';
    child.stderr.setEncoding('utf8').on('data', (text: string) => (stderr += text));
    child.stdout.setEncoding('utf8').on('data', (text: string) => (stdout += text));
    await waitFor('the ready event', () => stdout.includes('"type":"ready"'));
    child.stdout.destroy();
    // When the session then ends and writes its last events into the closed pipe
    child.kill('SIGINT');
    const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)));
    // Then it ends normally, without an EPIPE stack
    expect(stderr).not.toMatch(/EPIPE|Unhandled/);
    expect(code).toBe(0);
  });
});

describe('isInteractive', () => {
  it('is true only when stdin and stdout are terminals and CI is not set', () => {
    const tty = { isTTY: true };
    const pipe = { isTTY: false };
    expect(isInteractive(tty, tty, {})).toBe(true);
    expect(isInteractive(tty, tty, { CI: 'true' })).toBe(false);
    expect(isInteractive(tty, tty, { CI: '1' })).toBe(false);
    expect(isInteractive(tty, tty, { CI: 'false' })).toBe(true);
    expect(isInteractive(pipe, tty, {})).toBe(false);
    expect(isInteractive(tty, pipe, {})).toBe(false);
  });
});
