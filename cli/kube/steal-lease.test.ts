// Unit tests of the steal lock's pure parts: which workload a pod belongs to, Lease names, holder identities, expiry.
import type { V1Lease, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import {
  holderIdentity,
  leaseHolder,
  leaseVerdict,
  parseHolderIdentity,
  stealLeaseName,
  workloadOfPod,
} from './steal-lease.js';

const pod = (owner: { kind: string; name: string } | undefined, labels: Record<string, string> = {}): V1Pod => ({
  metadata: {
    name: 'p-1',
    labels,
    ownerReferences: owner
      ? [{ apiVersion: 'apps/v1', kind: owner.kind, name: owner.name, uid: 'u', controller: true }]
      : [],
  },
});

describe('workloadOfPod', () => {
  it('maps a ReplicaSet pod to its Deployment, so every replica shares one lock', () => {
    expect(workloadOfPod(pod({ kind: 'ReplicaSet', name: 'echo-7d9f8' }, { 'pod-template-hash': '7d9f8' }))).toEqual({
      kind: 'deployment',
      name: 'echo',
    });
  });
  it('keeps a ReplicaSet whose name does not end with the hash as a plain pod lock', () => {
    expect(workloadOfPod(pod({ kind: 'ReplicaSet', name: 'hand-made' }, { 'pod-template-hash': 'abc' }))).toEqual({
      kind: 'pod',
      name: 'p-1',
    });
  });
  it('maps StatefulSet and Argo Rollout pods to their owner', () => {
    expect(workloadOfPod(pod({ kind: 'StatefulSet', name: 'db' }))).toEqual({ kind: 'statefulset', name: 'db' });
    expect(
      workloadOfPod(
        pod({ kind: 'ReplicaSet', name: 'web-5c' }, { 'pod-template-hash': '5c', 'rollouts-pod-template-hash': '5c' }),
      ),
    ).toEqual({ kind: 'rollout', name: 'web' });
  });
  it('uses the pod itself when it has no owner', () => {
    expect(workloadOfPod(pod(undefined))).toEqual({ kind: 'pod', name: 'p-1' });
  });
});

describe('stealLeaseName', () => {
  it('is a stable DNS label of at most 63 characters, different per namespace, workload and port', () => {
    const a = stealLeaseName('default', { kind: 'deployment', name: 'echo' }, 8080);
    expect(a).toBe(stealLeaseName('default', { kind: 'deployment', name: 'echo' }, 8080));
    expect(a).toMatch(/^devop-steal-deployment-echo-8080-[0-9a-f]{10}$/);
    expect(stealLeaseName('other', { kind: 'deployment', name: 'echo' }, 8080)).not.toBe(a);
    expect(stealLeaseName('default', { kind: 'deployment', name: 'echo' }, 8081)).not.toBe(a);
    const long = stealLeaseName('default', { kind: 'statefulset', name: `${'a'.repeat(200)}.Upper_case` }, 65535);
    expect(long.length).toBeLessThanOrEqual(63);
    expect(long).toMatch(/^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/);
  });
});

describe('holder identity', () => {
  it('round-trips user, host and run', () => {
    expect(parseHolderIdentity(holderIdentity('alice', 'laptop.local', 'ab12'))).toEqual({
      user: 'alice',
      host: 'laptop.local',
      run: 'ab12',
    });
  });
});

describe('leaseVerdict', () => {
  const now = Date.parse('2026-01-01T00:01:00Z');
  const lease = (holder: string | undefined, renewedAgoS: number, duration = 15): V1Lease => ({
    spec: {
      holderIdentity: holder,
      leaseDurationSeconds: duration,
      acquireTime: new Date(now - 600_000),
      renewTime: new Date(now - renewedAgoS * 1000),
    },
  });
  it('is free without a holder, ours for our identity, held while renewed, expired after the duration', () => {
    expect(leaseVerdict(lease(undefined, 0), 'me@h#1', now)).toBe('free');
    expect(leaseVerdict(lease('me@h#1', 100), 'me@h#1', now)).toBe('ours');
    expect(leaseVerdict(lease('bob@h#2', 14), 'me@h#1', now)).toBe('held');
    expect(leaseVerdict(lease('bob@h#2', 16), 'me@h#1', now)).toBe('expired');
    expect(leaseVerdict(lease('bob@h#2', 16, 60), 'me@h#1', now)).toBe('held');
  });
  it('reads renewTime given as a string (as the API returns it)', () => {
    const l: V1Lease = {
      spec: {
        holderIdentity: 'bob@h#2',
        leaseDurationSeconds: 15,
        renewTime: new Date(now - 20_000).toISOString() as unknown as Date,
      },
    };
    expect(leaseVerdict(l, 'me@h#1', now)).toBe('expired');
  });
  it('names the holder and since when', () => {
    expect(leaseHolder(lease('bob@build-7#2', 1))).toEqual({
      user: 'bob',
      host: 'build-7',
      since: '2025-12-31T23:51:00.000Z',
    });
  });
});
