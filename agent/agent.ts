// The agent's life: the control listener on 127.0.0.1 in the pod netns, the handshake (version, token, resume), the
// sessions, the idle exit, and a clean shutdown that leaves no rule behind.
import { createServer, type Server, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { AGENT_ENV, AGENT_VERSION, chainName, type AgentConfig } from '../shared/agent-contract.js';
import { UserError } from '../shared/errors.js';
import { ERROR_CODES, FEATURES } from '../shared/protocol.js';
import { createAgentMux } from '../shared/mux.js';
import { acceptHello } from '../shared/handshake.js';
import { AgentChain, detectBackend, livenessSocket, removeStaleChains } from './incoming/iptables.js';
import { effectiveCapabilities } from './capabilities.js';
import { startGuard, type Guard } from './incoming/chain-guard.js';
import type { AgentLog } from './log.js';
import { NativeSplice, type NativeEvents } from './native/native-splice.js';
import { defaultGateway, PortTable } from './incoming/ports.js';
import { Session } from './session.js';

/** How long shutdown waits for devop-splice to exit (it exits at once; this bounds it on a starved node). */
const NATIVE_EXIT_WAIT_MS = 1000;

/** Features that need a target container (a targetless agent does not announce them). */
const TARGET_FEATURES: string[] = [
  FEATURES.steal,
  FEATURES.mirror,
  FEATURES.httpFilter,
  FEATURES.bodyFilter,
  FEATURES.tlsTerminate,
  FEATURES.env,
  FEATURES.files,
];

export interface AgentOptions {
  config: AgentConfig;
  /** The target's PID in this agent's PID namespace; undefined when targetless. */
  pid: number | undefined;
  log: AgentLog;
}

export interface RunningAgent {
  agentId: string;
  port: number;
  /** The native data path's port (devop-splice), when it runs. */
  nativePort: number | undefined;
  /** Resolves when the agent has stopped (idle exit, SIGTERM, or stop()). */
  stopped: Promise<string>;
  stop(reason: string): Promise<void>;
  ports: PortTable;
}

export async function startAgent({ config, pid, log }: AgentOptions): Promise<RunningAgent> {
  const agentId = config.agentId ?? randomBytes(6).toString('hex');
  const sessions = new Map<string, Session>();

  // Liveness first: from now on, no other agent in this netns takes our (future) chain for a stale one.
  const liveness = createServer((s) => s.destroy());
  liveness.on('error', (err) => log.error('liveness socket failed', { error: err.message }));
  await new Promise<void>((resolve, reject) =>
    liveness.once('error', reject).listen(livenessSocket(agentId), resolve),
  ).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EADDRINUSE') throw err;
    throw new UserError(
      `another agent with id ${agentId} is running in this pod's netns`,
      `give this agent another ${AGENT_ENV.agentId} (or none: a random one is picked)`,
    );
  });

  // The start's slow parts run side by side: the chain's set-up (processes: the nat tables' reads, the owned table's
  // probe) and devop-splice's start.
  const settingUpChain = config.mode !== 'targetless' ? setUpChain(config, agentId, log) : undefined;
  settingUpChain?.catch(() => undefined); // awaited below, once the listener is up
  const startingNative =
    settingUpChain && config.nativePort !== undefined
      ? startNative(config.nativePort, log, {
          joined: (token, joined) => {
            sessions.get(token)?.nativeChanged(joined);
            void ports.reroute(token);
          },
          gone: () => void ports.reroute(),
        })
      : undefined;
  // The control listener opens as soon as devop-splice listens (the CLI's tunnel carries both ports, and a native port
  // that refuses is left out of the session): the CLI, which dials once the container runs, is connected while the
  // chain is set up, and its hello is answered once the agent is ready.
  const native = await startingNative;
  const held: Socket[] = [];
  let accept: ((socket: Socket) => void) | undefined;
  const control: Server = createServer((socket) => (accept ? accept(socket) : held.push(socket)));
  control.on('error', (err) => log.error('control listener failed', { error: err.message }));
  await new Promise<void>((resolve, reject) =>
    control.once('error', reject).listen(config.port, '127.0.0.1', resolve),
  ).catch((err: NodeJS.ErrnoException) => {
    void native?.close(NATIVE_EXIT_WAIT_MS);
    if (err.code !== 'EADDRINUSE') throw err;
    throw new UserError(
      `port ${config.port} is already in use in the pod's netns`,
      `set ${AGENT_ENV.port} to a free port, or 0 to let the agent pick one`,
    );
  });
  const port = (control.address() as { port: number }).port;
  let guard: Guard | undefined;
  let chain: AgentChain | undefined;
  try {
    ({ chain, guard } = (await settingUpChain) ?? {});
  } catch (err) {
    control.close();
    await native?.close(NATIVE_EXIT_WAIT_MS);
    throw err;
  }
  const nodeIP = async (): Promise<string | undefined> => config.nodeIP ?? (await defaultGateway());
  const ports = new PortTable(chain, nodeIP, log, config.flushConnections, config.mirror);
  ports.native = native;
  if (native?.pid !== undefined) chain?.outlives.push(native.pid);

  let stopping: Promise<void> | undefined;
  let resolveStopped: (reason: string) => void = () => undefined;
  const stopped = new Promise<string>((resolve) => (resolveStopped = resolve));
  let idleTimer: NodeJS.Timeout | undefined;
  const armIdle = (): void => {
    if (idleTimer) clearTimeout(idleTimer);
    idleTimer = undefined;
    if (sessions.size > 0) return; // never while a session is connected or waiting for its resume
    idleTimer = setTimeout(
      () => void stop(`idle for ${config.idleSeconds}s with no session`),
      config.idleSeconds * 1000,
    );
  };

  const sessionContext = {
    ports,
    pid,
    log,
    native: () => (native?.alive ? native : undefined),
    graceMs: config.resumeGraceSeconds * 1000,
    ended: (s: Session) => {
      sessions.delete(s.sessionId);
      armIdle();
    },
  };

  const features = Object.values(FEATURES).filter(
    (f) => (config.mode !== 'targetless' || !TARGET_FEATURES.includes(f)) && (f !== FEATURES.nativeSplice || native),
  );
  const handshake = (socket: Socket): void => {
    socket.setNoDelay(true);
    const mux = createAgentMux(socket);
    if (stopping) {
      mux.send({
        type: 'error',
        code: ERROR_CODES.internal,
        message: 'the agent is shutting down',
        hint: 'run the command again: devop starts a new agent',
      });
      mux.close('agent shutting down');
      return;
    }
    let resumed = false;
    acceptHello(mux, {
      token: config.token,
      agentVersion: AGENT_VERSION,
      features,
      target: { pid, containerId: config.containerId },
      // Called synchronously just before helloOk goes out: the session attaches here, so that messages the CLI sends
      // right behind its hello (same chunk) already find their listener.
      sessionId: (hello) => {
        let session = hello.resumeSessionId ? sessions.get(hello.resumeSessionId) : undefined;
        if (session?.connected) session = undefined; // that id belongs to a live connection: start afresh
        resumed = session !== undefined;
        if (!session) {
          session = new Session(hello.client, sessionContext);
          sessions.set(session.sessionId, session);
        }
        session.attach(mux, hello.features);
        armIdle();
        return session.sessionId;
      },
    }).then(
      ({ hello, helloOk }) =>
        log.info(resumed ? 'session resumed' : 'session started', {
          session: helloOk.sessionId,
          user: `${hello.client.user}@${hello.client.host}`,
          pid: hello.client.pid,
        }),
      (err: Error) => log.error('session refused', { reason: err.message }),
    );
  };

  accept = handshake;
  // A held connection the CLI gave up on meanwhile is no session.
  for (const socket of held.splice(0)) if (!socket.destroyed) handshake(socket);
  armIdle();

  const stop = (reason: string): Promise<void> => {
    stopping ??= (async () => {
      if (idleTimer) clearTimeout(idleTimer);
      log.info('agent stopping', { reason });
      control.close();
      await ports.removeRules();
      // The connections already redirected end before the rules' table goes (ports.removeRules says why): the
      // sessions' and devop-splice's, then what the listeners still hold (closeAll).
      await Promise.all([...sessions.values()].map((s) => s.end(`agent stopping: ${reason}`)));
      await native?.close(NATIVE_EXIT_WAIT_MS);
      await ports.closeAll();
      guard?.release();
      liveness.close();
      resolveStopped(reason);
    })();
    return stopping;
  };

  return { agentId, port, nativePort: native?.port, stopped, stop, ports };
}

