// The agent's log: one JSON object per line on stdout (kubectl logs shows it); the ready line is the only other output.
// Levels: warn for a degraded mode the agent goes on in (a fallback took over), error for a failure that ended
// something (a listener, a session, a request, a rule change, the agent itself).
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface AgentLog {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

const RANK: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

export function createLog(
  level: LogLevel,
  write: (line: string) => void = (line) => process.stdout.write(`${line}\n`),
): AgentLog {
  const emit = (at: LogLevel, msg: string, fields?: Record<string, unknown>): void => {
    if (RANK[at] < RANK[level]) return;
    write(JSON.stringify({ time: new Date().toISOString(), level: at, msg, ...fields }));
  };
  return {
    debug: (msg, fields) => emit('debug', msg, fields),
    info: (msg, fields) => emit('info', msg, fields),
    warn: (msg, fields) => emit('warn', msg, fields),
    error: (msg, fields) => emit('error', msg, fields),
  };
}
