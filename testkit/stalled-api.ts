// API servers that do not answer, on loopback with a throwaway CA: a TLS server that completes the handshake and then
// never says a word, and an HTTPS server whose routes a test chooses (answer, stall, or send headers and go quiet).
// Each comes with a kubeconfig pointing at it.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:tls';
import { makeCerts, type ClusterCerts } from '../standin/index.js';

export interface FakeApiServer {
  /** https://127.0.0.1:PORT */
  url: string;
  kubeconfigPath: string;
  /** Connections the server has accepted so far. */
  connections(): number;
  close(): Promise<void>;
}

async function certs(): Promise<{ dir: string; pki: ClusterCerts }> {
  const dir = mkdtempSync(join(tmpdir(), 'devop-stalled-api-'));
  return { dir, pki: await makeCerts(dir, ['IP:127.0.0.1']) };
}

function writeKubeconfig(dir: string, url: string, caPem: string): string {
  const path = join(dir, 'kubeconfig');
  const lines = [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: stalled',
    '  cluster:',
    `    server: ${url}`,
    `    certificate-authority-data: ${Buffer.from(caPem).toString('base64')}`,
    'users:',
    '- name: tester',
    '  user:',
    '    token: not-checked',
    'contexts:',
    '- name: stalled',
    '  context: {cluster: stalled, user: tester, namespace: default}',
    'current-context: stalled',
  ];
  writeFileSync(path, `${lines.join('\n')}\n`);
  return path;
}

/** Counts the server's connections; `close` ends them, stops the server and removes `dir` (its CA and kubeconfig). */
function tracked(
  server: TlsServer | HttpsServer,
  event: 'secureConnection' | 'connection',
  dir: string,
): {
  count: () => number;
  close: () => Promise<void>;
} {
  const sockets = new Set<Socket>();
  let count = 0;
  server.on(event, (socket: Socket) => {
    count++;
    sockets.add(socket);
    socket.on('error', () => undefined); // the client hangs up when its timeout passes: expected here
    socket.on('close', () => sockets.delete(socket));
  });
  return {
    count: () => count,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => {
          rmSync(dir, { recursive: true, force: true });
          resolve();
        });
      }),
  };
}

async function listen(server: TlsServer | HttpsServer): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('no port');
  return `https://127.0.0.1:${address.port}`;
}

/** A TLS server that completes the handshake and never answers (nor closes): a hung API server. */
export async function startStalledApiServer(): Promise<FakeApiServer> {
  const { dir, pki } = await certs();
  const server = createTlsServer({ key: pki.keyPem, cert: pki.certPem });
  const track = tracked(server, 'secureConnection', dir);
  const url = await listen(server);
  return { url, kubeconfigPath: writeKubeconfig(dir, url, pki.caPem), connections: track.count, close: track.close };
}

export type Route = (req: IncomingMessage, res: ServerResponse) => void;

/** An HTTPS server that hands every request to `route` (which may never answer). */
export async function startRoutedApiServer(route: Route): Promise<FakeApiServer> {
  const { dir, pki } = await certs();
  const server = createHttpsServer({ key: pki.keyPem, cert: pki.certPem }, route);
  const track = tracked(server, 'secureConnection', dir);
  const url = await listen(server);
  return { url, kubeconfigPath: writeKubeconfig(dir, url, pki.caPem), connections: track.count, close: track.close };
}
