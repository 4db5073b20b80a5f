// The local command's environment, built in one place (the seam other features hook into): the pod container's env,
// filtered by include/exclude globs and without the vars that load code (unless named), on top of the local env,
// overridden by the env file, then devop.json env.override.
import { readFile } from 'node:fs/promises';
import { UserError } from '../../shared/errors.js';

/**
 * Keys that stay local unless an include pattern names them: the pod's PATH/HOME would break finding and running the
 * local command, and the in-cluster API service env would make a local kube client skip the local kubeconfig.
 */
export const LOCAL_ONLY_KEYS = [
  'PATH',
  'HOME',
  'PWD',
  'SHELL',
  'TERM',
  'USER',
  'TMPDIR',
  'KUBERNETES_SERVICE_*',
  'KUBERNETES_PORT',
  'KUBERNETES_PORT_*',
];

/**
 * Pod env vars that make a program on this machine load or run code: whoever can set the pod's env (edit its workload)
 * would otherwise run code as the developer. Kept out unless named exactly (--env-allow NAME, or NAME itself in
 * env.include); a wildcard never names one. What reads each, from the runtime's own documentation:
 */
export const CODE_LOADING_KEYS: readonly { names: readonly string[]; why: string }[] = [
  // Node (doc/api/cli.md): NODE_OPTIONS takes --require/--import (a data: URL is code by itself); NODE_PATH chooses
  // which files `require('x')` loads; NODE_REPL_EXTERNAL_MODULE replaces the REPL with a module.
  { names: ['NODE_OPTIONS', 'NODE_PATH', 'NODE_REPL_EXTERNAL_MODULE'], why: 'node' },
  // npm reads npm_config_<setting> (any case) as its settings: the shell that runs scripts, node-options, which
  // .npmrc files are read, where packages are fetched from and installed.
  {
    names: ['script_shell', 'node_options', 'userconfig', 'globalconfig', 'registry', 'prefix'].flatMap((k) => [
      `npm_config_${k}`,
      `NPM_CONFIG_${k.toUpperCase()}`,
    ]),
    why: 'npm',
  },
  // The dynamic loader (glibc ld.so(8), musl, macOS dyld(1)): preloaded and audit libraries, library search paths;
  // GCONV_PATH loads iconv modules (glibc drops all of these for setuid programs: sysdeps/generic/unsecvars.h).
  { names: ['LD_*', 'DYLD_*', 'GCONV_PATH'], why: 'dynamic loader' },
  // CPython (Doc/using/cmdline.rst): module search paths and site dirs (.pth files run), a startup file, a callable
  // run by breakpoint(), warning categories imported by module path, where cached bytecode is read from.
  {
    names: [
      'PYTHONPATH',
      'PYTHONHOME',
      'PYTHONSTARTUP',
      'PYTHONUSERBASE',
      'PYTHONBREAKPOINT',
      'PYTHONWARNINGS',
      'PYTHONPYCACHEPREFIX',
    ],
    why: 'python',
  },
  // The JVM and the java launcher read options (-javaagent, -XX:OnOutOfMemoryError=cmd) from these; CLASSPATH picks
  // the classes; JAVA_OPTS is read by the start scripts of Gradle, Maven and Tomcat alike.
  { names: ['JAVA_TOOL_OPTIONS', '_JAVA_OPTIONS', 'JDK_JAVA_OPTIONS', 'JAVA_OPTS', 'CLASSPATH'], why: 'java' },
  // .NET: startup hooks and extra deps are assemblies loaded into every app; CLR profilers are native libraries.
  {
    names: ['DOTNET_STARTUP_HOOKS', 'DOTNET_ADDITIONAL_DEPS', 'DOTNET_SHARED_STORE', 'CORECLR_*', 'COR_*'],
    why: '.NET',
  },
  // Shells (bash(1) INVOCATION, zsh STARTUP FILES): bash sources $BASH_ENV, after command substitution, in every
  // script; zsh reads $ZDOTDIR/.zshenv in every shell; BASH_FUNC_* are exported functions that replace commands;
  // SHELLOPTS/BASHOPTS turn on options such as xtrace, whose PS4 is expanded. (ENV is read by interactive shells only,
  // and many apps use ENV=production: it stays.)
  { names: ['BASH_ENV', 'ZDOTDIR', 'BASH_FUNC_*', 'SHELLOPTS', 'BASHOPTS'], why: 'shell' },
  // Perl (perlrun): -M in PERL5OPT is code; the lib paths choose modules. Ruby: -r in RUBYOPT, RUBYLIB, the gem
  // paths. PHP: php.ini (auto_prepend_file). Lua: LUA_INIT is code, the paths choose modules.
  {
    names: ['PERL5OPT', 'PERL5LIB', 'PERLLIB', 'PERL5DB', 'RUBYOPT', 'RUBYLIB', 'GEM_HOME', 'GEM_PATH'],
    why: 'perl, ruby',
  },
  { names: ['PHPRC', 'PHP_INI_SCAN_DIR', 'LUA_INIT', 'LUA_INIT_*', 'LUA_PATH', 'LUA_CPATH'], why: 'php, lua' },
  // Go (cmd/go help environment): GOFLAGS=-toolexec=CMD runs CMD; the proxy, checksum and toolchain settings choose
  // which module and toolchain code is fetched and run. CC/CXX are the compilers cgo and node-gyp run.
  {
    names: ['GOFLAGS', 'GOTOOLCHAIN', 'GOPROXY', 'GOSUMDB', 'GONOSUMDB', 'GOINSECURE', 'GOENV', 'CC', 'CXX'],
    why: 'go, compilers',
  },
  // git (git(1) ENVIRONMENT VARIABLES) runs the commands these name, GIT_CONFIG_* set any config (core.fsmonitor and
  // core.sshCommand are commands), GIT_DIR/GIT_EXEC_PATH choose the repository and git's own programs (GIT_COMMIT or
  // GIT_SHA build labels stay); tools run $EDITOR and $PAGER, less runs $LESSOPEN; OpenSSL loads the engines and
  // providers its config names.
  {
    names: [
      'GIT_SSH',
      'GIT_SSH_COMMAND',
      'GIT_PROXY_COMMAND',
      'GIT_EXTERNAL_DIFF',
      'GIT_PAGER',
      'GIT_EDITOR',
      'GIT_SEQUENCE_EDITOR',
      'GIT_ASKPASS',
      'GIT_EXEC_PATH',
      'GIT_TEMPLATE_DIR',
      'GIT_DIR',
      'GIT_WORK_TREE',
      'GIT_CONFIG',
      'GIT_CONFIG_*',
      'EDITOR',
      'VISUAL',
      'PAGER',
      'MANPAGER',
      'LESSOPEN',
      'LESSCLOSE',
      'BROWSER',
      'SSH_ASKPASS',
      'OPENSSL_CONF',
      'OPENSSL_MODULES',
      'OPENSSL_ENGINES',
    ],
    why: 'tools',
  },
];

