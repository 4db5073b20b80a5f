// HTTP from a netns through a relay's unix socket (one TCP connection per unix connection), for the agent suites.
import { request, Agent } from 'node:http';
import type { Socket } from 'node:net';

export interface Answer {
  status: number;
  body: string;
  servedBy: string;
  socket: Socket;
  reused: boolean;
}

export function httpGet(
  socketPath: string,
  path: string,
  opts: { headers?: Record<string, string>; agent?: Agent; method?: string; body?: string; timeoutMs?: number } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      { socketPath, path, method: opts.method ?? 'GET', headers: opts.headers, agent: opts.agent ?? false },
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
