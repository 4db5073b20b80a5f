// The cleanup of stale DEVOP chains and the iptables guard, in a netns of the test's own with both iptables backends:
// what another process with NET_ADMIN in the pod's netns wrote into a rule never runs as a command in the agent.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { jumpRuleNumber } from '../../agent/incoming/iptables.js';
import { GUARD_SCRIPT } from '../../agent/incoming/chain-guard.js';
import { requireRoot } from '../../testkit/root.js';
import { sh } from '../../testkit/netns.js';
import { waitFor } from '../../testkit/wait.js';

const exec = promisify(execFile);
const FIXTURE = resolve(import.meta.dirname, 'fixtures/remove-stale-chains.ts');
const TSX = resolve(import.meta.dirname, '../../node_modules/.bin/tsx');
/** Where stale chains may be: both iptables backends, each for IPv4 and IPv6 (in the order the agent looks). */
const BINARIES = ['iptables-nft', 'ip6tables-nft', 'iptables-legacy', 'ip6tables-legacy'];

describe('stale chains: what is read from the netns', () => {
  test('only rule numbers come out of a listing; a quoted comment that names the chain is no jump', () => {
    // Given a PREROUTING listing with a jump to DEVOP-a1, a rule whose comment ends with it, and one to DEVOP-a10
    const listing = [
      '-P PREROUTING ACCEPT',
      '-A PREROUTING -p tcp -m comment --comment devop -j DEVOP-a1',
      '-A PREROUTING -m comment --comment "x -j DEVOP-a1"',
      '-A PREROUTING -p tcp -j DEVOP-a10',
      '-A PREROUTING -p tcp -m comment --comment "$(touch /tmp/x)" -j DEVOP-a1',
      '',
    ].join('\n');
    // Then the last jump to DEVOP-a1 is rule 4, and there is none to DEVOP-b
    expect(jumpRuleNumber(listing, 'DEVOP-a1')).toBe(4);
    expect(jumpRuleNumber(listing, 'DEVOP-a10')).toBe(3);
    expect(jumpRuleNumber(listing, 'DEVOP-b')).toBeUndefined();
  });

  test("the guard's script is a constant: the chain reaches it only as a positional parameter", () => {
    expect(GUARD_SCRIPT).not.toMatch(/DEVOP-/);
    expect(GUARD_SCRIPT).toContain('"$ipt" -w -t nat -D PREROUTING -p tcp -m comment --comment devop -j "$chain"');
    expect(GUARD_SCRIPT).toContain('chain=$1; shift; for ipt in "$@"; do');
  });
});

const run = requireRoot('agent stale chains');

