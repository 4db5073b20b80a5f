// Unit tests of the CLI↔agent contract: the env round trip with its defaults, the ready line, container IDs and
// chain names, and the image's entry point and node flags as the contract states them.
import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { execFileSync, spawnSync } from 'node:child_process';
import { agentNodeFlagsFor } from '../testkit/agent-flags.js';
import {
  AGENT_COMMAND,
  AGENT_LOOKUP_COMMAND,
  AGENT_ENTRYPOINT,
  AGENT_VERSION,
  agentEnv,
  bareContainerId,
  chainName,
  formatReadyLine,
  parseAgentEnv,
  parseReadyLine,
  TARGET_PID_ARG,
} from './agent-contract.js';

describe('agent contract', () => {
  test('env round-trips through agentEnv and parseAgentEnv, with defaults', () => {
    // (the token comes from the agent's Secret through kubelet: here it is set as kubelet would)
    const env = {
      ...Object.fromEntries(
        agentEnv({ mode: 'job', port: 4000, containerId: 'containerd://abc', idleSeconds: 30 }).map((e) => [
          e.name,
          'value' in e ? e.value : '',
        ]),
      ),
      DEVOP_AGENT_TOKEN: 't',
    };
    expect(env).toEqual({
      DEVOP_AGENT_MODE: 'job',
      DEVOP_AGENT_PORT: '4000',
      DEVOP_AGENT_TOKEN: 't',
      DEVOP_AGENT_CONTAINER_ID: 'containerd://abc',
      DEVOP_AGENT_IDLE_SECONDS: '30',
    });
    const config = parseAgentEnv(env);
    expect(config).toMatchObject({
      mode: 'job',
      port: 4000,
      token: 't',
      idleSeconds: 30,
      iptables: 'auto',
      flushConnections: true,
      resumeGraceSeconds: 30,
    });
  });

  test('a bad value is refused naming the variable', () => {
    expect(() => parseAgentEnv({ DEVOP_AGENT_TOKEN: 't', DEVOP_AGENT_MODE: 'sidecar' })).toThrow(/mode/);
    expect(() => parseAgentEnv({})).toThrow(/token/);
  });

  test('the ready line parses back; log lines are not ready lines', () => {
    const line = formatReadyLine({ version: AGENT_VERSION, port: 4000, agentId: 'abc', pid: 7 });
    expect(parseReadyLine(line)).toEqual({ msg: 'ready', version: AGENT_VERSION, port: 4000, agentId: 'abc', pid: 7 });
    expect(parseReadyLine('{"level":"info","msg":"agent ready"}')).toBeUndefined();
    expect(parseReadyLine('not json')).toBeUndefined();
  });

  test(
    'container IDs lose their runtime prefix; chain names stay within iptables limits; version matches ' +
      'package.json',
    () => {
      expect(bareContainerId('containerd://abc')).toBe('abc');
      expect(bareContainerId('cri-o://abc')).toBe('abc');
      expect(bareContainerId('abc')).toBe('abc');
      expect(chainName('a'.repeat(20)).length).toBeLessThanOrEqual(28);
      expect(JSON.parse(readFileSync('package.json', 'utf8')).version).toBe(AGENT_VERSION);
      expect(readFileSync('Dockerfile.agent', 'utf8')).toContain(
        `ENTRYPOINT ${JSON.stringify(AGENT_ENTRYPOINT).replaceAll(',', ', ')}`,
      );
      // The entry point runs exactly AGENT_COMMAND (the Node flags the RSS budget counts on).
      const entry = readFileSync('agent/entry.sh', 'utf8');
      expect(entry).toContain(`node='${AGENT_COMMAND.join(' ')}'`);
      expect(entry).toContain(`lookup='${AGENT_LOOKUP_COMMAND.join(' ')}'`);
      expect(entry).toContain(`$($lookup ${TARGET_PID_ARG})`);
    },
  );

  test("the agent's Node flags keep V8's optimizing compiler off (the RSS budget counts on it)", () => {
    // A hot function under AGENT_NODE_FLAGS stays in the interpreter; under plain node the same one gets optimized.
    const probe =
      'function f(x){let s=0;for(let i=0;i<100;i++)s+=x*i;return s}for(let ' +
      'i=0;i<200000;i++)f(i);process.stdout.write(String(%ActiveTierIsTurbofan(f)))';
    const tier = (flags: readonly string[]): string =>
      execFileSync(process.execPath, [...flags, '--allow-natives-syntax', '-e', probe], { encoding: 'utf8' });
    expect(tier(agentNodeFlagsFor(process.execPath))).toBe('false');
    expect(tier([])).toBe('true');
  });

  test("the agent's Node flags start this machine's Node without a V8 warning", () => {
    // Given this machine's Node (20–22 still have --expose-wasm, which lite mode conflicts with)
    // When the agent's flags start it
    const run = spawnSync(process.execPath, [...agentNodeFlagsFor(process.execPath), '-e', '0'], { encoding: 'utf8' });
    // Then it starts, and prints nothing on stderr (no "disabling flag --expose_wasm due to conflicting flags")
    expect(run.status).toBe(0);
    expect(run.stderr).toBe('');
  });
});
