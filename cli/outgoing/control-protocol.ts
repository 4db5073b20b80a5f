// The devop control endpoint that the Node preload (in the child process) talks to on the local proxy's port: one JSON
// object per line, requests carry an id, answers carry it back. The first byte "{" tells it apart from SOCKS5 and HTTP.
// The first line is a hello with the session's token; a connection that starts otherwise is refused.
export const CONTROL_FIRST_BYTE = 0x7b; // "{"

export type ControlRequest =
  /** The first line: the session's token (from DEVOP_PRELOAD_CONFIG). Not answered; a wrong one closes it. */
  | { id: number; op: 'hello'; token: string }
  | { id: number; op: 'lookup'; name: string; family?: 4 | 6 }
  /** Dial host:port through the cluster; on success the answer names a one-shot local port that carries the bytes. */
  | { id: number; op: 'connect'; host: string; port: number }
  /**
   * The program's socket has connected to the one-shot `port` from local port `from`: that connection, and no other,
   * gets the dialled one (anyone on the machine can connect to a loopback port). Not answered.
   */
  | { id: number; op: 'claim'; port: number; from: number }
  /**
   * The program's UDP socket on local port `from` sends to host:port (an IP literal; '' = the pod's nameserver, for
   * the DNS queries a program sends its resolv.conf's nameserver): the answer's `port` is a loopback relay, connected
   * to `from`, that carries its datagrams through the cluster and its replies back.
   */
  | { id: number; op: 'udp'; host: string; port: number; from: number };

export type ControlAnswer =
  | { id: number; ok: true; addresses: { address: string; family: 4 | 6 }[] }
  | { id: number; ok: true; port: number; remoteAddress?: string; remotePort?: number }
  | { id: number; ok: false; code: string; message: string };

/** The env var (JSON) that tells the preload where the proxy is and what to route. */
export const PRELOAD_CONFIG_ENV = 'DEVOP_PRELOAD_CONFIG';

export interface PreloadConfig {
  /** The local proxy, host:port on loopback. */
  proxy: { host: string; port: number };
  /** Outgoing rules (filters.ts syntax); the CLI has already validated them. */
  include: string[];
  exclude: string[];
  /** Give up on an answer from the proxy after this long (the program then gets EAI_AGAIN / ETIMEDOUT, not a hang). */
  timeoutMs?: number;
  /** The session's secret, sent in the hello. */
  token: string;
}

function isPort(value: unknown): value is number {
  return Number.isInteger(value) && (value as number) >= 1 && (value as number) <= 65535;
}

export function parseControlRequest(line: string): ControlRequest | undefined {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null) return undefined;
  const request = value as Record<string, unknown>;
  if (typeof request.id !== 'number') return undefined;
  if (request.op === 'hello' && typeof request.token === 'string' && request.token.length <= 256)
    return { id: request.id, op: 'hello', token: request.token };
  if (request.op === 'claim' && isPort(request.port) && isPort(request.from))
    return { id: request.id, op: 'claim', port: request.port, from: request.from };
  if (
    request.op === 'udp' &&
    typeof request.host === 'string' &&
    request.host.length <= 253 &&
    isPort(request.port) &&
    isPort(request.from)
  )
    return { id: request.id, op: 'udp', host: request.host, port: request.port, from: request.from };
  if (
    request.op === 'lookup' &&
    typeof request.name === 'string' &&
    request.name.length > 0 &&
    request.name.length <= 253
  ) {
    const family = request.family === 4 || request.family === 6 ? request.family : undefined;
    return { id: request.id, op: 'lookup', name: request.name, family };
  }
  if (
    request.op === 'connect' &&
    typeof request.host === 'string' &&
    request.host.length > 0 &&
    request.host.length <= 253 &&
    Number.isInteger(request.port) &&
    (request.port as number) >= 1 &&
    (request.port as number) <= 65535
  ) {
    return { id: request.id, op: 'connect', host: request.host, port: request.port as number };
  }
  return undefined;
}
