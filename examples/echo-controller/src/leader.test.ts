// Who may take the lease: free, own, or expired leases can be taken; a live holder's cannot.
import type { V1Lease } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { canTake, takenLease } from './leader.js';

const now = new Date('2026-05-01T12:00:00Z');
const lease = (holder: string | undefined, renewedSecondsAgo: number, duration = 15): V1Lease => ({
  metadata: { name: 'echo-controller', namespace: 'default', resourceVersion: '9' },
  spec: { holderIdentity: holder, leaseDurationSeconds: duration, renewTime: new Date(now.getTime() - renewedSecondsAgo * 1000) as never, leaseTransitions: 2 },
});

describe('lease decisions', () => {
  it('a free lease, our own lease, and an expired lease can be taken', () => {
    expect(canTake(lease(undefined, 0), 'me', now)).toBe(true);
    expect(canTake(lease('', 0), 'me', now)).toBe(true);
    expect(canTake(lease('me', 1), 'me', now)).toBe(true);
    expect(canTake(lease('other', 16), 'me', now)).toBe(true);
  });

  it('a lease that its holder renewed within the duration cannot', () => {
    expect(canTake(lease('other', 14), 'me', now)).toBe(false);
    expect(canTake(lease('other', 30, 60), 'me', now)).toBe(false);
  });

  it('taking a lease from another holder counts a transition and sets acquire and renew times; renewing does not', () => {
    const taken = takenLease(lease('other', 20), 'me', 15, now);
    expect(taken.spec?.holderIdentity).toBe('me');
    expect(taken.spec?.leaseTransitions).toBe(3);
    expect(new Date(taken.spec!.acquireTime as unknown as string).getTime()).toBe(now.getTime());
    expect(JSON.parse(JSON.stringify(taken.spec)).renewTime).toBe('2026-05-01T12:00:00.000000Z');
    expect(taken.metadata?.resourceVersion).toBe('9');
    const renewed = takenLease(taken, 'me', 15, new Date(now.getTime() + 2000));
    expect(renewed.spec?.leaseTransitions).toBe(3);
    expect(renewed.spec?.acquireTime).toBe(taken.spec?.acquireTime);
  });
});
