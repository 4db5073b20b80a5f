// The owned nftables table against the real kernel, in a netns of the test's own: requests to devop-nft
// (agent/native/nft-owner.c, built to dist/), errors, handles, the rules as nft lists them, what the kernel allows
// other processes, and the table's end with its owner.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createLog } from '../../agent/log.js';
import { NftOwner, OwnedTable, probeOwnedTables, redirectRequest } from '../../agent/native/nft-owned.js';
import { requireRoot } from '../../testkit/root.js';
import { sh } from '../../testkit/netns.js';
import { waitFor } from '../../testkit/wait.js';

describe('nft-owned: requests to devop-nft', () => {
  test('redirect rules skip the node IP unless probes are stolen; nothing but an address reaches the line', () => {
    expect(redirectRequest(3000, 40000, '10.0.0.1')).toBe('add 3000 40000 10.0.0.1');
    expect(redirectRequest(3000, 40000, 'fd00:244::1')).toBe('add 3000 40000 fd00:244::1');
    expect(redirectRequest(3000, 40000)).toBe('add 3000 40000');
    expect(() => redirectRequest(3000, 40000, '10.0.0.1\ndrop')).toThrow(/not an IP address/);
  });
});

const run = requireRoot('agent nft-owned');

const OWNER = resolve(import.meta.dirname, '../../dist/devop-nft');

