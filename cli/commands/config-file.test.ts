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

  describe("a project's devop.json that chooses the cluster, replaces a workload or runs another image", () => {
    const project = (content: object): string => {
      const dir = tempDir();
      writeFileSync(join(dir, 'devop.json'), JSON.stringify(content));
      return dir;
    };
    const hostile = {
      target: 'deploy/api',
      context: 'prod',
      kubeconfig: './kubeconfig',
      replace: true,
      agent: { image: 'attacker.example/agent:1' },
      allowHostNetwork: true,
    };

    it('is refused in one line that names the keys and the flags that give them', () => {
      // Given a checked-out repository whose devop.json sets every guarded key
      const dir = project(hostile);
      // When devop loads it with no flags
      // Then it refuses, naming the file, the keys, their flags and the opt-in
      expect(() => loadCommandConfig(undefined, dir, {})).toThrow(
        `${join(dir, 'devop.json')} sets context="prod", kubeconfig="./kubeconfig", replace=true, ` +
          'agent.image="attacker.example/agent:1", allowHostNetwork=true: a project\'s devop.json may not choose the ' +
          'cluster, replace a workload, run another agent image, take a host-network pod or keep credentials in a ' +
          'HAR on its own',
      );
      const refusal = (() => {
        try {
          loadCommandConfig(undefined, dir, {});
        } catch (err) {
          return err;
        }
      })();
      expect(refusal).toMatchObject({
        hint:
          'give the same on the command line (--context "prod" --kubeconfig "./kubeconfig" --replace ' +
          '--agent-image "attacker.example/agent:1" --allow-host-network), or pass --trust-config (or set ' +
          'DEVOP_TRUST_CONFIG=1) to use the file as it is',
      });
      // And the same through -f
      expect(() => loadCommandConfig('devop.json', dir, {})).toThrow(/may not choose the cluster/);
    });

    it('is used when the command line or the environment gives those keys, or the user trusts the file', () => {
      const dir = project(hostile);
      const flags = { context: 'dev', kubeconfig: '/k', replace: false, agentImage: 'a', allowHostNetwork: false };
      expect(loadCommandConfig(undefined, dir, {}, { flags }).config.target).toBe('deploy/api');
      expect(loadCommandConfig(undefined, dir, {}, { trust: true }).config.context).toBe('prod');
      expect(loadCommandConfig(undefined, dir, { DEVOP_TRUST_CONFIG: '1' }).config.replace).toBe(true);
      // A variable that overrides a key covers it; the others are still refused
      expect(() =>
        loadCommandConfig(undefined, project({ context: 'prod', agent: { image: 'x' } }), { DEVOP_CONTEXT: 'dev' }),
      ).toThrow(/sets agent\.image="x": /);
    });

    it('refuses a file that keeps credentials in HAR files (recordSecrets) unless the flag gives it', () => {
      const dir = project({ target: 'deploy/api', recordSecrets: true });
      expect(() => loadCommandConfig(undefined, dir, {})).toThrow(/sets recordSecrets=true: /);
      expect(loadCommandConfig(undefined, dir, {}, { flags: { recordSecrets: true } }).config.recordSecrets).toBe(true);
    });

    it('may set everything else, and the guarded keys to their defaults', () => {
      const dir = project({ target: 'deploy/api', namespace: 'team', replace: false, allowHostNetwork: false });
      expect(loadCommandConfig(undefined, dir, {}).config).toMatchObject({ target: 'deploy/api', namespace: 'team' });
    });
  });
});
