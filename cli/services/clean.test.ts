// Unit tests of clean's classification: which agent Jobs/pods, ephemeral agents and Leases are leftovers, and the
// lines.
import type { V1Job, V1Lease, V1Pod, V1Secret } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import {
  classifyAgentJobs,
  classifyAgentSecrets,
  classifyEphemeralAgents,
  classifyLeases,
  classifyReplaced,
  formatCleanReport,
} from './clean.js';
import type { GuardAccessItem } from './leftovers.js';

const job = (name: string, targetUid: string, extra: Partial<V1Job['status']> = {}): V1Job => ({
  metadata: {
    name,
    namespace: 'ns',
    uid: `uid-${name}`,
    labels: { 'devop.dev/target-pod': `t-${name}`, 'devop.dev/target-uid': targetUid },
    annotations: { 'devop.dev/owner': 'ann@box' },
  },
  status: extra,
});
const agentPod = (name: string, ownerJob: string | undefined, waiting?: string): V1Pod => ({
  metadata: {
    name,
    namespace: 'ns',
    ownerReferences: ownerJob ? [{ apiVersion: 'batch/v1', kind: 'Job', name: ownerJob, uid: `uid-${ownerJob}` }] : [],
  },
  status: {
    phase: waiting ? 'Pending' : 'Running',
    containerStatuses: [
      {
        name: 'devop-agent',
        image: 'i',
        imageID: '',
        ready: false,
        restartCount: 0,
        state: waiting ? { waiting: { reason: waiting } } : { running: {} },
      },
    ],
  },
});

describe('classifyAgentJobs', () => {
  it('removes finished Jobs, Jobs whose pod cannot start, Jobs whose target is gone, and agent pods without a Job', () => {
    const items = classifyAgentJobs(
      [
        job('done', 'live', { conditions: [{ type: 'Complete', status: 'True' }] }),
        job('stuck', 'live'),
        job('orphaned', 'dead'),
        job('busy', 'live'),
      ],
      [agentPod('stuck-x', 'stuck', 'ImagePullBackOff'), agentPod('busy-x', 'busy'), agentPod('stray', undefined)],
      new Set(['live']),
      false,
    );
    expect(items.map((i) => [i.kind, i.name, i.action, i.reason])).toEqual([
      ['job', 'done', 'remove', 'finished (Complete) (started by ann@box)'],
      ['job', 'stuck', 'remove', 'its pod cannot start (ImagePullBackOff) (started by ann@box)'],
      ['job', 'orphaned', 'remove', 'its target pod t-orphaned is gone (started by ann@box)'],
      [
        'job',
        'busy',
        'keep',
        'running for t-busy (started by ann@box): it may serve a session and exits by itself when idle',
      ],
      ['pod', 'stray', 'remove', 'an agent pod without its Job'],
    ]);
  });
  it('removes running agents too with --force', () => {
    const [item] = classifyAgentJobs([job('busy', 'live')], [agentPod('busy-x', 'busy')], new Set(['live']), true);
    expect(item.action).toBe('remove');
  });
});

describe('classifyEphemeralAgents', () => {
  it('lists running ephemeral agents with what to do (they cannot be removed), ignores finished ones', () => {
    const pod: V1Pod = {
      metadata: { name: 'web-1', namespace: 'ns' },
      status: {
        ephemeralContainerStatuses: [
          { name: 'devop-agent-aa', image: 'i', imageID: '', ready: false, restartCount: 0, state: { running: {} } },
          {
            name: 'devop-agent-bb',
            image: 'i',
            imageID: '',
            ready: false,
            restartCount: 0,
            state: { terminated: { exitCode: 0 } },
          },
          { name: 'debugger', image: 'i', imageID: '', ready: false, restartCount: 0, state: { running: {} } },
        ],
      },
    };
    const items = classifyEphemeralAgents([pod]);
    expect(items).toHaveLength(1);
    expect(items[0]).toMatchObject({ kind: 'ephemeral', name: 'web-1/devop-agent-aa', action: 'manual' });
    expect(items[0].fix).toContain('kubectl delete pod -n ns web-1');
  });
});

