// Usage errors are one line (the problem, commander's suggestion, the help to read), and `devop exec --help` lists the
// target and mode first, then the other options by group.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DEVOP_BIN, runCli } from './helpers/cli.js';
import { runNode } from '../../testkit/processes.js';

describe('devop usage errors and help', () => {
  it('a mistyped option is one line with the suggestion and where to look', async () => {
    // When an exec option is mistyped
    const result = await runCli(['exec', '--stael', '--', 'true']);
    // Then devop fails with one line on stderr, nothing on stdout
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    expect(result.stderr).toBe(
      "devop: unknown option '--stael' (did you mean --steal?) — fix: see `devop exec --help`\n",
    );
  });

  it('a command that loads the kube client prints no Node deprecation warning (punycode, DEP0040 from Node 22)', async () => {
    // --pending-deprecation makes this Node print what Node 22 and later print by default
    const result = await runNode(['--pending-deprecation', DEVOP_BIN, 'ls', '--kubeconfig', '/nonexistent/kubeconfig']);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      /^devop: no kubeconfig found \(--kubeconfig: \/nonexistent\/kubeconfig\) — fix: .*\n$/,
    );
  });

  it('a request through the kube client prints no Node deprecation warning (url.parse, DEP0169 from Node 24)', async () => {
    // Given an API server that refuses connections (nothing listens on port 1)
    const dir = mkdtempSync(join(tmpdir(), 'devop-usage-'));
    try {
      const kubeconfig = join(dir, 'kubeconfig');
      writeFileSync(
        kubeconfig,
        [
          'apiVersion: v1',
          'kind: Config',
          'clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]',
          'users: [{name: u, user: {token: t}}]',
          'contexts: [{name: x, context: {cluster: c, user: u}}]',
          'current-context: x',
        ].join('\n'),
      );
      // When a command sends a request, under --pending-deprecation (Node 20 and 22 print then what 24 prints anyway)
      const result = await runNode(['--pending-deprecation', DEVOP_BIN, 'ls', '--kubeconfig', kubeconfig]);
      // Then stderr is devop's one line, nothing from Node
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(/^devop: cannot reach the Kubernetes API server \(ECONNREFUSED\).*\n$/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an extra argument or an unknown command names the help of the command it is about', async () => {
    const extra = await runCli(['config', 'schema', 'extra']);
    expect(extra.code).toBe(1);
    expect(extra.stderr).toMatch(
      /^devop: too many arguments for 'schema'\..* — fix: see `devop config schema --help`\n$/,
    );
    const command = await runCli(['exex']);
    expect(command.code).toBe(1);
    expect(command.stderr).toBe("devop: unknown command 'exex' (did you mean exec?) — fix: see `devop --help`\n");
  });

  it('exec --help lists target and mode first, then the rest by group', async () => {
    const help = await runCli(['exec', '--help']);
    expect(help.code).toBe(0);
    const headings = help.stdout.split('\n').filter((line) => /^\S.*:$/.test(line));
    expect(headings).toEqual([
      'Arguments:',
      'Target and mode:',
      'HTTP filters (steal only matching requests):',
      'Incoming connections:',
      'Environment:',
      'Outgoing traffic and files:',
      'Cluster and agent:',
      'Config and output:',
    ]);
    const targetGroup = help.stdout.split('Target and mode:\n')[1].split('\n\n')[0];
    for (const flag of ['--target', '--namespace', '--steal', '--mirror', '--port'])
      expect(targetGroup).toContain(flag);
    // (every option is in a group: none is left under a generic "Options:")
    expect(help.stdout).toContain('-h, --help');
  });
});