const CODE_LOADING_PATTERNS: readonly RegExp[] = CODE_LOADING_KEYS.flatMap((group) => group.names).map((g) =>
  globToRegExp(g),
);

/** Whether a pod env var makes a program load or run code (CODE_LOADING_KEYS). */
export function loadsCode(key: string): boolean {
  return CODE_LOADING_PATTERNS.some((re) => re.test(key));
}

/** The one line that says which pod vars were left out and how to keep one. */
export function withheldLine(names: readonly string[]): string {
  return (
    `left out the pod's ${names.join(', ')} (they make programs load code: whoever sets the pod's env would run it ` +
    `here); to keep one, pass --env-allow ${names[0]} (env.allow in devop.json)`
  );
}

export interface ChildEnvInput {
  /** devop's own environment (the child starts from it). */
  localEnv: NodeJS.ProcessEnv;
  /** The pod container's effective env, as the agent read it. */
  remoteEnv: Record<string, string>;
  include?: readonly string[];
  exclude?: readonly string[];
  /** Exact names of code-loading pod vars to give the child anyway (--env-allow, env.allow). */
  allow?: readonly string[];
  /** Hears the code-loading pod vars that were left out (sorted), when there are any. */
  onWithheld?: (names: string[]) => void;
  /** devop.json env.override (wins over everything). */
  override?: Record<string, string>;
  /** Parsed --env-file / env.file. */
  envFile?: Record<string, string>;
}

