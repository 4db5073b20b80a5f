// The local command's environment, built in one place (the seam other features hook into): the pod container's env,
// filtered by include/exclude globs, on top of the local env, overridden by the env file, then devop.json env.override.
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

export interface ChildEnvInput {
  /** devop's own environment (the child starts from it). */
  localEnv: NodeJS.ProcessEnv;
  /** The pod container's effective env, as the agent read it. */
  remoteEnv: Record<string, string>;
  include?: readonly string[];
  exclude?: readonly string[];
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

/** The remote vars the child gets: include (default all) minus exclude minus the local-only keys unless named. */
export function filterRemoteEnv(
  remote: Record<string, string>,
  include: readonly string[] = [],
  exclude: readonly string[] = [],
): Record<string, string> {
  const out: Record<string, string> = {};
  // A bare "*" includes everything ordinary; a local-only key needs a pattern that names it (e.g.
  // KUBERNETES_SERVICE_*).
  const naming = include.filter((g) => g !== '*');
  for (const [key, value] of Object.entries(remote)) {
    if (include.length > 0 && !matchesAny(key, include)) continue;
    if (matchesAny(key, exclude)) continue;
    if (matchesAny(key, LOCAL_ONLY_KEYS) && !matchesAny(key, naming)) continue;
    out[key] = value;
  }
  return out;
}

export function buildChildEnv(input: ChildEnvInput): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(input.localEnv)) if (value !== undefined) env[key] = value;
  // As devop.json documents it: the env file is applied over the pod's env, env.override over both.
  Object.assign(
    env,
    filterRemoteEnv(input.remoteEnv, input.include, input.exclude),
    input.envFile ?? {},
    input.override ?? {},
  );
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
