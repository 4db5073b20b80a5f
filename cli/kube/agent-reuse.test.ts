// Reusing a running agent: its Job and its token Secret are read at once (one round trip to the API server, not two),
// and the token is taken only once the Job shows the pod is the one devop made, from a Secret that Job owns.
import { BatchV1Api, CoreV1Api, KubeConfig, type V1Job, type V1Pod, type V1Secret } from '@kubernetes/client-node';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  AGENT_ANNOTATIONS,
  AGENT_CONTAINER_NAME,
  AGENT_ENV,
  AGENT_LABELS,
  AGENT_SECRET_KEY,
  agentSecretName,
} from '../../shared/agent-contract.js';
import { agentJobName } from './agent-manifest.js';
import { findAgent } from './agent-reuse.js';
import type { ResolvedTarget } from './target.js';

const AGENT_ID = 'ab12cd34ef';
const JOB_UID = 'job-uid-1';
const target = { namespace: 'default', podName: 'web-1', podUid: 'web-uid', pod: { spec: {} } } as ResolvedTarget;

const agentPod: V1Pod = {
  metadata: {
    name: `${agentJobName(AGENT_ID)}-x1`,
    namespace: 'default',
    labels: { [AGENT_LABELS.targetPod]: 'web-1', [AGENT_LABELS.targetUid]: 'web-uid' },
    annotations: { [AGENT_ANNOTATIONS.agentId]: AGENT_ID },
    ownerReferences: [
      { apiVersion: 'batch/v1', kind: 'Job', name: agentJobName(AGENT_ID), uid: JOB_UID, controller: true },
    ],
  },
  spec: {
    containers: [
      {
        name: AGENT_CONTAINER_NAME,
        env: [
          { name: AGENT_ENV.port, value: '40123' },
          {
            name: AGENT_ENV.token,
            valueFrom: { secretKeyRef: { name: agentSecretName(AGENT_ID), key: AGENT_SECRET_KEY } },
          },
        ],
      },
    ],
  },
  status: {
    phase: 'Running',
    containerStatuses: [
      { name: AGENT_CONTAINER_NAME, image: 'i', imageID: '', ready: true, restartCount: 0, state: { running: {} } },
    ],
  },
};

const secret = (ownerUid: string): V1Secret => ({
  metadata: {
    name: agentSecretName(AGENT_ID),
    ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: agentJobName(AGENT_ID), uid: ownerUid }],
    annotations: { [AGENT_ANNOTATIONS.createdBy]: 'alice' },
  },
  data: { [AGENT_SECRET_KEY]: Buffer.from('the-token').toString('base64') },
});

/** The API calls in the order they began and ended; the Job answers once the Secret is asked for (or after 1 s). */
function fakeApi(secretOwner: string): string[] {
  const order: string[] = [];
  let secretAsked!: () => void;
  const asked = new Promise<void>((resolve) => (secretAsked = resolve));
  vi.spyOn(BatchV1Api.prototype, 'readNamespacedJob').mockImplementation(async () => {
    order.push('job asked');
    await Promise.race([asked, new Promise((resolve) => setTimeout(resolve, 1000))]);
    order.push('job answered');
    return { metadata: { name: agentJobName(AGENT_ID), uid: JOB_UID } } as V1Job;
  });
  vi.spyOn(CoreV1Api.prototype, 'readNamespacedSecret').mockImplementation(async () => {
    order.push('secret asked');
    secretAsked();
    return secret(secretOwner);
  });
  return order;
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('findAgent', () => {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: 'https://127.0.0.1:1', skipTLSVerify: false }],
    users: [{ name: 'u', token: 'x' }],
    contexts: [{ name: 'c', cluster: 'c', user: 'u' }],
    currentContext: 'c',
  });
  const options = { agentNamespace: 'default', createdBy: 'alice' };

  it("Given this user's running agent, Then its Job and Secret are read at once and its token is reused", async () => {
    const order = fakeApi(JOB_UID);
    const agent = await findAgent(kc, target, options, Promise.resolve([agentPod]));
    expect(agent).toMatchObject({ mode: 'job', name: agentJobName(AGENT_ID), port: 40123, token: 'the-token' });
    expect(order).toEqual(['job asked', 'secret asked', 'job answered']);
  });

  it('Given a Secret that Job does not own, Then the agent is skipped though the Secret was read', async () => {
    fakeApi('someone-else');
    const skipped: string[] = [];
    const agent = await findAgent(
      kc,
      target,
      { ...options, onSkip: (_name: string, why: string) => skipped.push(why) },
      Promise.resolve([agentPod]),
    );
    expect(agent).toBeUndefined();
    expect(skipped).toEqual(['its Secret is not owned by it']);
  });
});
