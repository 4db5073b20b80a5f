// devop's per-session directories in the temp dir (DEVOP_ROOT's remote files, the shadow kubeconfig): made 0700 with
// the owning devop's pid in the name, so that a later run and `devop clean` remove the ones whose devop is gone
// (kill -9 leaves them behind, holding tokens) and keep those of sessions still running.
import { chmod, lstat, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export type SessionDirKind = 'root' | 'shadow';

/** `devop-root-<pid>-<mkdtemp's 6 characters>`. */
const SESSION_DIR_NAME = /^devop-(root|shadow)-([1-9][0-9]{0,9})-[A-Za-z0-9]{6}$/;

/** A new session directory, readable only by this user, named after this devop's pid. */
export async function makeSessionDir(kind: SessionDirKind, parent = tmpdir(), pid = process.pid): Promise<string> {
  const dir = await mkdtemp(join(parent, `devop-${kind}-${pid}-`));
  await chmod(dir, 0o700);
  return dir;
}

/** Whether a process runs (EPERM: it does, as another user). A reused pid keeps a directory: the safe side. */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export interface StaleSessionDir {
  path: string;
  /** The devop that made it, gone. */
  pid: number;
  /** After a real sweep: whether it was removed (error otherwise). */
  removed?: boolean;
  error?: string;
}

export interface SweepOptions {
  parent?: string;
  /** Only list what would be removed. */
  dryRun?: boolean;
  isAlive?: (pid: number) => boolean;
}

/**
 * Removes the session directories of devops that are gone. Only real directories owned by this user are touched: a
 * symlink or a file with such a name, or another user's directory, is left alone (in the sticky temp dir nobody else
 * can swap an entry of ours between the check and the removal, and rm removes links inside without following them).
 */
export async function sweepSessionDirs(options: SweepOptions = {}): Promise<StaleSessionDir[]> {
  const parent = options.parent ?? tmpdir();
  const isAlive = options.isAlive ?? processAlive;
  const uid = process.getuid?.();
  let names: string[];
  try {
    names = await readdir(parent);
  } catch {
    return []; // no temp dir to look at: nothing of ours there
  }
  const stale: StaleSessionDir[] = [];
  for (const name of names) {
    const match = SESSION_DIR_NAME.exec(name);
    if (!match) continue;
    const pid = Number(match[2]);
    if (pid === process.pid || isAlive(pid)) continue;
    const path = join(parent, name);
    const stat = await lstat(path).catch(() => undefined);
    if (!stat?.isDirectory() || (uid !== undefined && stat.uid !== uid)) continue;
    const dir: StaleSessionDir = { path, pid };
    if (!options.dryRun) {
      try {
        await rm(path, { recursive: true, force: true });
        dir.removed = true;
      } catch (err) {
        dir.removed = false;
        dir.error = (err as Error).message;
      }
    }
    stale.push(dir);
  }
  return stale;
}
