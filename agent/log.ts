// The agent's log: one JSON object per line on stdout (kubectl logs shows it); the ready line is the only other output.
export type LogLevel = 'debug' | 'info' | 'warn';

export interface AgentLog {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
}

const RANK: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2 };

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
  };
}
