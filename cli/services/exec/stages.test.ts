// The exec pipeline's stages on their own: the start-up signals, the taken-port check, the session's end.
import { EventEmitter } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isUserError } from '../../../shared/errors.js';
import type { ChildExit, LocalCommand } from '../../process/child.js';
import type { ReportEvent, Reporter } from '../../reporter.js';
import type { ChildEnvHook, Session } from '../../session/connect.js';
import { FEATURES, type ClientMessage } from '../../../shared/protocol.js';
import { prepareChildEnv } from './environment.js';
import { refuseTakenPorts } from './local-ports.js';
import { startRecording } from './recording.js';
import { firstEnd, settle } from './outcome.js';
import { watchStartupSignals } from './startup-signals.js';
import { TrafficControl } from './traffic-control.js';

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

async function listening(): Promise<number> {
  const server = createServer();
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('no port');
  return address.port;
}

async function freePort(): Promise<number> {
  const port = await listening();
  await new Promise((r) => servers.pop()?.close(r));
  return port;
}

function recordingReporter(): Reporter & { events: ReportEvent[] } {
  const events: ReportEvent[] = [];
  return {
    events,
    emit: (e: ReportEvent) => void events.push(e),
    capturesChildOutput: false,
  } as unknown as Reporter & { events: ReportEvent[] };
}

function fakeSession(): Session & { tunnel: EventEmitter; stop?: (reason: string) => void } {
  const tunnel = new EventEmitter();
  const session = { tunnel } as unknown as Session & { tunnel: EventEmitter; stop?: (reason: string) => void };
  session.onStopped = (cb: (reason: string) => void) => {
    session.stop = cb;
  };
  return session;
}

function fakeCommand(): LocalCommand & { exit(e: ChildExit): void; stops: NodeJS.Signals[] } {
  let exit!: (e: ChildExit) => void;
  const exited = new Promise<ChildExit>((r) => (exit = r));
  const stops: NodeJS.Signals[] = [];
  return {
    exited,
    exit,
    stops,
    stop: async (signal: NodeJS.Signals = 'SIGTERM') => {
      stops.push(signal);
      return { code: null, signal, exitCode: 143 } as ChildExit;
    },
  } as unknown as LocalCommand & { exit(e: ChildExit): void; stops: NodeJS.Signals[] };
}

function fakeTraffic(): TrafficControl & { released: number } {
  const traffic = { released: 0, release: async () => void traffic.released++ };
  return traffic as unknown as TrafficControl & { released: number };
}

describe('start-up signals', () => {
  it('Given the start-up is running, When SIGHUP arrives, Then the step in flight is stopped with a line naming it', async () => {
    const startup = watchStartupSignals();
    try {
      const never = new Promise<never>(() => undefined);
      const raced = startup.race(never);
      process.emit('SIGHUP', 'SIGHUP');
      const err = await raced.catch((e: unknown) => e);
      expect(isUserError(err)).toBe(true);
      expect((err as Error).message).toBe('stopped by SIGHUP during start-up');
      expect(() => startup.signal.throwIfAborted()).toThrow('SIGHUP');
    } finally {
      startup.release();
    }
  });

  it('Given the local command runs (released), When SIGHUP arrives, Then the start-up is not stopped', () => {
    const before = process.listenerCount('SIGHUP');
    const startup = watchStartupSignals();
    expect(process.listenerCount('SIGHUP')).toBe(before + 1);
    startup.release();
    startup.release();
    expect(process.listenerCount('SIGHUP')).toBe(before);
    expect(startup.signal.aborted).toBe(false);
  });
});

describe('taken local ports', () => {
  it('Given another process listens on a mapped local port, Then one line names the port and a free mapping', async () => {
    const taken = await listening();
    const free = await freePort();
    const err = await refuseTakenPorts([
      { remote: 80, local: free },
      { remote: 8080, local: taken },
    ] as never).catch((e: unknown) => e);
    expect(isUserError(err)).toBe(true);
    expect((err as Error).message).toContain(`127.0.0.1:${taken} already accepts connections from another process`);
    expect((err as { hint?: string }).hint).toContain('-p 8080:<FREE PORT>');
  });

  it('Given every mapped local port is free, Then the check passes', async () => {
    const free = await freePort();
    await expect(refuseTakenPorts([{ remote: 80, local: free }] as never)).resolves.toBeUndefined();
  });
});