describe.runIf(run)('stale chains: a planted comment never runs', () => {
  const ns = `dvst${randomBytes(3).toString('hex')}`;
  const marker = `/tmp/devop-pwned-${randomBytes(6).toString('hex')}`;
  /** iptables in the netns, by argv (the test itself must not run the planted text either). */
  const ipt = (binary: string, args: string[]): Promise<unknown> =>
    exec('ip', ['netns', 'exec', ns, binary, '-w', '-t', 'nat', ...args]);
  const SAVES = ['iptables-nft-save', 'iptables-legacy-save', 'ip6tables-nft-save', 'ip6tables-legacy-save'];
  const saved = (): Promise<string> =>
    sh(`ip netns exec ${ns} sh -c '${SAVES.map((save) => `${save} -t nat; `).join('')}true'`);
  const inNetns = async (args: string[]): Promise<string> =>
    (await exec('ip', ['netns', 'exec', ns, TSX, FIXTURE, ...args], { encoding: 'utf8' })).stdout;

  beforeAll(async () => {
    await sh(`ip netns add ${ns}`);
  });
  afterAll(async () => {
    await sh(`ip netns pids ${ns} | xargs -r kill -9; ip netns del ${ns}`);
    for (const suffix of ['', '-bt', '-g']) rmSync(`${marker}${suffix}`, { force: true });
  });

  test('a stale chain whose jumps carry $(…) and `…` in their comments is removed, and nothing runs', async () => {
    // Given, in both backends and both families, a stale chain of a dead agent jumped to by rules whose comments hold
    // command substitutions, beside a rule of the pod's own
    for (const binary of BINARIES) {
      await ipt(binary, ['-N', 'DEVOP-dead1']);
      await ipt(binary, ['-A', 'DEVOP-dead1', '-p', 'tcp', '--dport', '3000', '-j', 'REDIRECT', '--to-ports', '4000']);
      for (const comment of [`$(touch ${marker})`, `\`touch ${marker}-bt\``]) {
        await ipt(binary, [
          '-A',
          'PREROUTING',
          '-p',
          'tcp',
          '-m',
          'comment',
          '--comment',
          comment,
          '-j',
          'DEVOP-dead1',
        ]);
      }
      await ipt(binary, ['-A', 'PREROUTING', '-p', 'udp', '-m', 'comment', '--comment', 'the pod', '-j', 'ACCEPT']);
      await ipt(binary, [
        '-I',
        'PREROUTING',
        '1',
        '-p',
        'tcp',
        '-m',
        'comment',
        '--comment',
        'devop',
        '-j',
        'DEVOP-dead1',
      ]);
    }
    expect((await saved()).match(/touch/g)).toHaveLength(8);

    // When a new agent cleans stale chains in that netns
    const removed = JSON.parse(await inNetns(['newagent']));

    // Then both chains and every jump are gone, the pod's rules stay, and no planted command ran
    expect(removed).toEqual(BINARIES.map((binary) => `${binary}:DEVOP-dead1`));
    const after = await saved();
    expect(after).not.toContain('DEVOP');
    expect(after.match(/the pod/g)).toHaveLength(4);
    expect(existsSync(marker)).toBe(false);
    expect(existsSync(`${marker}-bt`)).toBe(false);
  });

  test("the guard removes its chain's jumps and the chain, in both families, when released", async () => {
    // Given an agent's chain and its jump in the nft backend, IPv4 and IPv6
    await ipt('ip6tables-nft', ['-N', 'DEVOP-guarded1']);
    await ipt('ip6tables-nft', [
      '-I',
      'PREROUTING',
      '1',
      '-p',
      'tcp',
      '-m',
      'comment',
      '--comment',
      'devop',
      '-j',
      'DEVOP-guarded1',
    ]);
    await ipt('iptables-nft', ['-N', 'DEVOP-guarded1']);
    await ipt('iptables-nft', [
      '-I',
      'PREROUTING',
      '1',
      '-p',
      'tcp',
      '-m',
      'comment',
      '--comment',
      'devop',
      '-j',
      'DEVOP-guarded1',
    ]);
    await ipt('iptables-nft', [
      '-I',
      'PREROUTING',
      '1',
      '-p',
      'tcp',
      '-m',
      'comment',
      '--comment',
      'devop',
      '-j',
      'DEVOP-guarded1',
    ]);
    // When its guard starts and the agent's end of the pipe closes
    await inNetns(['guard', 'nft', 'DEVOP-guarded1']);
    // Then the guard removes every jump and both chains
    await waitFor('the guard to remove DEVOP-guarded1', async () => !(await saved()).includes('DEVOP-guarded1'));
  });
});

describe.runIf(run)('stale chains: the scan leaves a netns as it found it', () => {
  const fresh = `dvsf${randomBytes(3).toString('hex')}`;
  beforeAll(async () => {
    await sh(`ip netns add ${fresh}`);
  });
  afterAll(async () => {
    await sh(`ip netns del ${fresh}`);
  });

  test('in a netns without legacy nat tables, the scan makes none (and runs no legacy -save)', async () => {
    // Given a netns whose kernel lists no x_tables nat table (a pod on an nftables-only node)
    const tables = () =>
      sh(`ip netns exec ${fresh} cat /proc/net/ip_tables_names /proc/net/ip6_tables_names 2>/dev/null; true`);
    expect(await tables()).not.toMatch(/^nat$/m);
    // When the agent's start looks for stale chains there
    const removed = await exec('ip', ['netns', 'exec', fresh, TSX, FIXTURE, 'newagent'], { encoding: 'utf8' });
    expect(JSON.parse(removed.stdout)).toEqual([]);
    // Then no legacy nat table was made (iptables-legacy-save -t nat makes the table it reads)
    expect(await tables()).not.toMatch(/^nat$/m);
  });
});
