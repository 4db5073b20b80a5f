// The sessions of devop's Leases: grouped by holder, live or expired, the PID only on the holder's own machine; and
// who may stop one without asking by name.
import type { V1Lease } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { LEASE_ANNOTATIONS, LEASE_LABEL } from '../kube/steal-lease.js';
import { formatSessionsTable, sessionsOfLeases, stopRefusal } from './sessions.js';

const NOW = Date.parse('2026-12-05T12:00:00Z');

function lease(name: string, holder: string, port: number | undefined, renewedAgoS: number, pid = 4242): V1Lease {
  const at = new Date(NOW - renewedAgoS * 1000);
  return {
    metadata: {
      name,
      namespace: 'default',
      labels: { [LEASE_LABEL]: port === undefined ? 'replace' : 'steal' },
      annotations: {
        [LEASE_ANNOTATIONS.workload]: 'deployment/echo',
        ...(port === undefined ? {} : { [LEASE_ANNOTATIONS.port]: String(port) }),
        [LEASE_ANNOTATIONS.pid]: String(pid),
      },
    },
    spec: { holderIdentity: holder, leaseDurationSeconds: 15, acquireTime: at as never, renewTime: at as never },
  };
}

const me = { user: 'alice', host: 'laptop', isAlive: (pid: number) => pid === 4242 };

describe('sessionsOfLeases', () => {
  it("groups one run's Leases into one session, with its ports, and the PID only on this machine", () => {
    // Given two ports stolen by alice's run, one by bob's on another machine, and a released Lease
    const rows = sessionsOfLeases(
      [
        lease('a', 'alice@laptop#aaaa1111', 9090, 1),
        lease('b', 'alice@laptop#aaaa1111', 8080, 2),
        lease('c', 'bob@desk#bbbb2222', 8080, 60),
        { ...lease('d', '', 7070, 1), spec: {} },
      ],
      me,
      NOW,
    );
    // Then alice's run is one live session on ports 8080 and 9090 with her devop's PID; bob's is expired, no PID
    expect(rows).toEqual([
      expect.objectContaining({ id: 'bbbb2222', holder: 'bob@desk', state: 'expired', ports: [8080] }),
      expect.objectContaining({
        id: 'aaaa1111',
        holder: 'alice@laptop',
        mode: 'steal',
        target: 'deployment/echo',
        state: 'live',
        ports: [8080, 9090],
        pid: 4242,
        leases: ['a', 'b'],
      }),
    ]);
    expect(rows[0]).not.toHaveProperty('pid');
  });

  it('shows no PID when the process named in the Lease is gone', () => {
    const [row] = sessionsOfLeases([lease('a', 'alice@laptop#aaaa1111', 8080, 1, 999)], me, NOW);
    expect(row.pid).toBeUndefined();
    expect(formatSessionsTable([row])).toMatch(
      /^aaaa1111 +default +deployment\/echo +8080 +steal +alice@laptop .* -$/m,
    );
  });
});

describe('stopRefusal', () => {
  const [bobs] = sessionsOfLeases([lease('c', 'bob@desk#bbbb2222', 8080, 1)], me, NOW);
  it("refuses another user's live session, naming whose it is and the flag that asks for it", () => {
    expect(stopRefusal(bobs, me, false)?.message).toMatch(/^session bbbb2222 is bob@desk's \(steal of deployment/);
    expect(stopRefusal(bobs, me, false)?.hint).toContain('`devop sessions stop bbbb2222 --force`');
  });
  it("allows one's own session, another's with --force, and an expired one", () => {
    const [mine] = sessionsOfLeases([lease('a', 'alice@laptop#aaaa1111', 8080, 1)], me, NOW);
    const [gone] = sessionsOfLeases([lease('c', 'bob@desk#bbbb2222', 8080, 60)], me, NOW);
    expect(stopRefusal(mine, me, false)).toBeUndefined();
    expect(stopRefusal(bobs, me, true)).toBeUndefined();
    expect(stopRefusal(gone, me, false)).toBeUndefined();
  });
});
