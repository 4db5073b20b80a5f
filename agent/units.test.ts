// Unit tests of the agent's pure parts: the env contract, filters, resolv.conf/hosts/search order, iptables rule words,
// and the container-ID PID lookup against a fake /proc in a temp dir.
import { mkdtempSync, mkdirSync, writeFileSync, rmSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { execFileSync } from 'node:child_process';
import {
  AGENT_COMMAND,
  AGENT_LOOKUP_COMMAND,
  AGENT_ENTRYPOINT,
  AGENT_NODE_FLAGS,
  AGENT_VERSION,
  agentEnv,
  bareContainerId,
  chainName,
  formatReadyLine,
  parseAgentEnv,
  parseReadyLine,
  TARGET_PID_ARG,
} from '../shared/agent-contract.js';
import { compileFilter, describeFilter } from './filter.js';
import { candidates, parseHosts, parseResolvConf } from './dns.js';
import { isOwnChain, jumpRule, redirectRule } from './iptables.js';
import { findContainerPid, readTargetEnv } from './target.js';

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
    expect(tier(AGENT_NODE_FLAGS)).toBe('false');
    expect(tier([])).toBe('true');
  });
});

describe('HTTP filters', () => {
  const head = (method: string, url: string, headers: Record<string, string> = {}) => ({ method, url, headers });
  test('header regex (name case-insensitive), path regex and method; all-of and any-of', () => {
    const all = compileFilter({ header: 'X-User: ^alice$', path: '^/api/', match: 'all' });
    expect(all(head('GET', '/api/x', { 'x-user': 'alice' }))).toBe(true);
    expect(all(head('GET', '/other', { 'x-user': 'alice' }))).toBe(false);
    expect(all(head('GET', '/api/x', { 'x-user': 'alicex' }))).toBe(false);
    const any = compileFilter({ path: '^/a', method: 'delete', match: 'any' });
    expect(any(head('DELETE', '/zzz'))).toBe(true);
    expect(any(head('GET', '/abc'))).toBe(true);
    expect(any(head('GET', '/zzz'))).toBe(false);
    expect(describeFilter({ header: 'x: y', method: 'GET', match: 'any' })).toBe('header x: y or method GET');
  });
  test('bad filters are user errors naming the fix', () => {
    expect(() => compileFilter({ path: '([', match: 'all' })).toThrow(/not a valid regular expression/);
    expect(() => compileFilter({ header: 'novalue', match: 'all' })).toThrow(/name: value-regex/);
    expect(() => compileFilter({ match: 'all' })).toThrow(/no header, path or method/);
  });
});

describe('pod DNS rules', () => {
  test('resolv.conf: nameservers, search, ndots; hosts file', () => {
    const conf = parseResolvConf(
      '# c\nnameserver 10.96.0.10\nnameserver 10.96.0.11\nsearch ns.svc.cluster.local svc.cluster.local ' +
        'cluster.local\noptions ndots:5 timeout:1\n',
    );
    expect(conf).toEqual({
      nameservers: ['10.96.0.10', '10.96.0.11'],
      search: ['ns.svc.cluster.local', 'svc.cluster.local', 'cluster.local'],
      ndots: 5,
    });
    const hosts = parseHosts('127.0.0.1 localhost\n::1 localhost ip6-localhost # c\n10.0.0.5 Web web.local\n');
    expect(hosts.get('localhost')).toEqual([
      { address: '127.0.0.1', family: 4 },
      { address: '::1', family: 6 },
    ]);
    expect(hosts.get('web')).toEqual([{ address: '10.0.0.5', family: 4 }]);
  });
  test('search order follows ndots; a trailing dot is absolute', () => {
    const conf = { nameservers: [], search: ['a.svc', 'svc'], ndots: 2 };
    expect(candidates('db', conf)).toEqual(['db.a.svc', 'db.svc', 'db']);
    expect(candidates('x.y.z', conf)).toEqual(['x.y.z', 'x.y.z.a.svc', 'x.y.z.svc']);
    expect(candidates('db.', conf)).toEqual(['db']);
  });
});

describe('iptables rules', () => {
  test('the jump, the redirect (skipping the node IP) and the guard cleanup use the same words', () => {
    expect(jumpRule('DEVOP-x')).toEqual([
      'PREROUTING',
      '-p',
      'tcp',
      '-m',
      'comment',
      '--comment',
      'devop',
      '-j',
      'DEVOP-x',
    ]);
    expect(redirectRule('DEVOP-x', 3000, 40000, '10.0.0.1')).toEqual([
      'DEVOP-x',
      '-p',
      'tcp',
      '--dport',
      '3000',
      '!',
      '-s',
      '10.0.0.1',
      '-j',
      'REDIRECT',
      '--to-ports',
      '40000',
    ]);
    expect(redirectRule('DEVOP-x', 3000, 40000)).not.toContain('!');
    expect(isOwnChain('DEVOP-x')).toBe(true);
    expect(isOwnChain('DEVOP-x;reboot')).toBe(false);
  });
});

describe('target lookup', () => {
  test('finds the lowest PID whose cgroup names the container; reads its environ', async () => {
    const proc = mkdtempSync(join(tmpdir(), 'devop-fakeproc-'));
    try {
      const id = 'ab'.repeat(32);
      const write = (pid: number, cgroup: string, environ = ''): void => {
        mkdirSync(join(proc, String(pid)));
        writeFileSync(join(proc, String(pid), 'cgroup'), cgroup);
        writeFileSync(join(proc, String(pid), 'environ'), environ);
      };
      write(10, '0::/system.slice/other.scope\n');
      write(42, `0::/kubepods/besteffort/pod1/${id}\n`, 'A=1\0B=x=y\0');
      write(57, `0::/kubepods/besteffort/pod1/${id}\n`);
      mkdirSync(join(proc, 'self'));
      expect(await findContainerPid(`containerd://${id}`, proc)).toBe(42);
      await expect(findContainerPid(`containerd://${'cd'.repeat(32)}`, proc)).rejects.toThrow(
        /no process of container/,
      );
      await expect(findContainerPid('containerd://not-hex', proc)).rejects.toThrow(/not a runtime/);
      expect(await readTargetEnv(42, proc)).toEqual({ A: '1', B: 'x=y' });
    } finally {
      rmSync(proc, { recursive: true, force: true });
    }
  });
});
