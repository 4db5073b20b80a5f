// The owned nftables table against the real kernel, in a netns of the test's own: request/response over `nft -i`,
// errors, handles, what the kernel allows other processes, and the table's end with its nft process.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createLog } from '../../agent/log.js';
import {
  NftShell,
  OwnedTable,
  echoedHandle,
  probeOwnedTables,
  redirectCommand,
  responseError,
  takeResponse,
} from '../../agent/nft-owned.js';
import { requireRoot } from '../helpers/root.js';
import { sh, waitFor } from './netns.js';

describe('nft-owned: parsing nft output', () => {
  test('a response ends only with its own sentinel, in full (the caret line included)', () => {
    const sentinel = 'Error: No such file or directory\nlist table ip devop_end_7\n              ^^^^^^^^^^^^\n';
    const body =
      'add rule ip devop_a pre tcp dport 3000 redirect to :4000 # handle 5\n# new generation 9 by process 1 (nft)\n';
    expect(takeResponse(body + sentinel.slice(0, -5), 7)).toBeUndefined(); // the caret line is not complete yet
    expect(takeResponse(body + sentinel, 6)).toBeUndefined(); // another request's sentinel
    expect(takeResponse(`${body + sentinel}next`, 7)).toEqual({ output: body, rest: 'next' });
    expect(takeResponse(sentinel, 7)).toEqual({ output: '', rest: '' });
    expect(echoedHandle(body)).toBe(5);
    expect(responseError(body)).toBeUndefined();
    expect(
      responseError('Error: Could not process rule: Operation not permitted\nadd rule ip devop_a pre\n   ^^^\n'),
    ).toBe('Error: Could not process rule: Operation not permitted — add rule ip devop_a pre');
  });

  test('redirect rules skip the node IP unless probes are stolen', () => {
    expect(redirectCommand('devop_a', 3000, 40000, '10.0.0.1')).toBe(
      'add rule ip devop_a pre ip saddr != 10.0.0.1 tcp dport 3000 redirect to :40000 comment "devop 3000"',
    );
    expect(redirectCommand('devop_a', 3000, 40000)).not.toContain('saddr');
    expect(() => redirectCommand('devop_a', 3000, 40000, '10.0.0.1\ndelete table ip x')).toThrow(/not an IPv4 address/);
  });
});

const run = requireRoot('agent nft-owned');

describe.runIf(run)('nft-owned: the kernel owns the table for its nft process', () => {
  const ns = `dvnft${randomBytes(3).toString('hex')}`;
  const command = ['ip', 'netns', 'exec', ns, 'sh', '-c', 'exec nft -e -a -i 2>&1'];
  const log = createLog('warn', () => undefined);
  const ruleset = (): Promise<string> => sh(`ip netns exec ${ns} nft list ruleset`);

  beforeAll(async () => {
    await sh(`ip netns add ${ns}`);
  });
  afterAll(async () => {
    await sh(`ip netns pids ${ns} | xargs -r kill -9; ip netns del ${ns}`);
  });

  test('rules are added and removed by handle; an error is reported and the next request still works', async () => {
    const owned = await OwnedTable.create('t1', log, command);
    expect(await ruleset()).toMatch(
      /table ip devop_t1 \{[\s\S]*flags owner[\s\S]*type nat hook prerouting priority dstnat - 1; policy accept;/,
    );
    await owned.addRedirect(3000, 40000, '10.0.0.1');
    await owned.addRedirect(3001, 40001);
    expect(await ruleset()).toContain('ip saddr != 10.0.0.1 tcp dport 3000 redirect to :40000 comment "devop 3000"');
    await owned.removeRedirect(3000, 40000, '10.0.0.1');
    const after = await ruleset();
    expect(after).not.toContain('dport 3000');
    expect(after).toContain('tcp dport 3001 redirect to :40001');
    // A bad port number is refused by nft: the error comes back, and the shell keeps serving requests
    await expect(owned.addRedirect(70000, 1)).rejects.toThrow(/nft: Error/);
    await owned.addRedirect(3002, 40002);
    expect(await ruleset()).toContain('tcp dport 3002 redirect to :40002');
    await owned.remove();
    await waitFor(async () => !(await ruleset()).includes('devop_t1'), 'the table to go');
  });

  test('only the creating process may change the table; when it is killed the kernel drops the table', async () => {
    const owned = await OwnedTable.create('t2', log, command);
    await owned.addRedirect(3000, 40000);
    // Another process (this one-shot nft) is refused by the kernel
    const other = await sh(`ip netns exec ${ns} nft add rule ip devop_t2 pre tcp dport 9 accept 2>&1 || true`);
    expect(other).toMatch(/Operation not permitted/);
    const denied = await sh(`ip netns exec ${ns} nft delete table ip devop_t2 2>&1 || true`);
    expect(denied).toMatch(/Operation not permitted/);
    expect(await ruleset()).toContain('devop_t2');
    // When the owning nft dies by SIGKILL, the table is gone (nothing else cleans up)
    // (`ip netns exec` forks: the nft process is its child in the netns)
    const pids = (await sh(`ip netns pids ${ns}`)).trim().split('\n').filter(Boolean);
    const nftPids = pids.filter((pid) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('nft\0'));
    expect(nftPids).toHaveLength(1);
    process.kill(Number(nftPids[0]), 'SIGKILL');
    await waitFor(async () => !(await ruleset()).includes('devop_t2'), 'the kernel to drop the table', 2000);
    // And the agent's next change fails with a reason instead of hanging
    await expect(owned.addRedirect(3001, 40001)).rejects.toThrow(/nft process ended/);
  });

  test('the start-up probe says whether owned tables work, and leaves no table behind', async () => {
    expect(await probeOwnedTables(log, command)).toBeUndefined();
    expect(await ruleset()).not.toContain('devop_');
    expect(await probeOwnedTables(log, ['sh', '-c', 'echo "Error: unknown flag owner"; exit 1'])).toMatch(
      /nft process ended/,
    );
  });

  test("closing nft's stdin (what the agent's death does) drops the table", async () => {
    const nft = NftShell.start(log, command);
    await nft.request('add table ip devop_t3 { flags owner; }');
    expect(await ruleset()).toContain('devop_t3');
    nft.close();
    await waitFor(async () => !(await ruleset()).includes('devop_t3'), 'the kernel to drop the table', 2000);
    await expect(nft.request('list tables')).rejects.toThrow(/closed|ended/);
  });
});
