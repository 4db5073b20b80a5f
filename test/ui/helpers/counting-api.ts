// A kubeconfig whose API server is a listener that counts the connections devop makes to it and closes each: for the
// tests that check a bad flag is refused before devop touches the cluster.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface CountingApi {
  /** A folder of the test's own, holding the kubeconfig. */
  dir: string;
  kubeconfig: string;
  /** How many connections reached the API server so far. */
  connections(): number;
  close(): void;
}

export async function startCountingApi(prefix: string): Promise<CountingApi> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  let connections = 0;
  const server = createServer((socket) => {
    connections++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(
    kubeconfig,
    [
      'apiVersion: v1',
      'kind: Config',
      `clusters: [{name: c, cluster: {server: "https://127.0.0.1:${port}", insecure-skip-tls-verify: true}}]`,
      'users: [{name: u, user: {token: t}}]',
      'contexts: [{name: x, context: {cluster: c, user: u, namespace: default}}]',
      'current-context: x',
    ].join('\n'),
  );
  return {
    dir,
    kubeconfig,
    connections: () => connections,
    close() {
      server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
