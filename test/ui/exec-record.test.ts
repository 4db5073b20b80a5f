// `devop exec --record FILE` to a path devop cannot write: one line naming the path and the fix, before devop opens a
// single connection to the cluster (no agent Job, no env read, no local command).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from './helpers/cli.js';
import { type CountingApi, startCountingApi } from './helpers/counting-api.js';

describe('devop exec --record to a path that cannot be written', () => {
  let api: CountingApi;
  let dir: string;
  let kubeconfig: string;
  const connections = (): number => api.connections();

  beforeAll(async () => {
    // Given a kubeconfig whose API server is a listener that counts the connections devop makes to it
    api = await startCountingApi('devop-record-');
    dir = api.dir;
    kubeconfig = api.kubeconfig;
  });
  afterAll(() => api?.close());

  it('refuses a file in a folder that does not exist in one line, and touches no cluster', async () => {
    // When devop exec is asked to record into a folder that is not there
    const har = join(dir, 'no-such-folder', 'farm.har');
    const marker = join(dir, 'command-ran');
    const result = await runCli(['exec', '--steal', '-t', 'deploy/web', '--record', har, '--', 'touch', marker], {
      cwd: dir,
      env: { ...process.env, KUBECONFIG: kubeconfig, CI: 'true' },
    });
    // Then it fails with one line naming the path, the folder that is missing, and the fix
    expect(result.code).not.toBe(0);
    const lines = result.stderr.trimEnd().split('\n');
    expect(lines, result.stderr).toHaveLength(1);
    expect(lines[0]).toBe(
      `devop: --record ${har}: the folder ${join(dir, 'no-such-folder')} does not exist — fix: create it, or ` +
        'pass --record a file in a folder you can write',
    );
    // And nothing started: no connection to the API server, no local command
    expect(connections()).toBe(0);
    expect(existsSync(marker)).toBe(false);
  });

  it('refuses a path that is a folder in one line, and touches no cluster', async () => {
    // When the path given to --record is a folder
    const result = await runCli(['exec', '--steal', '-t', 'deploy/web', '--record', dir, '--', 'true'], {
      cwd: dir,
      env: { ...process.env, KUBECONFIG: kubeconfig, CI: 'true' },
    });
    // Then one line says it cannot be written, with the fix
    expect(result.code).not.toBe(0);
    const lines = result.stderr.trimEnd().split('\n');
    expect(lines, result.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^devop: --record ${dir}: cannot write the file \\(\\w+\\) — fix: `));
    expect(connections()).toBe(0);
  });
});
