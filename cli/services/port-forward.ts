// `devop port-forward`: local listeners whose connections the agent opens from the pod's netns (a target's pod, or a
// targetless agent's own pod) to cluster names or IPs (-L), and the target pod's ports stolen or mirrored to local
// addresses (-R, port-forward-remote.ts); runs until stopped, stopped from outside, or the tunnel goes.
import { createServer, type Server, type Socket } from 'node:net';
import { UserError } from '../../shared/errors.js';
import { adoptOwnReads } from '../../shared/own-reads.js';
import { FEATURES } from '../../shared/protocol.js';
import { OPTIONS } from '../config/options.js';
import { createMuxDialer } from '../outgoing/mux-dialer.js';
import { describeDialError, parseAuthority } from '../outgoing/http-connect.js';
import { toDialError, type ClusterDialer } from '../outgoing/dialer.js';
import { joinStreams } from '../outgoing/streams.js';
import { type Reporter, type SessionInfo, step, warn } from '../reporter.js';
import { connectSession, type Session, type SessionOptions } from '../session/connect.js';
import { connectSupervisedSession } from '../session/supervisor.js';
import {
  parseRemoteForwards,
  type RemoteForward,
  type RemoteForwarding,
  type RemoteTraffic,
  startRemoteForwards,
} from './port-forward-remote.js';

export interface Forward {
  /** Local port (0 = any free one). */
  localPort: number;
  host: string;
  port: number;
  /** The spec as the user wrote it. */
  spec: string;
}

export interface PortForwardOptions extends SessionOptions {
  /** `[LOCAL:]HOST:PORT` specs (HOST may be `[v6]`). */
  forwards: string[];
  /** -R `[REMOTE:]HOST:PORT` specs: the target pod's ports to take, and how (steal unless --mirror). */
  remote?: { specs: string[]; where: string; traffic: RemoteTraffic };
  /** Local address to listen on (default: --address's, in the options table). */
  address?: string;
  /** Stops the forwarding (Ctrl-C). */
  signal: AbortSignal;
  /** Called once every listener is up, with `local address → HOST:PORT` per forward. */
  onListening?: (listening: { local: string; forward: Forward }[]) => void;
  /** Called once the pod's ports are taken (-R), with the pod they are taken from. */
  onTaken?: (taken: { pod: string; forward: RemoteForward }[]) => void;
}

/** Parses `[LOCAL:]HOST:PORT`: LOCAL defaults to PORT; HOST is a name, an IPv4 address or `[IPv6]`. */
export function parseForward(spec: string): Forward {
  const bad = (why: string): UserError =>
    new UserError(
      `-L ${spec}: ${why}`,
      'write -L [LOCAL:]HOST:PORT, e.g. -L 18080:echo.default:80 (IPv6 hosts in brackets: -L 8080:[fd00::1]:80)',
    );
  const match = /^(?:(\d{1,5}):)?(\[[^\]]+\]|[^:[\]]+):(\d{1,5})$/.exec(spec.trim());
  if (!match) throw bad('not [LOCAL:]HOST:PORT');
  const target = parseAuthority(`${match[2]}:${match[3]}`);
  if (!target) throw bad('the remote port must be 1..65535');
  const localPort = match[1] === undefined ? target.port : Number(match[1]);
  if (localPort > 65535) throw bad('the local port must be 0..65535');
  return { localPort, host: target.host, port: target.port, spec };
}

function listen(server: Server, port: number, address: string, forward: Forward): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      const why =
        err.code === 'EADDRINUSE'
          ? 'is in use'
          : err.code === 'EACCES'
            ? 'needs privileges (ports below 1024)'
            : `cannot be used (${err.code ?? err.message})`;
      reject(
        new UserError(
          `local port ${address}:${port} for -L ${forward.spec} ${why}`,
          `pick another local port: -L <LOCAL>:${forward.host}:${forward.port}`,
        ),
      );
    });
    server.listen(port, address, () => resolve((server.address() as { port: number }).port));
  });
}

