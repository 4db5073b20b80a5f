// `devop exec` with an HTTP filter the agent could not match in linear time (a backreference, a lookaround): refused by
// the CLI in one line that names the problem and the fix, before it opens a single connection to the cluster.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from './helpers/cli.js';
import { type CountingApi, startCountingApi } from './helpers/counting-api.js';

describe('devop exec: filter patterns outside RE2', () => {
  let api: CountingApi;
  let dir: string;
  let kubeconfig: string;
  const connections = (): number => api.connections();

  beforeAll(async () => {
    // Given a kubeconfig whose API server is a listener that counts the connections devop makes to it
    api = await startCountingApi('devop-filter-');
    dir = api.dir;
    kubeconfig = api.kubeconfig;
  });
  afterAll(() => api?.close());

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
      expect(connections()).toBe(0);
    });
  }
});
