// The agent bundle's entry (dist/agent.cjs): runs the replace guard when asked (agent/guard/); else reads the agent's
// config from the env (shared/agent-contract.ts), enters the target's netns in job mode, starts the agent, prints the
// ready line, and stops cleanly on SIGTERM/SIGINT.
import {
  AGENT_ENV,
  AGENT_VERSION,
  formatReadyLine,
  parseAgentEnv,
  TARGET_PID_ARG,
  type AgentConfig,
} from '../shared/agent-contract.js';
import { formatError, isUserError, UserError } from '../shared/errors.js';
import { startAgent } from './agent.js';
import { effectiveCapabilities, requireCapabilities } from './capabilities.js';
import { createLog } from './log.js';
import { reenterNetns, watchParent } from './netns.js';
import { findContainerPid } from './target-pid.js';
import { GUARD_ARG } from '../shared/replace-contract.js';

async function targetPid(config: AgentConfig): Promise<number | undefined> {
  if (config.mode === 'targetless') return undefined;
  if (config.targetPid !== undefined) return config.targetPid;
  // An ephemeral container shares the target container's PID namespace (targetContainerName), where the target's first
  // process is PID 1; its cgroup namespace may hide the container ID from /proc/*/cgroup, so that is the fallback.
  if (config.mode === 'ephemeral') return config.containerId ? findContainerPid(config.containerId).catch(() => 1) : 1;
  if (config.containerId) return findContainerPid(config.containerId);
  throw new UserError(
    'job mode needs the target container',
    `set ${AGENT_ENV.containerId} (the containerID from the pod status) or ${AGENT_ENV.targetPid}`,
  );
}

async function main(): Promise<number> {
  // The image's other program: the guard of a `--replace` session (agent/guard/main.ts).
  // Loaded here only: its node:https (TLS) and node:http were 2.8 MiB of every agent's RSS at start (docs/agent.md).
  if (process.argv[2] === GUARD_ARG) return (await import('./guard/main.js')).runGuard();
  let config: AgentConfig;
  try {
    config = parseAgentEnv(process.env);
  } catch (err) {
    const issues = (err as { issues?: Array<{ path: PropertyKey[]; message: string }> }).issues;
    const detail = issues ? issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ') : String(err);
    process.stdout.write(
      `${JSON.stringify({
        level: 'error',
        msg: `bad agent configuration: ${detail}`,
        hint: 'the CLI sets DEVOP_AGENT_* (see shared/agent-contract.ts)',
      })}\n`,
    );
    return 2;
  }
  const log = createLog(config.logLevel);
  const pid = await targetPid(config);
  const entering = config.mode === 'job' && !config.inNetns && pid !== undefined;
  if (entering)
    requireCapabilities(
      effectiveCapabilities(),
      ['SYS_ADMIN', 'SYS_PTRACE'],
      "entering the target pod's network namespace",
    );
  // The image's entry point asks for the PID only, then execs the agent inside the netns itself (agent/entry.sh).
  if (process.argv.includes(TARGET_PID_ARG)) {
    if (!entering)
      throw new UserError(
        `${TARGET_PID_ARG} is for job mode`,
        `unset ${AGENT_ENV.targetPid}/${AGENT_ENV.inNetns}, or run without ${TARGET_PID_ARG}`,
      );
    process.stdout.write(`${pid}\n`);
    return 0;
  }
  if (entering) return reenterNetns(pid, log);
  // kubelet put the token (from the agent's Secret) in the env: the tools the agent runs (iptables, ss, conntrack, its
  // native helpers) have no use for it.
  delete process.env[AGENT_ENV.token];

  const agent = await startAgent({ config, pid, log });
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => void agent.stop(`${signal} received`));
  // Memory figures on demand (kill -USR2), for the soak test and the benchmark.
  process.on('SIGUSR2', () => log.info('memory', { ...process.memoryUsage(), streams: agent.ports.listeners() }));
  if (config.parentPipe !== undefined) watchParent(config.parentPipe, () => void agent.stop('parent process gone'));
  const { port, nativePort, agentId } = agent;
  process.stdout.write(`${formatReadyLine({ version: AGENT_VERSION, port, nativePort, agentId, pid: process.pid })}\n`);
  log.info('agent ready', { mode: config.mode, targetPid: pid, port: agent.port, agentId: agent.agentId });
  const reason = await agent.stopped;
  log.info('agent stopped', { reason });
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stdout.write(`${JSON.stringify({ level: 'error', msg: formatError(err, !isUserError(err)) })}\n`);
    process.exit(1);
  },
);
