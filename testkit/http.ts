// HTTP for suites: one request on a fresh connection, to a relay's unix socket (from a netns: one TCP connection per
// unix connection) or to a host and port, and a GET from the host itself.
import { request, Agent } from 'node:http';
import type { Socket } from 'node:net';

export interface Answer {
  status: number;
  body: string;
  servedBy: string;
  socket: Socket;
  reused: boolean;
}

/**
 * One request (GET unless `method` says otherwise) to `to`: a unix socket's path, or a host and port. Fails after
 * `timeoutMs` (default 15 s) without an answer.
 */
export function httpGet(
  to: string | { host: string; port: number },
  path: string,
  opts: { headers?: Record<string, string>; agent?: Agent; method?: string; body?: string; timeoutMs?: number } = {},
): Promise<Answer> {
  const where = typeof to === 'string' ? { socketPath: to } : to;
  return new Promise((resolve, reject) => {
    const req = request(
      { ...where, path, method: opts.method ?? 'GET', headers: opts.headers, agent: opts.agent ?? false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            body: Buffer.concat(chunks).toString(),
            servedBy: String(res.headers['x-served-by'] ?? ''),
            socket: req.socket as Socket,
            reused: req.reusedSocket,
          }),
        );
        res.on('error', reject);
      },
    );
    req.setTimeout(opts.timeoutMs ?? 15_000, () => req.destroy(new Error(`GET ${path} timed out`)));
    req.on('error', (err) => reject(new Error(`${opts.method ?? 'GET'} ${path}: ${err.message}`)));
    req.end(opts.body);
  });
}

/** A keep-alive agent with one connection: successive requests share it, as a keep-alive client's would. */
export function keepAliveAgent(): Agent {
  return new Agent({ keepAlive: true, maxSockets: 1 });
}

/** A GET from the host itself (the "node": its bridge address is the node IP), on a fresh connection. */
export function hostGet(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve(Buffer.concat(chunks).toString()));
    });
    req.setTimeout(15_000, () => req.destroy(new Error(`GET ${url} timed out`)));
    req.on('error', reject);
    req.end();
  });
}
