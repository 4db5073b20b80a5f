// Remote files: chosen paths of the target container read through the agent into a per-session directory (DEVOP_ROOT)
// under the same relative paths, readable only by the user, and removed when the session ends.
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join, posix } from 'node:path';
import { UserError } from '../../shared/errors.js';
import { makeSessionDir } from '../process/session-dirs.js';
import { toDialError, type ClusterDialer } from './dialer.js';

export interface RemoteFiles {
  /** The session directory: DEVOP_ROOT. `${root}/var/run/secrets/...` holds the pod's `/var/run/secrets/...`. */
  root: string;
  /** The absolute remote paths fetched. */
  paths: string[];
  /** Removes the directory (safe to call twice). */
  remove(): Promise<void>;
}

/** Checks one --remote-file path: absolute, normalized, and not the root itself. */
export function normalizeRemotePath(path: string): string {
  if (!path.startsWith('/')) {
    throw new UserError(
      `--remote-file ${path} is not an absolute path`,
      'give the path as the container sees it, e.g. /var/run/secrets/kubernetes.io/serviceaccount/token',
    );
  }
  const normalized = posix.normalize(path).replace(/\/+$/, '');
  if (normalized === '' || normalized === '/') {
    throw new UserError(
      `--remote-file ${path} names the root directory`,
      'give the path of a file, e.g. /etc/config/app.yaml',
    );
  }
  return normalized;
}

/** Fetches every path (in parallel) into a new session directory; a missing file is a UserError naming it. */
export async function fetchRemoteFiles(
  dialer: ClusterDialer,
  paths: readonly string[],
  options: { parent?: string } = {},
): Promise<RemoteFiles> {
  const normalized = [...new Set(paths.map(normalizeRemotePath))];
  // 0700, named after this devop's pid: a run after a kill -9 removes it (cli/process/session-dirs.ts).
  const root = await makeSessionDir('root', options.parent);
  let removed = false;
  const remove = async (): Promise<void> => {
    if (removed) return;
    removed = true;
    await rm(root, { recursive: true, force: true });
  };
  try {
    await Promise.all(
      normalized.map(async (path) => {
        let content: Buffer;
        try {
          content = await dialer.readFile(path);
        } catch (err) {
          const failure = toDialError(err, `read ${path}`);
          const why =
            failure.code === 'ENOENT'
              ? 'does not exist in the target container'
              : failure.code === 'EACCES'
                ? 'is not readable by the agent'
                : failure.code === 'EISDIR'
                  ? 'is a directory (give the files in it one by one)'
                  : `cannot be read (${failure.message})`;
          throw new UserError(
            `remote file ${path} ${why}`,
            'check the path with `kubectl exec <pod> -- ls -l <path>`, or drop that --remote-file',
            { cause: err },
          );
        }
        const local = join(root, path);
        await mkdir(dirname(local), { recursive: true, mode: 0o700 });
        // Remote files are often secrets (tokens, keys): only the user may read the copy.
        await writeFile(local, content, { mode: 0o600 });
      }),
    );
  } catch (err) {
    await remove();
    throw err;
  }
  return { root, paths: normalized, remove };
}
