// The target container's PID, found by container ID in /proc/*/cgroup: where job mode enters the pod's netns and
// where the target's env (agent/env/) and files (agent/files/) are read.
import { join } from 'node:path';
import { readdir, readFile } from './fs-calls.js';
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