describe("the session's end", () => {
  it("Given the command exits, Then its exit code is devop's, the exit line is said and the ports released", async () => {
    const session = fakeSession();
    const command = fakeCommand();
    const traffic = fakeTraffic();
    const reporter = recordingReporter();
    const started = new Promise<void>(() => undefined);
    const ended = firstEnd(session, command, started);
    command.exit({ code: 3, signal: null, exitCode: 3 } as ChildExit);
    const code = await settle(await ended, command, started, traffic, reporter);
    expect(code).toBe(3);
    expect(reporter.events).toContainEqual({ type: 'exit', code: 3, signal: null });
    expect(traffic.released).toBe(1);
    expect(command.stops).toEqual([]);
  });

  it('Given the tunnel closes, Then the command is stopped and the failure names the tunnel and the fix', async () => {
    const session = fakeSession();
    const command = fakeCommand();
    const traffic = fakeTraffic();
    const started = new Promise<void>(() => undefined);
    const ended = firstEnd(session, command, started);
    session.tunnel.emit('close', new Error('websocket 1006'));
    const err = await settle(await ended, command, started, traffic, recordingReporter()).catch((e: unknown) => e);
    expect((err as Error).message).toBe('the tunnel to the agent closed: websocket 1006');
    expect(command.stops).toEqual(['SIGTERM']);
    expect(traffic.released).toBe(1);
  });

  it('Given the session is stopped from outside (devop sessions stop), Then the failure says so', async () => {
    const session = fakeSession();
    const command = fakeCommand();
    const started = new Promise<void>(() => undefined);
    const ended = firstEnd(session, command, started);
    session.stop?.('stopped by alice@laptop');
    const err = await settle(await ended, command, started, fakeTraffic(), recordingReporter()).catch(
      (e: unknown) => e,
    );
    expect((err as Error).message).toBe('this session was stopped: stopped by alice@laptop');
  });

  it('Given the start-up steps succeed, Then that alone does not end the session', async () => {
    const session = fakeSession();
    const command = fakeCommand();
    const ended = firstEnd(session, command, Promise.resolve());
    const first = await Promise.race([ended, new Promise((r) => setTimeout(() => r('still running'), 50))]);
    expect(first).toBe('still running');
    command.exit({ code: 0, signal: null, exitCode: 0 } as ChildExit);
    expect((await ended).kind).toBe('exit');
  });
});

/** A session whose agent answers the env read only when `answer` is called. */
function envSession(): Session & {
  envRequested: Promise<string>;
  answer(id: string, vars?: Record<string, string>): void;
} {
  const tunnel = new EventEmitter() as EventEmitter & { send(msg: ClientMessage): boolean };
  let requested!: (id: string) => void;
  const envRequested = new Promise<string>((r) => (requested = r));
  tunnel.send = (msg) => {
    if (msg.type === 'envRead') requested(msg.id);
    return true;
  };
  const answer = (id: string, vars?: Record<string, string>): void => {
    tunnel.emit('message', vars ? { type: 'env', id, vars } : { type: 'error', id, message: 'no such process' });
  };
  const hello = { features: [FEATURES.env], agentVersion: 'test' };
  return { tunnel, hello, envRequested, answer } as unknown as Session & {
    envRequested: Promise<string>;
    answer(id: string, vars?: Record<string, string>): void;
  };
}

