// The local command's env: pod env filtered by globs, local-only keys kept local, overrides and dotenv parsing.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  buildChildEnv,
  filterRemoteEnv,
  globToRegExp,
  loadsCode,
  parseDotenv,
  readEnvFile,
  withheldLine,
} from './child-env.js';

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

describe('pod env vars that load code', () => {
  /** A pod env that would run files of this machine in the local command, beside ordinary vars. */
  function hostileEnv(dir: string): Record<string, string> {
    const nodeHook = join(dir, 'x.js');
    writeFileSync(nodeHook, `require('fs').writeFileSync(${JSON.stringify(join(dir, 'node-ran'))}, '1');\n`);
    const shellHook = join(dir, 'rc.sh');
    writeFileSync(shellHook, `echo 1 > ${join(dir, 'bash-ran')}\n`);
    return {
      DATABASE_URL: 'postgres://db',
      ENV: 'production',
      GIT_COMMIT: 'abc123',
      NODE_OPTIONS: `--require=${nodeHook}`,
      BASH_ENV: shellHook,
      LD_PRELOAD: join(dir, 'evil.so'),
      LD_LIBRARY_PATH: dir,
      PYTHONPATH: dir,
      JAVA_TOOL_OPTIONS: '-XX:OnOutOfMemoryError=touch /tmp/pwned',
      DOTNET_STARTUP_HOOKS: join(dir, 'hook.dll'),
      CORECLR_PROFILER_PATH: join(dir, 'prof.so'),
      GIT_SSH_COMMAND: 'touch /tmp/pwned',
      PERL5OPT: '-Mstrict',
      RUBYOPT: `-r${dir}/x.rb`,
    };
  }

  /** Runs node, then bash, with the env the local command would get; says which of the pod's hooks ran. */
  function runWith(env: Record<string, string>, dir: string): { node: boolean; bash: boolean } {
    const node = spawnSync(process.execPath, ['-e', '0'], { env, stdio: 'ignore' });
    const bash = spawnSync('bash', ['-c', 'true'], { env, stdio: 'ignore' });
    expect(node.status).toBe(0);
    expect(bash.status).toBe(0);
    return { node: existsSync(join(dir, 'node-ran')), bash: existsSync(join(dir, 'bash-ran')) };
  }

  it("keeps the pod's NODE_OPTIONS, BASH_ENV, LD_PRELOAD … from the local command, and says so in one line", () => {
    const dir = mkdtempSync(join(tmpdir(), 'devop-env-code-'));
    try {
      // Given a pod whose env makes node require, and bash source, files of this machine
      const remoteEnv = hostileEnv(dir);
      const withheld: string[][] = [];
      // When the local command's env is built with the defaults (include *)
      const env = buildChildEnv({
        localEnv: { PATH: process.env.PATH },
        remoteEnv,
        include: ['*'],
        onWithheld: (names) => withheld.push(names),
      });
      // Then none of the code-loading vars reach it, the ordinary ones do, and no hook runs in a real node or bash
      for (const key of ['NODE_OPTIONS', 'BASH_ENV', 'LD_PRELOAD', 'LD_LIBRARY_PATH', 'PYTHONPATH', 'RUBYOPT'])
        expect(env, key).not.toHaveProperty(key);
      for (const key of ['JAVA_TOOL_OPTIONS', 'DOTNET_STARTUP_HOOKS', 'CORECLR_PROFILER_PATH', 'GIT_SSH_COMMAND'])
        expect(env, key).not.toHaveProperty(key);
      expect(env).toMatchObject({ DATABASE_URL: 'postgres://db', ENV: 'production', GIT_COMMIT: 'abc123' });
      expect(runWith(env, dir)).toEqual({ node: false, bash: false });
      // And one report names every var left out
      expect(withheld).toEqual([
        [
          'BASH_ENV',
          'CORECLR_PROFILER_PATH',
          'DOTNET_STARTUP_HOOKS',
          'GIT_SSH_COMMAND',
          'JAVA_TOOL_OPTIONS',
          'LD_LIBRARY_PATH',
          'LD_PRELOAD',
          'NODE_OPTIONS',
          'PERL5OPT',
          'PYTHONPATH',
          'RUBYOPT',
        ],
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('gives a code-loading var when it is named exactly (--env-allow or env.include), never by a wildcard', () => {
    const dir = mkdtempSync(join(tmpdir(), 'devop-env-code-'));
    try {
      const remoteEnv = hostileEnv(dir);
      // Given --env-allow NODE_OPTIONS and BASH_ENV named in env.include beside *
      const withheld: string[][] = [];
      const env = buildChildEnv({
        localEnv: { PATH: process.env.PATH },
        remoteEnv,
        include: ['*', 'BASH_ENV'],
        allow: ['NODE_OPTIONS'],
        onWithheld: (names) => withheld.push(names),
      });
      // Then those two reach the command (and their hooks run), the others stay out
      expect(env.NODE_OPTIONS).toBe(remoteEnv.NODE_OPTIONS);
      expect(env.BASH_ENV).toBe(remoteEnv.BASH_ENV);
      expect(env).not.toHaveProperty('LD_PRELOAD');
      expect(runWith(env, dir)).toEqual({ node: true, bash: true });
      expect(withheld[0]).not.toContain('NODE_OPTIONS');
      // And a wildcard that matches one does not name it
      expect(filterRemoteEnv(remoteEnv, ['NODE_*', 'LD_*'])).toEqual({});
      // And allow adds a name to a narrower include
      expect(filterRemoteEnv(remoteEnv, ['DATABASE_*'], [], ['LD_PRELOAD'])).toEqual({
        DATABASE_URL: 'postgres://db',
        LD_PRELOAD: remoteEnv.LD_PRELOAD,
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('knows the code-loading names of each runtime, and not ordinary names that look alike', () => {
    const loading = ['PYTHONSTARTUP', 'PYTHONHOME', '_JAVA_OPTIONS', 'JDK_JAVA_OPTIONS', 'CLASSPATH', 'LD_AUDIT'];
    loading.push('GCONV_PATH', 'COR_PROFILER', 'PERL5LIB', 'RUBYLIB', 'DYLD_INSERT_LIBRARIES', 'GIT_CONFIG_COUNT');
    loading.push('BASH_FUNC_ls%%', 'npm_config_script_shell', 'NPM_CONFIG_NODE_OPTIONS', 'LUA_INIT', 'GOFLAGS');
    for (const name of loading) expect(loadsCode(name), name).toBe(true);
    for (const name of ['ENV', 'GIT_SHA', 'NODE_ENV', 'PYTHONUNBUFFERED', 'NPM_CONFIG_LOGLEVEL', 'JAVA_HOME'])
      expect(loadsCode(name), name).toBe(false);
  });

  it('says in one line which were left out and how to keep one', () => {
    expect(withheldLine(['LD_PRELOAD', 'NODE_OPTIONS'])).toBe(
      "left out the pod's LD_PRELOAD, NODE_OPTIONS (they make programs load code: whoever sets the pod's env would " +
        'run it here); to keep one, pass --env-allow LD_PRELOAD (env.allow in devop.json)',
    );
  });
});