describe('classifyAgentSecrets', () => {
  const secret = (name: string, kind: string, uid: string): V1Secret => ({
    metadata: { name, namespace: 'ns', ownerReferences: [{ apiVersion: 'v1', kind, name: 'owner', uid }] },
  });
  it("removes an ended ephemeral agent's token and one whose Job is gone; keeps a running agent's", () => {
    // Given the pod of two ephemeral agents (one running, one ended) and one live agent Job
    const pod: V1Pod = {
      metadata: { name: 'web-1', namespace: 'ns', uid: 'pod-uid' },
      status: {
        ephemeralContainerStatuses: [
          { name: 'devop-agent-aa', image: 'i', imageID: '', ready: false, restartCount: 0, state: { running: {} } },
          {
            name: 'devop-agent-bb',
            image: 'i',
            imageID: '',
            ready: false,
            restartCount: 0,
            state: { terminated: { exitCode: 0 } },
          },
        ],
      },
    };
    const items = classifyAgentSecrets(
      [
        secret('devop-agent-aa', 'Pod', 'pod-uid'),
        secret('devop-agent-bb', 'Pod', 'pod-uid'),
        secret('devop-agent-cc', 'Job', 'uid-devop-agent-cc'),
        secret('devop-agent-dd', 'Job', 'uid-gone'),
      ],
      [pod],
      [job('devop-agent-cc', 'x')],
    );
    // Then the running agent's token stays, the ended one's and the orphan's go, the live Job's is left to its Job
    expect(items.map((i) => [i.name, i.action])).toEqual([
      ['devop-agent-aa', 'keep'],
      ['devop-agent-bb', 'remove'],
      ['devop-agent-dd', 'remove'],
    ]);
  });
});

describe('classifyLeases', () => {
  it('removes expired or released Leases and keeps live ones', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    const lease = (name: string, holder: string | undefined, ago: number): V1Lease => ({
      metadata: { name, namespace: 'ns' },
      spec: {
        holderIdentity: holder,
        leaseDurationSeconds: 15,
        acquireTime: new Date(now - 60_000),
        renewTime: new Date(now - ago),
      },
    });
    const items = classifyLeases(
      [lease('live', 'a@h#1', 1000), lease('stale', 'b@h#2', 60_000), lease('free', undefined, 0)],
      now,
    );
    expect(items.map((i) => [i.name, i.action])).toEqual([
      ['live', 'keep'],
      ['stale', 'remove'],
      ['free', 'remove'],
    ]);
    expect(items[1].reason).toBe('expired steal lock of b@h (devop stopped without releasing it)');
  });
});

describe('formatCleanReport', () => {
  it('says what would be removed on a dry run, and what was kept', () => {
    const text = formatCleanReport({
      namespace: 'ns',
      dryRun: true,
      items: [
        { kind: 'job', namespace: 'ns', name: 'j', reason: 'r', action: 'remove' },
        { kind: 'lease', namespace: 'ns', name: 'l', reason: 'held', action: 'keep' },
      ],
    });
    expect(text).toBe(
      'would remove job ns/j: r\nkept lease ns/l: held\ndevop clean --dry-run: 1 to remove (run without --dry-run to ' +
        'remove them)\n',
    );
    expect(formatCleanReport({ namespace: 'all', dryRun: false, items: [] })).toBe(
      "nothing of devop's found in any namespace\n",
    );
  });

  it("names this machine's session directories whose devop is gone", () => {
    const localDirs = [{ path: '/tmp/devop-root-4242-abcdef', pid: 4242, removed: true }];
    expect(formatCleanReport({ namespace: 'ns', dryRun: false, items: [], localDirs })).toBe(
      "removed local directory /tmp/devop-root-4242-abcdef: its devop (pid 4242) is gone\nnothing of devop's found " +
        'in namespace ns\n',
    );
  });
});