/** Shell-style glob (`*`, `?`) as an anchored regex; matching is case-sensitive like env names. */
export function globToRegExp(glob: string): RegExp {
  const body = glob
    .replace(/[.+^${}()|[\]\\]/g, '\\$&')
    .replace(/\*/g, '.*')
    .replace(/\?/g, '.');
  return new RegExp(`^${body}$`);
}

function matchesAny(key: string, globs: readonly string[]): boolean {
  return globs.some((g) => globToRegExp(g).test(key));
}

/**
 * The remote vars the child gets: include (default all) minus exclude minus the local-only keys unless named, minus the
 * code-loading keys unless named exactly (in allow or include). `withheld` collects the code-loading keys left out.
 */
export function filterRemoteEnv(
  remote: Record<string, string>,
  include: readonly string[] = [],
  exclude: readonly string[] = [],
  allow: readonly string[] = [],
  withheld: string[] = [],
): Record<string, string> {
  const out: Record<string, string> = {};
  // A bare "*" includes everything ordinary; a local-only key needs a pattern that names it (e.g.
  // KUBERNETES_SERVICE_*).
  const naming = include.filter((g) => g !== '*');
  const exact = new Set([...allow, ...include]);
  for (const [key, value] of Object.entries(remote)) {
    if (include.length > 0 && !matchesAny(key, include) && !exact.has(key)) continue;
    if (matchesAny(key, exclude)) continue;
    if (matchesAny(key, LOCAL_ONLY_KEYS) && !matchesAny(key, naming)) continue;
    if (loadsCode(key) && !exact.has(key)) {
      withheld.push(key);
      continue;
    }
    out[key] = value;
  }
  return out;
}

export function buildChildEnv(input: ChildEnvInput): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(input.localEnv)) if (value !== undefined) env[key] = value;
  // As devop.json documents it: the env file is applied over the pod's env, env.override over both.
  const withheld: string[] = [];
  Object.assign(
    env,
    filterRemoteEnv(input.remoteEnv, input.include, input.exclude, input.allow, withheld),
    input.envFile ?? {},
    input.override ?? {},
  );
  if (withheld.length > 0) input.onWithheld?.(withheld.sort());
  return env;
}

/** Parses a dotenv file: KEY=VALUE lines, `export ` prefix, # comments, '…' literal, "…" with \n \t \" \\ escapes. */
export function parseDotenv(text: string, source = '.env'): Record<string, string> {
  const out: Record<string, string> = {};
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (line === '' || line.startsWith('#')) continue;
    const match = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_.-]*)\s*=\s*(.*)$/.exec(line);
    if (!match) {
      throw new UserError(
        `${source}:${i + 1}: not a KEY=VALUE line: ${line.slice(0, 60)}`,
        'fix the line in the env file (dotenv format: KEY=VALUE, # comments)',
      );
    }
    const [, key, raw] = match;
    let value = raw;
    if (raw.startsWith('"')) {
      const end = raw.lastIndexOf('"');
      if (end === 0)
        throw new UserError(`${source}:${i + 1}: unterminated "quote" in ${key}`, 'close the quote on the same line');
      value = raw
        .slice(1, end)
        .replace(/\\([nrt"\\])/g, (_m, c: string) => ({ n: '\n', r: '\r', t: '\t', '"': '"', '\\': '\\' })[c] ?? c);
    } else if (raw.startsWith("'")) {
      const end = raw.lastIndexOf("'");
      if (end === 0)
        throw new UserError(`${source}:${i + 1}: unterminated 'quote' in ${key}`, 'close the quote on the same line');
      value = raw.slice(1, end);
    } else {
      value = raw.replace(/\s+#.*$/, '').trim();
    }
    out[key] = value;
  }
  return out;
}

export async function readEnvFile(path: string): Promise<Record<string, string>> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new UserError(
      `cannot read --env-file ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      'pass the path of an existing dotenv file',
      { cause: err },
    );
  }
  return parseDotenv(text, path);
}
