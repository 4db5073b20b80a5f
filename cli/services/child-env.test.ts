// The local command's env: pod env filtered by globs, local-only keys kept local, overrides and dotenv parsing.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildChildEnv, filterRemoteEnv, globToRegExp, parseDotenv, readEnvFile } from './child-env.js';

const remote = {
  DATABASE_URL: 'postgres://db',
  FEATURE_X: 'on',
  SECRET_TOKEN: 's3cret',
  PATH: '/usr/local/bin:/usr/bin',
  HOME: '/root',
  KUBERNETES_SERVICE_HOST: '10.0.0.1',
  KUBERNETES_SERVICE_PORT: '443',
  KUBERNETES_PORT_443_TCP: 'tcp://10.0.0.1:443',
};

describe('child env', () => {
  it('gives the pod env minus excluded keys, and keeps PATH/HOME and the API service env local', () => {
    // Given the pod env and an exclude glob
    // When the child env is built on top of a local env
    const env = buildChildEnv({
      localEnv: { PATH: '/local/bin', HOME: '/home/me', EDITOR: 'vi' },
      remoteEnv: remote,
      include: ['*'],
      exclude: ['SECRET_*'],
    });
    // Then pod vars win except the excluded and the local-only ones
    expect(env).toEqual({
      PATH: '/local/bin',
      HOME: '/home/me',
      EDITOR: 'vi',
      DATABASE_URL: 'postgres://db',
      FEATURE_X: 'on',
    });
  });

  it('includes KUBERNETES_SERVICE_* only when an include pattern names it', () => {
    expect(filterRemoteEnv(remote, ['KUBERNETES_SERVICE_*'])).toEqual({
      KUBERNETES_SERVICE_HOST: '10.0.0.1',
      KUBERNETES_SERVICE_PORT: '443',
    });
    expect(filterRemoteEnv(remote, ['DATABASE_*', 'FEATURE_?'])).toEqual({
      DATABASE_URL: 'postgres://db',
      FEATURE_X: 'on',
    });
  });

  it('applies the env file over the pod env, and devop.json env.override over both', () => {
    const env = buildChildEnv({
      localEnv: {},
      remoteEnv: { A: 'pod', B: 'pod', C: 'pod' },
      envFile: { B: 'file', C: 'file' },
      override: { C: 'override' },
    });
    expect(env).toEqual({ A: 'pod', B: 'file', C: 'override' });
  });

  it('turns globs into anchored regexes', () => {
    expect(globToRegExp('A*').test('AB')).toBe(true);
    expect(globToRegExp('A*').test('BA')).toBe(false);
    expect(globToRegExp('A.B').test('AXB')).toBe(false);
  });

  it('parses dotenv files: comments, export, quotes and escapes', async () => {
    // Given a dotenv file in a temp dir
    const dir = mkdtempSync(join(tmpdir(), 'devop-env-'));
    try {
      const file = join(dir, '.env');
      writeFileSync(
        file,
        ['# comment', '', 'export A=1', 'B = two words # trailing', 'C="line\\nnext"', "D='$literal \\n'", 'E='].join(
          '\n',
        ),
      );
      // When it is read
      // Then every form is understood
      expect(await readEnvFile(file)).toEqual({ A: '1', B: 'two words', C: 'line\nnext', D: '$literal \\n', E: '' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('names the bad line of a dotenv file and a missing file', async () => {
    expect(() => parseDotenv('A=1\nnot a line', 'x.env')).toThrow(/x\.env:2: not a KEY=VALUE line/);
    await expect(readEnvFile('/nonexistent/devop.env')).rejects.toThrow(
      /cannot read --env-file \/nonexistent\/devop.env: ENOENT/,
    );
  });
});