describe('clean after --replace', () => {
  const now = Date.parse('2026-01-01T00:10:00Z');
  const replaceLease = (name: string, workload: string, renewed: string): V1Lease => ({
    metadata: { name, namespace: 'ns', annotations: { 'devop.dev/workload': workload } },
    spec: { holderIdentity: 'ada@laptop#1', renewTime: renewed as never, leaseDurationSeconds: 15 },
  });
  const labelled = (name: string, of: string, role: string) => ({
    metadata: { name, namespace: 'ns', labels: { 'devop.dev/replace-of': of, 'devop.dev/replace-role': role } },
  });
  const replaced = (name: string) => ({
    kind: 'deployment' as const,
    namespace: 'ns',
    name,
    annotations: { 'devop.dev/replaced-replicas': '2', 'devop.dev/replaced-by': 'ada@laptop#1' },
  });

  it('restores a workload whose session ended and removes its copy, guard and Lease; a live one is kept', () => {
    const items = classifyReplaced(
      {
        workloads: [replaced('gone'), replaced('live')],
        leases: [
          replaceLease('l-gone', 'deployment/gone', '2026-01-01T00:00:00Z'),
          replaceLease('l-live', 'deployment/live', '2026-01-01T00:09:55Z'),
        ],
        copies: [labelled('gone-copy', 'gone', 'copy'), labelled('live-copy', 'live', 'copy')] as V1Pod[],
        guards: [labelled('gone-guard', 'gone', 'guard')] as V1Job[],
        access: [],
      },
      now,
    );
    expect(items.map((i) => `${i.action} ${i.kind} ${i.name}`)).toEqual([
      'remove workload deployment/gone',
      'keep workload deployment/live',
      'remove pod gone-copy',
      'keep pod live-copy',
      'remove job gone-guard',
      'remove lease l-gone',
    ]);
    expect(items[0].reason).toBe('replaced by ada@laptop, whose session ended: back to 2 replicas');
    expect(
      formatCleanReport({ namespace: 'ns', dryRun: false, items: [{ ...items[0], removed: true }] }).split('\n')[0],
    ).toBe('restored deployment ns/gone: replaced by ada@laptop, whose session ended: back to 2 replicas');
  });

  it("removes the guard's ServiceAccount, Role and RoleBinding once its session is over, keeps a live one's", () => {
    // Given the guard accounts of an ended session and of a live one, and another object that carries devop's label
    const access = (kind: GuardAccessItem['kind'], name: string, of: string): GuardAccessItem => ({
      kind,
      namespace: 'ns',
      name,
      labels: {
        'app.kubernetes.io/managed-by': 'devop',
        'devop.dev/replace-of': of,
        'devop.dev/replace-role': 'guard-access',
        'devop.dev/replace-session': name,
      },
    });
    const items = classifyReplaced(
      {
        workloads: [],
        leases: [replaceLease('l-live', 'deployment/live', '2026-01-01T00:09:55Z')],
        copies: [],
        guards: [],
        access: [
          access('rolebinding', 'g-gone', 'gone'),
          access('role', 'g-gone', 'gone'),
          access('serviceaccount', 'g-gone', 'gone'),
          access('role', 'g-live', 'live'),
          { kind: 'role', namespace: 'ns', name: 'someone-else', labels: { 'app.kubernetes.io/managed-by': 'devop' } },
        ],
      },
      now,
    );
    // Then the ended session's three go, the live one's stays, the other object is not touched
    expect(items.map((i) => `${i.action} ${i.kind} ${i.name}`)).toEqual([
      'remove rolebinding g-gone',
      'remove role g-gone',
      'remove serviceaccount g-gone',
      'keep role g-live',
    ]);
    expect(formatCleanReport({ namespace: 'ns', dryRun: true, items: items.slice(0, 1) }).split('\n')[0]).toBe(
      "would remove role binding ns/g-gone: replace guard's account of gone, whose session ended",
    );
  });

  it("removes an older devop's namespace-wide guard account once no replace session is live in its namespace", () => {
    const shared: GuardAccessItem = {
      kind: 'role',
      namespace: 'ns',
      name: 'devop-replace-guard',
      labels: { 'app.kubernetes.io/managed-by': 'devop' },
    };
    const objects = { workloads: [], copies: [], guards: [], access: [shared] };
    expect(classifyReplaced({ ...objects, leases: [] }, now).map((i) => i.action)).toEqual(['remove']);
    const live = replaceLease('l-live', 'deployment/live', '2026-01-01T00:09:55Z');
    expect(classifyReplaced({ ...objects, leases: [live] }, now).map((i) => i.action)).toEqual(['keep']);
  });
});
