// The target container's env as its process sees it, for a session's envRead (the local command runs with it).
import { join } from 'node:path';
import { readFile } from '../fs-calls.js';

/** The container's effective environment, read from /proc/PID/environ (NUL-separated KEY=VALUE). */
export async function readTargetEnv(pid: number | undefined, procRoot = '/proc'): Promise<Record<string, string>> {
  const raw =
    pid === undefined
      ? Object.entries(process.env)
          .map(([k, v]) => `${k}=${v}`)
          .join('\0')
      : await readFile(join(procRoot, String(pid), 'environ'), 'utf8');
  const env: Record<string, string> = {};
  for (const pair of raw.split('\0')) {
    const eq = pair.indexOf('=');
    if (eq > 0) env[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return env;
}
