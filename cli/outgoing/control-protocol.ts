// The devop control endpoint that the Node preload (in the child process) talks to on the local proxy's port: one JSON
// object per line, requests carry an id, answers carry it back. The first byte "{" tells it apart from SOCKS5 and HTTP.
export const CONTROL_FIRST_BYTE = 0x7b; // "{"

export type ControlRequest =
  | { id: number; op: 'lookup'; name: string; family?: 4 | 6 }
  /** Dial host:port through the cluster; on success the answer names a one-shot local port that carries the bytes. */
  | { id: number; op: 'connect'; host: string; port: number };

export type ControlAnswer =
  | { id: number; ok: true; addresses: { address: string; family: 4 | 6 }[] }
  | { id: number; ok: true; port: number; remoteAddress?: string; remotePort?: number }
  | { id: number; ok: false; code: string; message: string };

/** The env var (JSON) that tells the preload where the proxy is and what to route. */
export const PRELOAD_CONFIG_ENV = 'DEVOP_OUTGOING';

export interface PreloadConfig {
  /** The local proxy, host:port on loopback. */
  proxy: { host: string; port: number };
  /** Outgoing rules (filters.ts syntax); the CLI has already validated them. */
  include: string[];
  exclude: string[];
  /** Give up on an answer from the proxy after this long (the program then gets EAI_AGAIN / ETIMEDOUT, not a hang). */
  timeoutMs?: number;
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
