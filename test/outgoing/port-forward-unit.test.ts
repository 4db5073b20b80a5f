// Tests of devop port-forward's parts without a cluster: -L parsing (and its errors), and the forward listeners over a
// local dialer — 100 parallel connections byte-exact, a failed dial closes only its own connection, a busy local port;
// and over a mux to the agent's own outgoing handler, where a connection's first bytes travel with its connect.
import { randomBytes, createHash } from 'node:crypto';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLog } from '../../agent/log.js';
import { serveOutgoing } from '../../agent/outgoing/connect.js';
import { createLocalDialer, type ClusterDialer } from '../../cli/outgoing/dialer.js';
import { createMuxDialer } from '../../cli/outgoing/mux-dialer.js';
import type { ReportEvent, Reporter } from '../../cli/reporter.js';
import { parseForward, startForwards } from '../../cli/services/port-forward.js';
import { isUserError } from '../../shared/errors.js';
import { createAgentMux, createClientMux } from '../../shared/mux.js';
import { startTcpEcho, type Closable } from '../../testkit/outgoing.js';
import { socketPair } from '../../testkit/sockets.js';

function collectingReporter(): Reporter & { events: ReportEvent[] } {
  const events: ReportEvent[] = [];
  return { events, capturesChildOutput: false, emit: (event) => void events.push(event), close: async () => undefined };
}

/** Sends `payload` through 127.0.0.1:port, half-closes, and returns what came back. */
function roundTrip(port: number, payload: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('end', () => {
      socket.end();
      resolve(Buffer.concat(chunks));
    });
    socket.on('error', reject);
    socket.end(payload);
  });
}

describe('port-forward -L parsing', () => {
  it('reads [LOCAL:]HOST:PORT with names, IPv4 and bracketed IPv6', () => {
    expect(parseForward('18080:echo.default:80')).toMatchObject({ localPort: 18080, host: 'echo.default', port: 80 });
    expect(parseForward('echo.default.svc.cluster.local:8080')).toMatchObject({
      localPort: 8080,
      host: 'echo.default.svc.cluster.local',
      port: 8080,
    });
    expect(parseForward('0:10.96.0.10:53')).toMatchObject({ localPort: 0, host: '10.96.0.10', port: 53 });
    expect(parseForward('8443:[fd00::1]:443')).toMatchObject({ localPort: 8443, host: 'fd00::1', port: 443 });
  });

  it('names the problem and the form for bad specs', () => {
    for (const spec of ['echo.default', '80:echo.default', 'echo:0', 'x:echo:80', '70000:echo:80', 'fd00::1:80']) {
      let caught: unknown;
      try {
        parseForward(spec);
      } catch (err) {
        caught = err;
      }
      expect(isUserError(caught), spec).toBe(true);
      expect((caught as Error).message, spec).toContain(`-L ${spec}:`);
      expect((caught as { hint: string }).hint).toContain('-L [LOCAL:]HOST:PORT');
    }
  });
});

