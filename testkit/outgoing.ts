// Test fixtures for the outgoing suites: loopback HTTP and TCP echo servers, a dialer that records what it was asked,
// raw socket exchanges, and running a Node program with devop's preload.
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { ClusterDialer } from '../cli/outgoing/dialer.js';
import { runNode, type NodeResult } from './processes.js';

export interface Closable {
  port: number;
  close(): Promise<void>;
}

function listen(server: Server | HttpServer, host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      resolve(typeof address === 'object' && address ? address.port : 0);
    });
  });
}

function closer(server: Server | HttpServer, sockets: Set<Socket>): () => Promise<void> {
  return () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy();
      server.close(() => resolve());
    });
}

/** An HTTP server that answers JSON {name, method, url, host, body, remoteAddress}. */
export async function startHttpEcho(name = 'local-echo', host = '127.0.0.1'): Promise<Closable> {
  const sockets = new Set<Socket>();
  const server = createHttpServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          name,
          method: req.method,
          url: req.url,
          host: req.headers.host,
          body,
          remoteAddress: req.socket.remoteAddress,
        }),
      );
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  const port = await listen(server, host);
  return { port, close: closer(server, sockets) };
}

/** A TCP server that sends back every byte it receives and half-closes when the client does. */
export async function startTcpEcho(host = '127.0.0.1'): Promise<Closable> {
  const sockets = new Set<Socket>();
  const server = createServer({ allowHalfOpen: true }, (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    socket.pipe(socket);
  });
  const port = await listen(server, host);
  return { port, close: closer(server, sockets) };
}

export interface DialRecord {
  op: 'connect' | 'lookup' | 'readFile';
  target: string;
}

/** Wraps a dialer and records every call (to tell "went through the cluster" from "stayed local"). */
export function recordingDialer(inner: ClusterDialer): ClusterDialer & { calls: DialRecord[] } {
  const calls: DialRecord[] = [];
  return {
    calls,
    connect(host, port, options) {
      calls.push({ op: 'connect', target: `${host}:${port}` });
      return inner.connect(host, port, options);
    },
    lookup(name, family) {
      calls.push({ op: 'lookup', target: name });
      return inner.lookup(name, family);
    },
    readFile(path) {
      calls.push({ op: 'readFile', target: path });
      return inner.readFile(path);
    },
  };
}

/** Connects to 127.0.0.1:port, writes `send`, and collects what comes back until the server ends or `until` holds. */
export function exchange(
  port: number,
  send: Buffer,
  until: (received: Buffer) => boolean,
  timeoutMs = 10_000,
): Promise<{ received: Buffer; ended: boolean }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1' });
    let received = Buffer.alloc(0);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no complete answer within ${timeoutMs} ms; got ${received.toString('hex')}`));
    }, timeoutMs);
    const finish = (ended: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ received, ended });
    };
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      if (until(received)) finish(false);
    });
    socket.on('end', () => finish(true));
    socket.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    socket.write(send);
  });
}

export const PRELOAD_BUNDLE = fileURLToPath(new URL('../dist/preload.js', import.meta.url));

/**
 * Refuses to run a test program whose preload did not load: its cluster names would otherwise go to this machine's
 * resolver (and off the machine).
 */
const REQUIRE_PRELOAD =
  `if (!globalThis[Symbol.for('devop.preload.installed')]) { console.error('the devop preload ` +
  `is not loaded'); process.exit(3); }\n`;

/**
 * Runs `node --input-type=module -e <source>` with extra env (and the preload required); resolves with its exit code
 * and output.
 */
export function runPreloaded(source: string, env: Record<string, string>, timeoutMs = 30_000): Promise<NodeResult> {
  return runNode(['--input-type=module', '-e', REQUIRE_PRELOAD + source], {
    env: { ...process.env, ...env },
    timeoutMs,
  });
}
