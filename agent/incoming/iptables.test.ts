// Unit tests of the iptables fallback's rule words: the jump, the redirect, the guard's own-chain check, and which
// program and skipped source each IP family's rules get.
import { describe, expect, test } from 'vitest';
import { iptablesBinary, isOwnChain, jumpRule, redirectRule, skipFor } from './iptables.js';

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

  test("each family's rules go through its own program and skip the node's address only when it is theirs", () => {
    expect(iptablesBinary('nft')).toBe('iptables-nft');
    expect(iptablesBinary('nft', 'ipv6')).toBe('ip6tables-nft');
    expect(iptablesBinary('legacy', 'ipv6')).toBe('ip6tables-legacy');
    // A dual-stack pod's node address is IPv4: the IPv6 rule takes every IPv6 client
    expect(skipFor('ipv4', '10.0.0.1')).toBe('10.0.0.1');
    expect(skipFor('ipv6', '10.0.0.1')).toBeUndefined();
    // An IPv6-only pod's node address (its IPv6 gateway) is skipped by the IPv6 rule only
    expect(skipFor('ipv6', 'fd00::1')).toBe('fd00::1');
    expect(skipFor('ipv4', 'fd00::1')).toBeUndefined();
    expect(skipFor('ipv4', undefined)).toBeUndefined();
    expect(redirectRule('DEVOP-x', 3000, 40000, skipFor('ipv6', 'fd00::1'))).toContain('fd00::1');
  });
});
