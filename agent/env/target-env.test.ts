// Unit tests of the target's env as read from /proc/PID/environ, against a fake /proc in a temp dir.
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { readTargetEnv } from './target-env.js';

describe('target env', () => {
  test("reads the target process's environ (NUL-separated, a value may hold '=')", async () => {
    const proc = mkdtempSync(join(tmpdir(), 'devop-fakeproc-'));
    try {
      mkdirSync(join(proc, '42'));
      writeFileSync(join(proc, '42', 'environ'), 'A=1\0B=x=y\0');
      expect(await readTargetEnv(42, proc)).toEqual({ A: '1', B: 'x=y' });
    } finally {
      rmSync(proc, { recursive: true, force: true });
    }
  });
});
