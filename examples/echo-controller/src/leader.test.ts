// Who may take the lease: free, own, or expired leases can be taken; a live holder's cannot.
import { getEventListeners } from 'node:events';
import type { V1Lease } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { canTake, sleep, takenLease } from './leader.js';

const now = new Date('2026-05-01T12:00:00Z');
const lease = (holder: string | undefined, renewedSecondsAgo: number, duration = 15): V1Lease => ({
  metadata: { name: 'echo-controller', namespace: 'default', resourceVersion: '9' },
  spec: {
    holderIdentity: holder,
    leaseDurationSeconds: duration,
    renewTime: new Date(now.getTime() - renewedSecondsAgo * 1000) as never,
    leaseTransitions: 2,
  },
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

describe("the renew loop's wait", () => {
  it('leaves no abort listener behind: a long run on one signal adds none, and Node does not warn', async () => {
    // Given one signal, as the renew loop (and a waiting candidate) use for their whole life
    const stop = new AbortController();
    const warnings: Error[] = [];
    const onWarning = (warning: Error): void => void warnings.push(warning);
    process.on('warning', onWarning);
    try {
      // When it waits 30 times (a minute and more of renewals at the default 2 s)
      for (let i = 0; i < 30; i += 1) await sleep(1, stop.signal);
      await new Promise((resolve) => setImmediate(resolve)); // (warnings are emitted on the next tick)
      // Then no listener is left on the signal, and no MaxListenersExceededWarning was raised
      expect(getEventListeners(stop.signal, 'abort')).toHaveLength(0);
      expect(warnings.map((w) => w.name)).not.toContain('MaxListenersExceededWarning');
    } finally {
      process.off('warning', onWarning);
    }
    // And an abort still ends a wait at once
    const started = Date.now();
    const waiting = sleep(60_000, stop.signal);
    stop.abort();
    await waiting;
    expect(Date.now() - started).toBeLessThan(1_000);
  });
});
