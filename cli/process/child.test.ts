// The local command: exit codes and signals pass through, a missing command is one line, listening is detected.
import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { exitCodeAfter, exitCodeFor, startLocalCommand } from './child.js';
import { canConnect, waitForListen } from './listen.js';

const base = { env: { PATH: process.env.PATH ?? '' }, pipeOutput: true };

describe('local command', () => {
  it('reports the exit code of the command', async () => {
    const cmd = await startLocalCommand({ ...base, command: 'sh', args: ['-c', 'exit 7'] });
    expect(await cmd.exited).toEqual({ code: 7, signal: null, stoppedByDevop: false, exitCode: 7 });
  });

  it('reports 128 + signal when a signal ends the command, and 0 when devop stopped it', async () => {
    // Given a command that ends itself by a signal
    const selfKill = await startLocalCommand({ ...base, command: 'sh', args: ['-c', 'kill -TERM $$'] });
    // Then the exit code says which signal
    expect(await selfKill.exited).toEqual({ code: null, signal: 'SIGTERM', stoppedByDevop: false, exitCode: 143 });
    expect(exitCodeFor(null, 'SIGKILL')).toBe(137);
    // When devop stops a command with SIGTERM, the session ended normally
    const cmd = await startLocalCommand({ ...base, command: 'sleep', args: ['30'] });
    expect(await cmd.stop('SIGTERM')).toEqual({ code: null, signal: 'SIGTERM', stoppedByDevop: true, exitCode: 0 });
    // …also when the command turns the signal into its conventional code; any other code is a failure to pass on
    expect(exitCodeAfter(130, null, true)).toBe(0);
    expect(exitCodeAfter(3, null, true)).toBe(3);
    expect(exitCodeAfter(130, null, false)).toBe(130);
  });

  it('passes the env and pipes output when asked', async () => {
    const chunks: string[] = [];
    const cmd = await startLocalCommand({
      env: { ...base.env, GREETING: 'hi from env' },
      pipeOutput: true,
      onOutput: (_s, t) => chunks.push(t),
      command: 'sh',
      args: ['-c', 'echo "$GREETING"'],
    });
    await cmd.exited;
    await new Promise((r) => setImmediate(r));
    expect(chunks.join('')).toBe('hi from env\n');
  });

  it('says "command not found" in one line', async () => {
    await expect(startLocalCommand({ ...base, command: 'devop-no-such-command', args: [] })).rejects.toThrow(
      'command not found: devop-no-such-command',
    );
  });

  it('waits until a port accepts connections, and gives up at the deadline', async () => {
    // Given a port nobody listens on yet
    const server = createServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    await new Promise<void>((r) => server.close(() => r()));
    expect(await canConnect(port)).toBe(false);
    // When a listener appears later
    const waiting = waitForListen(port, { timeoutMs: 10_000 });
    setTimeout(() => server.listen(port, '127.0.0.1'), 200);
    // Then the wait resolves true
    expect(await waiting).toBe(true);
    await new Promise<void>((r) => server.close(() => r()));
    expect(await waitForListen(port, { timeoutMs: 150 })).toBe(false);
  });
});
