// devop.json, then the DEVOP_* environment variables over it (flags are merged by the commands, last).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadCommandConfig } from './config-file.js';

describe('loadCommandConfig', () => {
  const dirs: string[] = [];
  const tempDir = (): string => {
    const dir = mkdtempSync(join(tmpdir(), 'devop-config-'));
    dirs.push(dir);
    return dir;
  };
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('applies DEVOP_* variables over devop.json, key by key', () => {
    // Given a devop.json with a target and an agent image
    const dir = tempDir();
    writeFileSync(
      join(dir, 'devop.json'),
      JSON.stringify({ target: 'deploy/api', agent: { image: 'registry/agent:1', ephemeral: true } }),
    );
    // When the environment names another target and agent image
    const { config, path } = loadCommandConfig(undefined, dir, {
      DEVOP_TARGET: 'pod/web',
      DEVOP_AGENT_IMAGE: 'local/agent:dev',
    });
    // Then those win, and the rest of the file stays
    expect(path).toBe(join(dir, 'devop.json'));
    expect(config.target).toBe('pod/web');
    expect(config.agent.image).toBe('local/agent:dev');
    expect(config.agent.ephemeral).toBe(true);
  });

  it('applies them over the defaults when there is no devop.json', () => {
    const { config } = loadCommandConfig(undefined, tempDir(), { DEVOP_MODE: 'steal', DEVOP_OUTGOING: 'false' });
    expect(config.incoming.mode).toBe('steal');
    expect(config.outgoing.enabled).toBe(false);
  });

  it('names a variable with a value it cannot take', () => {
    expect(() => loadCommandConfig(undefined, tempDir(), { DEVOP_MODE: 'borrow' })).toThrow(
      /with DEVOP_MODE from the environment/,
    );
  });
});
