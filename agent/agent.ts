// The agent's life: the control listener on 127.0.0.1 in the pod netns, the handshake (version, token, resume), the
// sessions, the idle exit, and a clean shutdown that leaves no rule behind.
import { createServer, type Server, type Socket } from 'node:net';
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { AGENT_VERSION, chainName, type AgentConfig } from '../shared/agent-contract.js';
import { FEATURES, PROTOCOL_VERSION, type ClientMessage } from '../shared/protocol.js';
import { createAgentMux, type AgentMux } from '../shared/mux.js';
import { AgentChain, detectBackend, livenessSocket, removeStaleChains } from './iptables.js';
import { startGuard, type Guard } from './guard.js';
import type { AgentLog } from './log.js';
import { defaultGateway, PortTable } from './ports.js';
import { Session } from './session.js';

/** A connection that has not said hello in this time is dropped (a port scan, or a client of another protocol). */
const HELLO_TIMEOUT_MS = 10_000;

export interface AgentOptions {
  config: AgentConfig;
  /** The target's PID in this agent's PID namespace; undefined when targetless. */
  pid: number | undefined;
  log: AgentLog;
}

export interface RunningAgent {
  agentId: string;
  port: number;
  /** Resolves when the agent has stopped (idle exit, SIGTERM, or stop()). */
  stopped: Promise<string>;
  stop(reason: string): Promise<void>;
  ports: PortTable;
}

function sameToken(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

export async function startAgent({ config, pid, log }: AgentOptions): Promise<RunningAgent> {
  const agentId = config.agentId ?? randomBytes(6).toString('hex');
  const sessions = new Map<string, Session>();
  let guard: Guard | undefined;
  let chain: AgentChain | undefined;

  // Liveness first: from now on, no other agent in this netns takes our (future) chain for a stale one.
  const liveness = createServer((s) => s.destroy());
  await new Promise<void>((resolve, reject) => liveness.once('error', reject).listen(livenessSocket(agentId), resolve));

  if (config.mode !== 'targetless') {
    await removeStaleChains(log, agentId);
    const backend = config.iptables === 'auto' ? await detectBackend(log) : config.iptables;
    chain = new AgentChain(backend, agentId);
    guard = startGuard(backend, chainName(agentId), log);
  }
  const nodeIP = async (): Promise<string | undefined> => config.nodeIP ?? (await defaultGateway());
  const ports = new PortTable(chain, nodeIP, log);

  let stopping: Promise<void> | undefined;
  let resolveStopped: (reason: string) => void = () => undefined;
  const stopped = new Promise<string>((resolve) => (resolveStopped = resolve));
  let idleTimer: NodeJS.Timeout | undefined;
  const armIdle = (): void => {
    if (idleTimer) clearTimeout(idleTimer);
    idleTimer = undefined;
    if (sessions.size > 0) return; // never while a session is connected or waiting for its resume
    idleTimer = setTimeout(() => void stop(`idle for ${config.idleSeconds}s with no session`), config.idleSeconds * 1000);
  };

  const sessionContext = {
    ports,
    pid,
    log,
    graceMs: config.resumeGraceSeconds * 1000,
    ended: (s: Session) => {
      sessions.delete(s.sessionId);
      armIdle();
    },
  };

  const handshake = (socket: Socket): void => {
    socket.setNoDelay(true);
    const mux = createAgentMux(socket);
    const timer = setTimeout(() => mux.close('no hello received'), HELLO_TIMEOUT_MS);
    const onClose = (): void => clearTimeout(timer);
    mux.once('close', onClose);
    const onHello = (msg: ClientMessage): void => {
      mux.off('message', onHello);
      clearTimeout(timer);
      mux.off('close', onClose);
      accept(mux, msg);
    };
    mux.on('message', onHello);
  };

  const refuse = (mux: AgentMux, code: string, message: string, hint: string): void => {
    log.warn('session refused', { code, message });
    mux.send({ type: 'error', code, message, hint });
    mux.close(message);
  };

  const accept = (mux: AgentMux, msg: ClientMessage): void => {
    if (msg.type !== 'hello') return refuse(mux, 'bad_request', `expected hello, got ${msg.type}`, 'connect with a devop CLI');
    if (msg.protocolVersion !== PROTOCOL_VERSION) {
      return refuse(mux, 'version_mismatch', `agent speaks protocol ${PROTOCOL_VERSION} (devop ${AGENT_VERSION}), the CLI speaks ${msg.protocolVersion}`, 'use a devop CLI and agent image of the same version (devop clean removes old agents)');
    }
    if (!sameToken(msg.token, config.token)) return refuse(mux, 'bad_token', 'the agent token does not match', 'this agent belongs to another devop session; let devop start its own agent');
    if (stopping) return refuse(mux, 'internal', 'the agent is shutting down', 'run the command again: devop starts a new agent');
    let session = msg.resumeSessionId ? sessions.get(msg.resumeSessionId) : undefined;
    if (session && session.connected) session = undefined; // the id is in use by a live connection: start afresh
    const resumed = session !== undefined;
    if (!session) {
      session = new Session(msg.client, sessionContext);
      sessions.set(session.sessionId, session);
    }
    session.attach(mux, msg.features);
    armIdle();
    mux.send({
      type: 'helloOk', protocolVersion: PROTOCOL_VERSION, agentVersion: AGENT_VERSION, sessionId: session.sessionId,
      features: Object.values(FEATURES).filter((f) => config.mode !== 'targetless' || !['steal', 'mirror', 'http-filter', 'env', 'files'].includes(f)),
      target: { pid, containerId: config.containerId },
    });
    log.info(resumed ? 'session resumed' : 'session started', { session: session.sessionId, user: session.who, pid: msg.client.pid });
  };

  const control: Server = createServer(handshake);
  await new Promise<void>((resolve, reject) => control.once('error', reject).listen(config.port, '127.0.0.1', resolve));
  const port = (control.address() as { port: number }).port;
  armIdle();

  const stop = (reason: string): Promise<void> => {
    stopping ??= (async () => {
      if (idleTimer) clearTimeout(idleTimer);
      log.info('agent stopping', { reason });
      control.close();
      await Promise.all([...sessions.values()].map((s) => s.end(`agent stopping: ${reason}`)));
      await ports.closeAll();
      guard?.release();
      liveness.close();
      resolveStopped(reason);
    })();
    return stopping;
  };

  return { agentId, port, stopped, stop, ports };
}