describe.runIf(run)('nft-owned: the kernel owns the table for its devop-nft process', () => {
  const ns = `dvnft${randomBytes(3).toString('hex')}`;
  const command = ['ip', 'netns', 'exec', ns, OWNER];
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
      /table inet devop_t1 \{[\s\S]*flags owner[\s\S]*type nat hook prerouting priority dstnat - 1; policy accept;/,
    );
    await owned.addRedirect(3000, 40000, '10.0.0.1');
    await owned.addRedirect(3001, 40001);
    // One table for both families: the skipped source's family skips it, the other family is redirected whole
    expect(await ruleset()).toContain('ip saddr != 10.0.0.1 tcp dport 3000 redirect to :40000 comment "devop 3000"');
    expect(await ruleset()).toContain('meta nfproto ipv6 tcp dport 3000 redirect to :40000 comment "devop 3000"');
    await owned.addRedirect(3003, 40003, 'fd00::1');
    expect(await ruleset()).toContain('ip6 saddr != fd00::1 tcp dport 3003 redirect to :40003 comment "devop 3003"');
    expect(await ruleset()).toContain('meta nfproto ipv4 tcp dport 3003 redirect to :40003 comment "devop 3003"');
    await owned.removeRedirect(3000, 40000, '10.0.0.1');
    await owned.removeRedirect(3003, 40003, 'fd00::1');
    const after = await ruleset();
    expect(after).not.toContain('dport 3000');
    expect(after).not.toContain('dport 3003');
    expect(after).toContain('tcp dport 3001 redirect to :40001');
    // A bad port number is refused: the error comes back, and devop-nft keeps serving requests
    await expect(owned.addRedirect(70000, 1)).rejects.toThrow('devop-nft: ports must be 1-65535');
    await owned.addRedirect(3002, 40002);
    expect(await ruleset()).toContain('tcp dport 3002 redirect to :40002');
    await owned.remove();
    await waitFor('the table to go', async () => !(await ruleset()).includes('devop_t1'));
  });

  test('only the creating process may change the table; when it is killed the kernel drops the table', async () => {
    const owned = await OwnedTable.create('t2', log, command);
    await owned.addRedirect(3000, 40000);
    // Another process (this one-shot nft) is refused by the kernel
    const other = await sh(`ip netns exec ${ns} nft add rule inet devop_t2 pre tcp dport 9 accept 2>&1 || true`);
    expect(other).toMatch(/Operation not permitted/);
    const denied = await sh(`ip netns exec ${ns} nft delete table inet devop_t2 2>&1 || true`);
    expect(denied).toMatch(/Operation not permitted/);
    expect(await ruleset()).toContain('devop_t2');
    // When the owner dies by SIGKILL, the table is gone (nothing else cleans up)
    const pids = (await sh(`ip netns pids ${ns}`)).trim().split('\n').filter(Boolean);
    const owners = pids.filter((pid) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith(`${OWNER}\0`));
    expect(owners).toHaveLength(1);
    process.kill(Number(owners[0]), 'SIGKILL');
    await waitFor('the kernel to drop the table', async () => !(await ruleset()).includes('devop_t2'), 2000);
    // And the agent's next change fails with a reason instead of hanging
    await expect(owned.addRedirect(3001, 40001)).rejects.toThrow(/devop-nft ended \(SIGKILL\)/);
  });

  test('the start-up probe says whether owned tables work, and leaves no table behind', async () => {
    expect(await probeOwnedTables(log, command)).toBeUndefined();
    expect(await ruleset()).not.toContain('devop_');
    // A kernel older than 5.12 refuses the flag (as devop-nft answers then), or the owner cannot start at all
    const old = [
      'sh',
      '-c',
      'read line; echo "error create table: Operation not supported (owned tables need Linux 5.12"',
    ];
    expect(await probeOwnedTables(log, old)).toBe(
      'devop-nft: create table: Operation not supported (owned tables need Linux 5.12',
    );
    expect(await probeOwnedTables(log, ['/nonexistent/devop-nft'])).toBe(
      'devop-nft (/nonexistent/devop-nft) is missing',
    );
    expect(await probeOwnedTables(log, ['devop-nft-not-on-path'])).toMatch(
      /devop-nft ended \(spawn devop-nft-not-on-path ENOENT\)/,
    );
  });

  test('devop-nft without CAP_NET_ADMIN answers with the reason (and the agent falls back)', async () => {
    const unprivileged = ['ip', 'netns', 'exec', ns, 'setpriv', '--inh-caps=-all', '--bounding-set=-all', OWNER];
    expect(await probeOwnedTables(log, unprivileged)).toMatch(
      /^devop-nft: create table: Operation not permitted \(needs CAP_NET_ADMIN/,
    );
  });

  test('devop-nft answers every malformed request with one line, and keeps serving', async () => {
    const nft = NftOwner.start(log, command);
    await expect(nft.request('add 3000 40000')).rejects.toThrow('devop-nft: no table yet (send: table NAME)');
    await expect(nft.request('table Bad-Name')).rejects.toThrow(/table name must be 1-\d+ of \[a-z0-9_\]/);
    await nft.request('table devop_t4');
    await expect(nft.request('table devop_t5')).rejects.toThrow('this process owns table devop_t4 already');
    await expect(nft.request('add 3000 40000 10.0.0.999')).rejects.toThrow('not an IP address: 10.0.0.999');
    await expect(nft.request('delete 12abc')).rejects.toThrow('not a rule handle: 12abc');
    await expect(nft.request('delete 999')).rejects.toThrow('devop-nft: delete rule: No such file or directory');
    await expect(nft.request('flush')).rejects.toThrow(/unknown request/);
    await expect(nft.request(`delete ${'9'.repeat(300)}`)).rejects.toThrow('request longer than 254 bytes');
    expect(await nft.request('add 3000 40000')).toMatch(/^\d+$/);
    expect(await ruleset()).toContain('tcp dport 3000 redirect to :40000 comment "devop 3000"');
    nft.close();
    await waitFor('the kernel to drop the table', async () => !(await ruleset()).includes('devop_t4'), 2000);
  });

  test("closing devop-nft's stdin (what the agent's death does) drops the table", async () => {
    const nft = NftOwner.start(log, command);
    await nft.request('table devop_t3');
    expect(await ruleset()).toContain('devop_t3');
    nft.close();
    await waitFor('the kernel to drop the table', async () => !(await ruleset()).includes('devop_t3'), 2000);
    await expect(nft.request('drop')).rejects.toThrow(/closed|ended/);
  });
});