/** The agent's chain and its guard: stale chains removed, the backend picked (owned nft table, or iptables). */
async function setUpChain(
  config: AgentConfig,
  agentId: string,
  log: AgentLog,
): Promise<{ chain: AgentChain; guard: Guard }> {
  // Without CAP_NET_ADMIN no rule can be read or made: the subscriptions that need one are refused with that reason
  // (agent/incoming/ports.ts), and there is nothing to probe or clean up.
  const mayRedirect = effectiveCapabilities().has('NET_ADMIN');
  // The stale chains' removal and the owned table's probe run side by side; both are processes of their own.
  const cleaned = mayRedirect ? removeStaleChains(log, agentId) : Promise.resolve();
  const detected =
    config.iptables !== 'auto' ? config.iptables : mayRedirect ? detectBackend(log, cleaned) : 'nft-owned';
  const [, backend] = await Promise.all([cleaned, detected]);
  return { chain: new AgentChain(backend, agentId, log), guard: startGuard(backend, chainName(agentId), log) };
}

/** devop-splice, or undefined (whole steals then go through the agent itself) when it cannot start. */
async function startNative(port: number, log: AgentLog, events: NativeEvents): Promise<NativeSplice | undefined> {
  try {
    const native = await NativeSplice.start(port, log, events);
    log.debug('native data path listening', { port: native.port });
    return native;
  } catch (err) {
    log.warn('the native data path did not start: whole steals go through the agent', {
      error: (err as Error).message,
    });
    return undefined;
  }
}
