// The agent start's judgement of a pod whose token Secret is not there yet, and the per-mode capabilities it asks for.
import type { V1ContainerStatus, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { agentCapabilities } from '../../shared/agent-contract.js';
import { judgeAgentPod } from './agent.js';

const pod: V1Pod = { metadata: { name: 'devop-agent-ab-x' }, status: { phase: 'Pending' } };
const waiting = (message: string): V1ContainerStatus => ({
  name: 'devop-agent',
  image: 'i',
  imageID: '',
  ready: false,
  restartCount: 0,
  state: { waiting: { reason: 'CreateContainerConfigError', message } },
});

describe('judgeAgentPod and the token Secret', () => {
  it('keeps waiting while kubelet has not seen the Secret devop makes just after the Job', () => {
    // Given kubelet's message for a secretKeyRef to a Secret it cannot find yet (kubelet_pods.go)
    const status = waiting('secret "devop-agent-ab" not found');
    // Then the agent's own Secret is still on its way; without it named, the error is final
    expect(judgeAgentPod(pod, status, 'devop-agent-ab')).toBeUndefined();
    expect(judgeAgentPod(pod, status)).toMatchObject({ why: 'config' });
  });

  it('fails at once on any other configuration error', () => {
    expect(judgeAgentPod(pod, waiting('secret "other" not found'), 'devop-agent-ab')).toMatchObject({
      why: 'config',
    });
    expect(
      judgeAgentPod(pod, waiting("couldn't find key token in Secret ns/devop-agent-ab"), 'devop-agent-ab'),
    ).toMatchObject({ why: 'config' });
  });
});

describe('agentCapabilities', () => {
  it('gives each mode only what it uses', () => {
    expect(agentCapabilities('job', false)).toEqual(['NET_ADMIN', 'SYS_ADMIN', 'SYS_PTRACE', 'DAC_READ_SEARCH']);
    expect(agentCapabilities('job', true)).toContain('NET_RAW');
    expect(agentCapabilities('ephemeral', false)).toEqual(['NET_ADMIN', 'SYS_PTRACE', 'DAC_READ_SEARCH']);
    expect(agentCapabilities('ephemeral', true)).toEqual(['NET_ADMIN', 'NET_RAW', 'SYS_PTRACE', 'DAC_READ_SEARCH']);
    expect(agentCapabilities('targetless', true)).toEqual([]);
  });
});
