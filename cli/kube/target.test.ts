// Which pod and container a target resolves to, and what devop says when none fits; how an agent pod's state is judged.
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { judgeAgentPod } from './agent.js';
import {
  checkHostNetwork,
  checkTemplateHostNetwork,
  chooseContainer,
  choosePod,
  hostNetworkWarning,
  podState,
  selectorToString,
} from './target.js';
import { answerDeadlineMs } from './targets/webhook.js';

function pod(
  name: string,
  opts: { ready?: boolean; created?: string; phase?: string; waiting?: string; deleting?: boolean } = {},
): V1Pod {
  const ready = opts.ready ?? true;
  return {
    metadata: {
      name,
      creationTimestamp: new Date(opts.created ?? '2026-01-01T00:00:00Z'),
      ...(opts.deleting ? { deletionTimestamp: new Date() } : {}),
    },
    spec: { containers: [{ name: 'app' }] },
    status: {
      phase: opts.phase ?? 'Running',
      conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }],
      containerStatuses: [
        {
          name: 'app',
          image: 'i',
          imageID: '',
          ready,
          restartCount: 0,
          state: opts.waiting ? { waiting: { reason: opts.waiting } } : { running: {} },
        },
      ],
    },
  };
}

describe('pod choice', () => {
  it('picks the newest Ready pod and says why', () => {
    // Given three pods, two Ready
    const pods = [
      pod('old', { created: '2026-01-01T00:00:00Z' }),
      pod('new', { created: '2026-01-02T00:00:00Z' }),
      pod('starting', { ready: false, created: '2026-01-03T00:00:00Z' }),
    ];
    // When one is chosen
    const { pod: chosen, reason } = choosePod(pods, 'deployment/api');
    // Then it is the newest Ready one
    expect(chosen.metadata?.name).toBe('new');
    expect(reason).toBe('newest Ready pod of 2');
  });

  it('says "the only Ready pod of N" and ignores terminating pods', () => {
    expect(choosePod([pod('a'), pod('b', { ready: false })], 'd').reason).toBe('the only Ready pod of 2');
    expect(choosePod([pod('a'), pod('gone', { deleting: true })], 'd').reason).toBe('its only pod');
  });

  it('lists every pod state when none is Ready', () => {
    const pods = [
      pod('a', { ready: false, phase: 'Pending', waiting: 'ImagePullBackOff' }),
      pod('b', { ready: false }),
    ];
    expect(() => choosePod(pods, 'deployment/api')).toThrow(
      'deployment/api has no Ready pod (a: Pending (ImagePullBackOff), b: Running, not Ready)',
    );
    expect(() => choosePod([], 'deployment/api')).toThrow(/has no pods/);
    expect(podState(pod('x', { deleting: true }))).toBe('Terminating');
  });

  it('chooses the container: asked, annotated default, only, first', () => {
    const p: V1Pod = {
      metadata: { name: 'p', annotations: {} },
      spec: { containers: [{ name: 'sidecar' }, { name: 'app' }] },
    };
    expect(chooseContainer(p, 'app').container.name).toBe('app');
    expect(() => chooseContainer(p, 'nope')).toThrow('pod p has no container "nope" (containers: sidecar, app)');
    expect(chooseContainer(p, undefined)).toMatchObject({
      container: { name: 'sidecar' },
      reason: 'the first of 2 (add /container/NAME to choose)',
    });
    p.metadata!.annotations!['kubectl.kubernetes.io/default-container'] = 'app';
    expect(chooseContainer(p, undefined)).toMatchObject({
      container: { name: 'app' },
      reason: "the pod's default-container annotation",
    });
  });

  it('turns label selectors into selector strings', () => {
    expect(
      selectorToString({
        matchLabels: { app: 'echo', tier: 'web' },
        matchExpressions: [
          { key: 'env', operator: 'In', values: ['a', 'b'] },
          { key: 'canary', operator: 'DoesNotExist' },
        ],
      }),
    ).toBe('app=echo,tier=web,env in (a,b),!canary');
  });
});