/** Serves the forwards on `dialer` until `signal` aborts; resolves with the listeners' ports, closes with `stop()`. */
export async function startForwards(
  dialer: ClusterDialer,
  forwards: readonly Forward[],
  address: string,
  reporter: Reporter,
): Promise<{ ports: number[]; stop(): Promise<void> }> {
  const servers: Server[] = [];
  const sockets = new Set<Socket>();
  const stop = async (): Promise<void> => {
    for (const socket of sockets) socket.destroy();
    await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
  };
  try {
    const ports: number[] = [];
    for (const forward of forwards) {
      // Paused on connect: the connection reads into buffers of its own (own-reads.ts) once its stream is there.
      const server = createServer({ allowHalfOpen: true, pauseOnConnect: true }, (accepted) => {
        const client = adoptOwnReads(accepted, { allowHalfOpen: true });
        sockets.add(client);
        client.once('close', () => sockets.delete(client));
        client.on('error', () => client.destroy());
        const failed = (err: unknown): void => {
          const failure = toDialError(err, `connect ${forward.host}:${forward.port}`);
          warn(reporter, `-L ${forward.spec}: ${describeDialError(failure, forward.host, forward.port)}`);
          // A reset, not an end: the client must not take the failed dial for an empty answer.
          if (!client.destroyed) client.resetAndDestroy();
        };
        // Early: the client's first bytes leave with the connect, not a round trip to the agent after it.
        dialer.connect(forward.host, forward.port, { early: true }).then((remote) => {
          remote.once('dialError', failed);
          if (client.destroyed) remote.destroy();
          else void joinStreams(client, remote);
        }, failed);
      });
      servers.push(server);
      ports.push(await listen(server, forward.localPort, address, forward));
    }
    return { ports, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

export async function runPortForward(options: PortForwardOptions, reporter: Reporter): Promise<void> {
  const remoteSpecs = options.remote?.specs ?? [];
  if (options.forwards.length === 0 && remoteSpecs.length === 0) {
    throw new UserError(
      'no forward given',
      'pass -L [LOCAL:]HOST:PORT (e.g. -L 18080:echo.default:80) or -R [REMOTE:]HOST:PORT with -t ' +
        '(e.g. -R 8080:localhost:3000)',
    );
  }
  // Every spec is read before any cluster call: a typo is one line, with nothing started.
  const forwards = options.forwards.map(parseForward);
  const remote = parseRemoteForwards(remoteSpecs, options.remote?.where);
  if (remote.length > 0 && (options.target === undefined || options.target === 'targetless')) {
    throw new UserError(
      `-R ${remote[0].spec} needs a target: a targetless agent has no pod port to take`,
      'pass -t pod/NAME or deploy/NAME (the workload whose port to take)',
    );
  }
  const address = options.address ?? OPTIONS.address.default;
  let session: Session | undefined;
  let forwarding: Awaited<ReturnType<typeof startForwards>> | undefined;
  let taken: RemoteForwarding | undefined;
  try {
    session =
      remote.length > 0
        ? // Taking a pod's port: the session of `devop exec` (its steal locks, reconnects, following the target).
          await connectSupervisedSession({ ...options, mode: options.remote?.traffic.mode }, reporter)
        : await connectSession(
            // native-splice: connections to pod addresses go through the agent's native data path
            { ...options, features: [FEATURES.outgoing, FEATURES.dns, FEATURES.nativeSplice] },
            reporter,
          );
    if (forwards.length > 0 && !session.hello.features.includes(FEATURES.outgoing)) {
      throw new UserError(
        `the agent ${session.agent.name} does not offer outgoing connections`,
        'use an agent image of this devop version (--agent-image)',
      );
    }
    const s = session;
    if (forwards.length > 0) {
      forwarding = await step(
        reporter,
        'listen',
        `listen on ${forwards.map((f) => `${address}:${f.localPort || 'any'}`).join(', ')}`,
        () => startForwards(createMuxDialer(s.tunnel, s.native), forwards, address, reporter),
      );
      const ports = forwarding.ports;
      options.onListening?.(
        forwards.map((forward, i) => ({
          local: `${address.includes(':') ? `[${address}]` : address}:${ports[i]}`,
          forward,
        })),
      );
    }
    const info: SessionInfo = {
      target: options.target ?? 'targetless',
      namespace: s.namespace,
      pod: s.target?.podName ?? s.agent.agentPod,
      node: s.target?.nodeName,
      container: s.target?.container.name,
      agent: { name: s.agent.name, reused: s.agent.reused, version: s.hello.agentVersion },
      ports: [],
    };
    if (remote.length > 0 && options.remote) {
      const traffic = options.remote.traffic;
      const verb = traffic.mode === 'steal' ? 'stealing' : 'mirroring';
      taken = await step(reporter, 'traffic', `${verb} ${remote.map((f) => `:${f.remotePort}`).join(', ')}`, () =>
        startRemoteForwards(s, remote, traffic, info, reporter),
      );
      const pod = s.target?.podName ?? '';
      options.onTaken?.(remote.map((forward) => ({ pod, forward })));
      taken.markReady();
    } else {
      reporter.emit({ type: 'ready', session: info });
    }
    const end = await new Promise<{ lost?: Error; stopped?: string }>((resolve) => {
      if (options.signal.aborted) return resolve({});
      options.signal.addEventListener('abort', () => resolve({}), { once: true });
      s.tunnel.once('close', (err) => resolve({ lost: err ?? new Error('closed') }));
      s.onStopped?.((reason) => resolve({ stopped: reason }));
    });
    if (end.stopped) {
      throw new UserError(
        `this session was stopped: ${end.stopped}`,
        'the pod serves its own traffic; run devop again',
      );
    }
    if (end.lost) {
      throw new UserError(
        `the tunnel to the agent closed: ${end.lost.message}`,
        'run devop port-forward again (check the agent pod and the API server)',
      );
    }
  } finally {
    await taken?.release();
    await forwarding?.stop();
    await session?.close('devop port-forward ended').catch(() => undefined);
  }
}
