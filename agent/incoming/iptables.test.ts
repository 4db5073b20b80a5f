// Unit tests of the iptables fallback's rule words: the jump, the redirect and the guard's own-chain check.
import { describe, expect, test } from 'vitest';
import { isOwnChain, jumpRule, redirectRule } from './iptables.js';

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