describe("a pod on its node's network", () => {
  it('is refused in one line naming the node-wide effect and --allow-host-network, and taken with it', () => {
    // Given a Ready pod of an ingress DaemonSet on the host network
    const ingress = pod('ingress-abc');
    ingress.spec = { ...ingress.spec!, hostNetwork: true, nodeName: 'node-1' };
    // When devop checks it without the flag, then with it
    // Then it is refused, naming the problem and the flag; the flag takes it
    expect(() => checkHostNetwork(ingress, false)).toThrow(
      "pod ingress-abc uses its node's network (hostNetwork: true): stealing, mirroring or flushing its ports would " +
        'act on every connection to those ports on node node-1',
    );
    expect(() => checkHostNetwork(ingress, false)).toThrow(
      expect.objectContaining({ hint: expect.stringContaining('pass --allow-host-network') }),
    );
    expect(() => checkHostNetwork(ingress, true)).not.toThrow();
    expect(() => checkTemplateHostNetwork('deployment/ingress', ingress.spec, false)).toThrow(
      /^deployment\/ingress runs its pods on their node's network \(hostNetwork: true\), and so would its copy/,
    );
    expect(() => checkTemplateHostNetwork('deployment/ingress', ingress.spec, true)).not.toThrow();
    expect(() => checkHostNetwork(pod('web'), false)).not.toThrow();
    expect(hostNetworkWarning({ podName: 'ingress-abc', nodeName: 'node-1' })).toBe(
      "pod ingress-abc uses its node's network (--allow-host-network): steal, mirror and flush act on every " +
        'connection to its ports on node node-1, whichever pod it is for',
    );
  });
});

describe('agent pod judgement', () => {
  const agentPod = (
    state: NonNullable<V1Pod['status']>['containerStatuses'],
    phase = 'Running',
    conditions: NonNullable<V1Pod['status']>['conditions'] = [],
  ): V1Pod => ({
    metadata: { name: 'agent' },
    status: { phase, containerStatuses: state, conditions },
  });
  const status = (state: object) => ({
    name: 'devop-agent',
    image: 'i',
    imageID: '',
    ready: false,
    restartCount: 0,
    state,
  });

  it('waits while starting, and accepts a running container', () => {
    expect(judgeAgentPod(agentPod([], 'Pending'), undefined)).toBeUndefined();
    expect(judgeAgentPod(agentPod([]), status({ running: {} }))).toHaveProperty('ok');
  });

  it('fails on image pull errors, crashes and an unschedulable pod', () => {
    expect(
      judgeAgentPod(agentPod([]), status({ waiting: { reason: 'ImagePullBackOff', message: 'not found' } })),
    ).toMatchObject({ why: 'image', detail: 'ImagePullBackOff: not found' });
    expect(judgeAgentPod(agentPod([]), status({ terminated: { exitCode: 2, reason: 'Error' } }))).toMatchObject({
      why: 'crash',
      detail: 'exited with code 2 (Error)',
    });
    // A container the runtime could not start: its message says why (there is no log)
    const startError = { exitCode: 128, reason: 'StartError', message: 'exec: "node": not found\n' };
    expect(judgeAgentPod(agentPod([]), status({ terminated: startError }))).toMatchObject({
      why: 'config',
      detail: 'exited with code 128 (StartError: exec: "node": not found)',
    });
    expect(judgeAgentPod(agentPod([]), status({ waiting: { reason: 'CrashLoopBackOff' } }))).toMatchObject({
      why: 'crash',
    });
    expect(
      judgeAgentPod(
        agentPod([], 'Pending', [
          { type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message: '0/1 nodes available' },
        ]),
        undefined,
      ),
    ).toMatchObject({ why: 'unschedulable', detail: '0/1 nodes available' });
  });
});

describe('webhook answer deadline', () => {
  it('leaves the pod two seconds of the shortest timeout, or half of one under four', () => {
    expect(answerDeadlineMs([{ name: 'a', timeoutSeconds: 10 }])).toBe(8000);
    expect(
      answerDeadlineMs([
        { name: 'a', timeoutSeconds: 10 },
        { name: 'b', timeoutSeconds: 5 },
      ]),
    ).toBe(3000);
    expect(answerDeadlineMs([{ name: 'a', timeoutSeconds: 3 }])).toBe(1500);
    expect(answerDeadlineMs([{ name: 'a', timeoutSeconds: 1 }])).toBe(500);
  });
});