const within = <T>(promise: Promise<T>, ms: number, what: string): Promise<T> =>
  Promise.race([
    promise,
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${what} within ${ms} ms: no`)), ms)),
  ]);

describe('the env step', () => {
  const env = { include: [], exclude: [], allow: [], override: {} } as never;

  it("Given hooks (the outgoing proxy), When the pod's env is still on its way, Then they start meanwhile", async () => {
    // Given an agent that answers the env read only once the first hook has started
    const session = envSession();
    let started!: () => void;
    const hookStarted = new Promise<void>((r) => (started = r));
    const order: string[] = [];
    const hook =
      (name: string): ChildEnvHook =>
      async () => {
        if (name === 'first') started();
        return {
          apply: (e) => {
            order.push(name);
            return { ...e, [`BY_${name.toUpperCase()}`]: e.POD_VAR ?? '' };
          },
        };
      };
    const reporter = recordingReporter();
    const prepared = prepareChildEnv(
      session,
      { env, childEnvHooks: [hook('first'), hook('second')] },
      reporter,
      () => undefined,
    );
    const id = await session.envRequested;
    // When the hooks have started before the pod's env came (the old order read the env first: this waits in vain)
    await within(hookStarted, 2000, 'the hooks started while the env was read');
    session.answer(id, { POD_VAR: 'from-the-pod' });
    // Then each hook adds to the pod's env, in the hooks' order
    const result = await prepared;
    expect(result.POD_VAR).toBe('from-the-pod');
    expect([result.BY_FIRST, result.BY_SECOND]).toEqual(['from-the-pod', 'from-the-pod']);
    expect(order).toEqual(['first', 'second']);
  });

  it("Given a hook started, When the pod's env cannot be read, Then the step fails and the hook is still cleaned up", async () => {
    const session = envSession();
    const cleanups: Array<() => Promise<void>> = [];
    let cleaned = false;
    const hook: ChildEnvHook = async () => ({
      apply: (e) => e,
      cleanup: async () => {
        cleaned = true;
      },
    });
    const prepared = prepareChildEnv(session, { env, childEnvHooks: [hook] }, recordingReporter(), (c) =>
      cleanups.push(c),
    );
    session.answer(await session.envRequested);
    await expect(prepared).rejects.toThrow("the agent could not read the pod's env: no such process");
    for (const cleanup of cleanups) await cleanup();
    expect(cleaned).toBe(true);
  });
});

describe('--record', () => {
  const harPath = () => join(mkdtempSync(join(tmpdir(), 'devop-record-')), 'session.har');

  it('Given a session that fails before any exchange, Then no HAR file is left behind', async () => {
    const path = harPath();
    const reporter = recordingReporter();
    const recording = await startRecording(path, 'steal', reporter);
    await recording.stop(true);
    expect(existsSync(path)).toBe(false);
    expect(reporter.events).toContainEqual({
      type: 'log',
      level: 'info',
      message: `recorded no HTTP exchange: ${path} was not written`,
    });
  });

  it('Given an earlier recording at the path and a session that fails before any exchange, Then it stays', async () => {
    const path = harPath();
    writeFileSync(path, 'an earlier recording');
    const recording = await startRecording(path, 'steal', recordingReporter());
    await recording.stop(true);
    expect(readFileSync(path, 'utf8')).toBe('an earlier recording');
  });

  it('Given the command exits with nothing recorded, Then the HAR says so (no entries)', async () => {
    const path = harPath();
    const recording = await startRecording(path, 'steal', recordingReporter());
    await recording.stop(false);
    expect(JSON.parse(readFileSync(path, 'utf8')).log.entries).toEqual([]);
  });
});

describe('traffic control', () => {
  it('Given an agent that does not read bodies, When a body filter is subscribed, Then one line names the fix', async () => {
    const sent: unknown[] = [];
    const session = {
      tunnel: { send: (msg: unknown) => void sent.push(msg), on: () => undefined, off: () => undefined },
      hello: { features: ['steal', 'http-filter'], agentVersion: '0.9.0' },
    } as unknown as Session;
    const info = { target: 'deploy/echo', namespace: 'default', ports: [{ remotePort: 80, localPort: 8080 }] };
    const traffic = new TrafficControl(
      session,
      info as never,
      { mode: 'steal', httpFilter: { body: '$.user: alice', match: 'all' }, flush: true, stealProbes: false },
      recordingReporter(),
    );
    const err = await traffic.subscribeAll().catch((e: unknown) => e);
    expect((err as Error).message).toBe(
      'agent 0.9.0 does not read request bodies: --http-body-filter cannot be applied',
    );
    expect(sent).toEqual([]);
  });
});
