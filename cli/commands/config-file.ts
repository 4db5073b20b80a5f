// Finds and loads devop.json for a command: -f/--config, else ./devop.json when present, else the defaults; then the
// DEVOP_* environment variables (ENV_OVERRIDES) over it. Flags win over both (the commands put them last with
// cli/config/flags.ts). A file that sets a key it may not set alone (cli/config/trust.ts) is refused unless a flag, a
// variable or --trust-config covers it.
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { ENV_OVERRIDES, envOverrides } from '../config/env.js';
import { CONFIG_FILE_NAME, loadConfigFile, mergeConfigInput, parseConfig, type DevopConfig } from '../config/schema.js';
import { checkConfigTrust } from '../config/trust.js';

/** What the command line says about the file: its flags (a guarded key given there is not the file's) and trust. */
export interface ConfigCommandLine {
  flags?: Partial<Record<string, unknown>>;
  /** --trust-config. */
  trust?: boolean;
}

export function loadCommandConfig(
  path: string | undefined,
  cwd = process.cwd(),
  env: NodeJS.ProcessEnv = process.env,
  commandLine: ConfigCommandLine = {},
): { config: DevopConfig; dir?: string; path?: string } {
  const found = findConfig(path, cwd);
  if (found.path)
    checkConfigTrust({
      path: found.path,
      fileConfig: found.config,
      env,
      flags: commandLine.flags,
      trust: commandLine.trust,
    });
  const overrides = envOverrides(env);
  if (Object.keys(overrides).length === 0) return found;
  const names = Object.keys(ENV_OVERRIDES).filter((name) => env[name]);
  const source = `${found.path ?? 'the defaults'} with ${names.join(', ')} from the environment`;
  return { ...found, config: parseConfig(mergeConfigInput(found.config, overrides), source) };
}

function findConfig(path: string | undefined, cwd: string): { config: DevopConfig; dir?: string; path?: string } {
  if (path) {
    const full = resolve(cwd, path);
    return { config: loadConfigFile(full), dir: dirname(full), path: full };
  }
  const implicit = resolve(cwd, CONFIG_FILE_NAME);
  if (existsSync(implicit)) return { config: loadConfigFile(implicit), dir: cwd, path: implicit };
  return { config: parseConfig({}, 'defaults') };
}
