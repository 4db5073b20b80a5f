// The target container as seen from the agent: its PID (found by container ID in /proc/*/cgroup), env and filesystem.
import { lstat, readdir, readFile, readlink } from './files.js';
import { join, posix } from 'node:path';
import { bareContainerId } from '../shared/agent-contract.js';
import { UserError } from '../shared/errors.js';

/** Finds the lowest PID whose cgroup path names the container (the container's first process is its lowest PID). */
export async function findContainerPid(containerId: string, procRoot = '/proc'): Promise<number> {
  const id = bareContainerId(containerId).toLowerCase();
  if (!/^[0-9a-f]{12,128}$/.test(id)) {
    throw new UserError(
      `container ID "${containerId}" is not a runtime://<hex> container ID`,
      'pass the containerID from the pod status (containerd://…)',
    );
  }
  let best: number | undefined;
  for (const entry of await readdir(procRoot)) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid === process.pid || (best !== undefined && pid >= best)) continue;
    let cgroup: string;
    try {
      cgroup = await readFile(join(procRoot, entry, 'cgroup'), 'utf8');
    } catch {
      continue; // the process ended while we scanned
    }
    if (cgroup.toLowerCase().includes(id)) best = pid;
  }
  if (best === undefined) {
    throw new UserError(
      `no process of container ${id.slice(0, 12)} is visible in ${procRoot}`,
      "run the agent with hostPID on the target pod's node (job mode), or as an ephemeral container targeting the " +
        'container',
    );
  }
  return best;
}

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

/** Symlinks followed while resolving one path before giving up (the kernel's own limit). */
const MAX_SYMLINKS = 40;

/**
 * Maps a path inside the target container to a path the agent can open: the container's root through /proc/PID/root,
 * with every symlink resolved inside that root. The kernel would resolve an absolute symlink met under /proc/PID/root
 * (such as /var/run → /run in most images, on the way to the service-account token) against the agent's own root.
 */
export async function targetPath(pid: number | undefined, path: string, procRoot = '/proc'): Promise<string> {
  if (!path.startsWith('/'))
    throw new UserError(`remote path "${path}" is not absolute`, "give the file's absolute path inside the container");
  // normalize first so that ".." cannot climb out of the container's root.
  const clean = posix.normalize(path);
  if (pid === undefined) return clean;
  return resolveInRoot(join(procRoot, String(pid), 'root'), clean);
}

/** Resolves `path` as if `root` were "/": ".." stops at the root, and symlinks (absolute ones too) stay inside it. */
export async function resolveInRoot(root: string, path: string): Promise<string> {
  const done: string[] = [];
  const todo = path.split('/').filter(Boolean).reverse();
  let links = 0;
  while (todo.length > 0) {
    const part = todo.pop() as string;
    if (part === '.') continue;
    if (part === '..') {
      done.pop();
      continue;
    }
    const here = join(root, ...done, part);
    let link: string | undefined;
    try {
      if ((await lstat(here)).isSymbolicLink()) link = await readlink(here);
    } catch {
      // missing (or unreadable): opening the result reports it with the path the user gave
    }
    if (link === undefined) {
      done.push(part);
      continue;
    }
    if (++links > MAX_SYMLINKS) throw Object.assign(new Error(`too many symbolic links in ${path}`), { code: 'ELOOP' });
    if (link.startsWith('/')) done.length = 0;
    todo.push(...link.split('/').filter(Boolean).reverse());
  }
  return join(root, ...done);
}
