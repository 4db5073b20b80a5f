// Finds and loads devop.json for a command: -f/--config, else ./devop.json when present, else the defaults.
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { CONFIG_FILE_NAME, loadConfigFile, parseConfig, type DevopConfig } from '../../shared/config.js';

export function loadCommandConfig(path: string | undefined, cwd = process.cwd()): { config: DevopConfig; dir?: string; path?: string } {
  if (path) {
    const full = resolve(cwd, path);
    return { config: loadConfigFile(full), dir: dirname(full), path: full };
  }
  const implicit = resolve(cwd, CONFIG_FILE_NAME);
  if (existsSync(implicit)) return { config: loadConfigFile(implicit), dir: cwd, path: implicit };
  return { config: parseConfig({}, 'defaults') };
}
