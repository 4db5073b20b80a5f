// Container cgroups: one cgroup v2 directory per container, named after its container ID, under a per-instance root — so
// /proc/<pid>/cgroup names the container exactly as on a containerd node, and cgroup.kill ends a container's every process.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../../../shared/errors.js';

/** cgroup2 mount point: /sys/fs/cgroup/unified on cgroup v1 hybrid hosts, /sys/fs/cgroup on pure v2 hosts. */
export function cgroup2Mount(): string {
  if (existsSync('/sys/fs/cgroup/unified/cgroup.procs')) return '/sys/fs/cgroup/unified';
  if (existsSync('/sys/fs/cgroup/cgroup.controllers')) return '/sys/fs/cgroup';
  throw new UserError('no cgroup2 hierarchy at /sys/fs/cgroup/unified or /sys/fs/cgroup', 'mount cgroup2 (mount -t cgroup2 none /sys/fs/cgroup/unified): the stand-in node names containers by cgroup');
}

/** How long to wait for a killed cgroup to empty before giving up on removing it. */
const EMPTY_DEADLINE_MS = 5_000;

export class CgroupRoot {
  readonly path: string;

  constructor(instance: string, mount: string = cgroup2Mount()) {
    this.path = join(mount, instance);
  }

  create(): void {
    mkdirSync(this.path, { recursive: true });
  }

  /** Makes the cgroup of one container; its path contains the container ID. */
  createContainerDir(id: string): string {
    const dir = this.dirOf(id);
    mkdirSync(dir, { recursive: true });
    return dir;
  }

  dirOf(id: string): string {
    return join(this.path, id);
  }

  /** Kills every process in a cgroup, waits until it is empty, then removes it. */
  async destroy(dir: string): Promise<void> {
    if (!existsSync(dir)) return;
    for (const child of readdirSync(dir, { withFileTypes: true })) {
      if (child.isDirectory()) await this.destroy(join(dir, child.name));
    }
    const deadline = Date.now() + EMPTY_DEADLINE_MS;
    while (populated(dir) && Date.now() < deadline) {
      try {
        writeFileSync(join(dir, 'cgroup.kill'), '1');
      } catch {
        killProcs(dir);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    try {
      rmdirSync(dir);
    } catch {
      // A process that would not die keeps it; stop() reports what is left through the hygiene test.
    }
  }

  async destroyAll(): Promise<void> {
    await this.destroy(this.path);
  }
}

export function populated(dir: string): boolean {
  try {
    return /populated 1/.test(readFileSync(join(dir, 'cgroup.events'), 'utf8'));
  } catch {
    return false;
  }
}

function killProcs(dir: string): void {
  for (const pid of readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) {
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // already gone
    }
  }
}