describe('port-forward listeners (local dialer)', () => {
  let echo: Closable;
  beforeAll(async () => {
    echo = await startTcpEcho();
  });
  afterAll(async () => {
    await echo?.close();
  });

  it('100 parallel connections through one forward are byte-exact', async () => {
    // Given a forward of a free local port to echo.default
    const dialer = createLocalDialer({ hosts: { 'echo.default': '127.0.0.1' } });
    const forwarding = await startForwards(
      dialer,
      [parseForward(`0:echo.default:${echo.port}`)],
      '127.0.0.1',
      collectingReporter(),
    );
    try {
      // When 100 clients each send 64 KiB of random bytes at once
      const payloads = Array.from({ length: 100 }, () => randomBytes(64 * 1024));
      const answers = await Promise.all(payloads.map((payload) => roundTrip(forwarding.ports[0], payload)));
      // Then each gets exactly its own bytes back
      const digest = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
      expect(answers.map(digest)).toEqual(payloads.map(digest));
    } finally {
      await forwarding.stop();
    }
  });

  it('a dial failure closes that connection and is reported with its reason', async () => {
    const reporter = collectingReporter();
    const forwarding = await startForwards(
      createLocalDialer(),
      [parseForward('0:nosuch.default:80')],
      '127.0.0.1',
      reporter,
    );
    try {
      const answer = await roundTrip(forwarding.ports[0], Buffer.from('hello')).catch(
        (err: NodeJS.ErrnoException) => err.code,
      );
      expect(['ECONNRESET', 'EPIPE']).toContain(answer);
      expect(reporter.events).toContainEqual({
        type: 'log',
        level: 'warn',
        message: '-L 0:nosuch.default:80: ENOTFOUND: nosuch.default does not resolve from the pod (cluster DNS)',
      });
    } finally {
      await forwarding.stop();
    }
  });

  it('a local port in use is a user error naming the port and the fix', async () => {
    const first = await startForwards(
      createLocalDialer(),
      [parseForward('0:echo.default:80')],
      '127.0.0.1',
      collectingReporter(),
    );
    try {
      const err = await startForwards(
        createLocalDialer(),
        [parseForward(`${first.ports[0]}:echo.default:80`)],
        '127.0.0.1',
        collectingReporter(),
      ).catch((e: unknown) => e);
      expect(isUserError(err)).toBe(true);
      expect((err as Error).message).toBe(
        `local port 127.0.0.1:${first.ports[0]} for -L ${first.ports[0]}:echo.default:80 is in use`,
      );
    } finally {
      await first.stop();
    }
  });
});

describe('port-forward over a mux to the agent code', () => {
  // The agent's own outgoing handler (serveOutgoing) on the far side of a real Mux over loopback: the connection's
  // first bytes travel with the connect (early), more than the first window of them included, and a refused connect
  // still reaches the client as a reset and the user as one line.
  let echo: Closable;
  const ends: Array<() => void> = [];
  let dialer: ClusterDialer;
  beforeAll(async () => {
    echo = await startTcpEcho();
    const [clientEnd, agentEnd] = await socketPair(ends);
    for (const socket of [clientEnd, agentEnd]) socket.on('error', () => undefined);
    const agentMux = createAgentMux(agentEnd);
    const log = createLog('warn', () => undefined);
    agentMux.on('stream', (stream) => {
      if (stream.open.kind === 'outgoing')
        void serveOutgoing(stream, stream.open.host, stream.open.port, undefined, log);
    });
    dialer = createMuxDialer(createClientMux(clientEnd));
  });
  afterAll(async () => {
    for (const end of ends) end();
    await echo?.close();
  });

  it('carries 1 MiB each way byte-exact, written before the agent connected', async () => {
    const forwarding = await startForwards(
      dialer,
      [parseForward(`0:127.0.0.1:${echo.port}`)],
      '127.0.0.1',
      collectingReporter(),
    );
    try {
      const payload = randomBytes(1024 * 1024);
      const answer = await roundTrip(forwarding.ports[0], payload);
      expect(createHash('sha256').update(answer).digest('hex')).toBe(
        createHash('sha256').update(payload).digest('hex'),
      );
    } finally {
      await forwarding.stop();
    }
  });

  it('a refused connect resets the client and is reported with its reason', async () => {
    const reporter = collectingReporter();
    const forwarding = await startForwards(dialer, [parseForward('0:127.0.0.1:9')], '127.0.0.1', reporter);
    try {
      const answer = await roundTrip(forwarding.ports[0], Buffer.from('hello')).catch(
        (err: NodeJS.ErrnoException) => err.code,
      );
      expect(['ECONNRESET', 'EPIPE']).toContain(answer);
      await expect
        .poll(() => reporter.events.map((e) => (e.type === 'log' ? e.message : '')))
        .toContainEqual(expect.stringMatching(/^-L 0:127\.0\.0\.1:9: ECONNREFUSED/));
    } finally {
      await forwarding.stop();
    }
  });
});
