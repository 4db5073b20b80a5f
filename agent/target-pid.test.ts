// Unit tests of the container-ID PID lookup, against a fake /proc in a temp dir.
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { findContainerPid } from './target-pid.js';

describe('target lookup', () => {
  test('finds the lowest PID whose cgroup names the container', async () => {
    const proc = mkdtempSync(join(tmpdir(), 'devop-fakeproc-'));
    try {
      const id = 'ab'.repeat(32);
      const write = (pid: number, cgroup: string): void => {
        mkdirSync(join(proc, String(pid)));
        writeFileSync(join(proc, String(pid), 'cgroup'), cgroup);
      };
      write(10, '0::/system.slice/other.scope\n');
      write(42, `0::/kubepods/besteffort/pod1/${id}\n`);
      write(57, `0::/kubepods/besteffort/pod1/${id}\n`);
      mkdirSync(join(proc, 'self'));
      expect(await findContainerPid(`containerd://${id}`, proc)).toBe(42);
      await expect(findContainerPid(`containerd://${'cd'.repeat(32)}`, proc)).rejects.toThrow(
        /no process of container/,
      );
      await expect(findContainerPid('containerd://not-hex', proc)).rejects.toThrow(/not a runtime/);
    } finally {
      rmSync(proc, { recursive: true, force: true });
    }
  });
});
