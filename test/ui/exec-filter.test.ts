// `devop exec` with an HTTP filter the agent could not match in linear time (a backreference, a lookaround): refused by
// the CLI in one line that names the problem and the fix, before it opens a single connection to the cluster.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from './helpers/cli.js';

describe('devop exec: filter patterns outside RE2', () => {
  let dir: string;
  let apiServer: Server;
  let connections = 0;
  let kubeconfig: string;

  beforeAll(async () => {
    // Given a kubeconfig whose API server is a listener that counts the connections devop makes to it
    dir = mkdtempSync(join(tmpdir(), 'devop-filter-'));
    apiServer = createServer((socket) => {
      connections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => apiServer.listen(0, '127.0.0.1', resolve));
    const { port } = apiServer.address() as { port: number };
    kubeconfig = join(dir, 'kubeconfig');
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
  });
  afterAll(() => {
    apiServer.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const cases: Array<[string, string, RegExp]> = [
    ['--http-header-filter', 'x-user: (a)\\1', /--http-header-filter "\(a\)\\1" uses a backreference/],
    ['--http-path-filter', '^/api(?!/internal)', /--http-path-filter "\^\/api\(\?!\/internal\)" uses a lookahead/],
  ];
  for (const [flag, pattern, problem] of cases) {
    it(`refuses ${flag} '${pattern}' in one line naming the fix, and touches no cluster`, async () => {
      // When devop exec is given the pattern
      const result = await runCli(['exec', '--steal', '-t', 'deploy/web', flag, pattern, '--', 'true'], {
        cwd: dir,
        env: { ...process.env, KUBECONFIG: kubeconfig, CI: 'true' },
      });
      // Then it fails with one line: the problem (what the pattern uses, that filters are RE2) and the fix
      expect(result.code).not.toBe(0);
      const lines = result.stderr.trimEnd().split('\n');
      expect(lines, result.stderr).toHaveLength(1);
      expect(lines[0]).toMatch(problem);
      expect(lines[0]).toMatch(/filters are RE2 patterns, matched in linear time — fix: rewrite the pattern given to/);
      // And the API server never saw a connection (nothing was looked up, no agent was started)
      expect(connections).toBe(0);
    });
  }
});
