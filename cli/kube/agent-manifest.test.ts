// The agent's pod specs compared with literal expected manifests (a change to what devop creates in clusters shows
// here).
import { describe, expect, it } from 'vitest';
import {
  buildAgentEphemeralContainer,
  buildAgentJob,
  buildTargetlessAgentJob,
  type AgentSpecInput,
} from './agent-manifest.js';

const input: AgentSpecInput = {
  agentId: 'ab12cd34ef',
  namespace: 'shop',
  image: 'ghcr.io/devop/agent:0.1.0',
  port: 24567,
  token: 'secret-token',
  target: {
    pod: 'api-7d9f-abcde',
    uid: 'uid-123',
    namespace: 'shop',
    nodeName: 'node-1',
    containerId: 'containerd://0123abcd',
    container: 'api',
  },
  idleSeconds: 10,
  ttlSeconds: 60,
  owner: 'alice@laptop',
  flush: true,
  privileged: false,
};

describe('agent manifests', () => {
  it('builds the agent Job pinned to the target node with the contract env, labels and capabilities', () => {
    // Given a resolved target and the session's agent settings
    // When the Job is built
    const job = buildAgentJob(input);
    // Then it is exactly this manifest
    expect(job).toEqual({
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: {
        name: 'devop-agent-ab12cd34ef',
        namespace: 'shop',
        labels: {
          'app.kubernetes.io/name': 'devop-agent',
          'app.kubernetes.io/managed-by': 'devop',
          'devop.dev/target-pod': 'api-7d9f-abcde',
          'devop.dev/target-uid': 'uid-123',
        },
        annotations: {
          'devop.dev/agent-port': '24567',
          'devop.dev/owner': 'alice@laptop',
          'devop.dev/agent-id': 'ab12cd34ef',
        },
      },
      spec: {
        backoffLimit: 0,
        ttlSecondsAfterFinished: 60,
        template: {
          metadata: {
            labels: {
              'app.kubernetes.io/name': 'devop-agent',
              'app.kubernetes.io/managed-by': 'devop',
              'devop.dev/target-pod': 'api-7d9f-abcde',
              'devop.dev/target-uid': 'uid-123',
            },
            annotations: {
              'devop.dev/agent-port': '24567',
              'devop.dev/owner': 'alice@laptop',
              'devop.dev/agent-id': 'ab12cd34ef',
              'sidecar.istio.io/inject': 'false',
              'linkerd.io/inject': 'disabled',
            },
          },
          spec: {
            nodeName: 'node-1',
            hostPID: true,
            restartPolicy: 'Never',
            terminationGracePeriodSeconds: 2,
            automountServiceAccountToken: false,
            tolerations: [{ operator: 'Exists' }],
            containers: [
              {
                name: 'devop-agent',
                image: 'ghcr.io/devop/agent:0.1.0',
                imagePullPolicy: 'IfNotPresent',
                env: [
                  { name: 'DEVOP_AGENT_MODE', value: 'job' },
                  { name: 'DEVOP_AGENT_PORT', value: '24567' },
                  { name: 'DEVOP_AGENT_NATIVE_PORT', value: '24568' },
                  { name: 'DEVOP_AGENT_TOKEN', value: 'secret-token' },
                  { name: 'DEVOP_AGENT_CONTAINER_ID', value: 'containerd://0123abcd' },
                  { name: 'DEVOP_AGENT_IDLE_SECONDS', value: '10' },
                  { name: 'DEVOP_AGENT_FLUSH_CONNECTIONS', value: 'true' },
                  { name: 'DEVOP_AGENT_ID', value: 'ab12cd34ef' },
                ],
                securityContext: {
                  privileged: false,
                  runAsUser: 0,
                  capabilities: {
                    drop: ['ALL'],
                    add: ['NET_ADMIN', 'NET_RAW', 'SYS_ADMIN', 'SYS_PTRACE', 'DAC_READ_SEARCH'],
                  },
                },
                resources: { requests: { cpu: '10m', memory: '48Mi' }, limits: { cpu: '1', memory: '256Mi' } },
              },
            ],
          },
        },
      },
    });
  });

  it('applies devop.json extras: labels, annotations, and tolerations that replace the tolerate-all default', () => {
    // Given extras from devop.json
    const job = buildAgentJob({
      ...input,
      privileged: true,
      logLevel: 'debug',
      extras: {
        labels: { team: 'a' },
        annotations: { note: 'x' },
        tolerations: [{ key: 'gpu', operator: 'Exists', effect: 'NoSchedule' }],
      },
    });
    // Then they are on the Job and its pod, and the contract's labels still win
    expect(job.metadata?.labels?.team).toBe('a');
    expect(job.spec?.template.metadata?.labels?.team).toBe('a');
    expect(job.spec?.template.metadata?.annotations?.note).toBe('x');
    expect(job.spec?.template.spec?.tolerations).toEqual([{ key: 'gpu', operator: 'Exists', effect: 'NoSchedule' }]);
    expect(job.spec?.template.spec?.containers[0].securityContext?.privileged).toBe(true);
    expect(job.spec?.template.spec?.containers[0].env).toContainEqual({
      name: 'DEVOP_AGENT_LOG_LEVEL',
      value: 'debug',
    });
  });

  it('builds the ephemeral agent container targeting the chosen container', () => {
    expect(buildAgentEphemeralContainer(input)).toEqual({
      name: 'devop-agent-ab12cd34ef',
      image: 'ghcr.io/devop/agent:0.1.0',
      imagePullPolicy: 'IfNotPresent',
      targetContainerName: 'api',
      env: [
        { name: 'DEVOP_AGENT_MODE', value: 'ephemeral' },
        { name: 'DEVOP_AGENT_PORT', value: '24567' },
        { name: 'DEVOP_AGENT_NATIVE_PORT', value: '24568' },
        { name: 'DEVOP_AGENT_TOKEN', value: 'secret-token' },
        { name: 'DEVOP_AGENT_CONTAINER_ID', value: 'containerd://0123abcd' },
        { name: 'DEVOP_AGENT_IDLE_SECONDS', value: '10' },
        { name: 'DEVOP_AGENT_FLUSH_CONNECTIONS', value: 'true' },
        { name: 'DEVOP_AGENT_ID', value: 'ab12cd34ef' },
      ],
      securityContext: {
        privileged: false,
        runAsUser: 0,
        capabilities: {
          drop: ['ALL'],
          add: ['NET_ADMIN', 'NET_RAW', 'SYS_ADMIN', 'SYS_PTRACE', 'DAC_READ_SEARCH'],
        },
      },
    });
  });

  it('builds a targetless agent Job without host access', () => {
    const job = buildTargetlessAgentJob({
      agentId: 'zz',
      namespace: 'default',
      image: 'img',
      port: 21000,
      token: 't',
      idleSeconds: 10,
      ttlSeconds: 30,
      owner: 'bob@h',
    });
    const pod = job.spec?.template.spec;
    expect(pod?.hostPID).toBeUndefined();
    expect(pod?.nodeName).toBeUndefined();
    expect(pod?.containers[0].securityContext).toEqual({
      runAsNonRoot: true,
      runAsUser: 65534,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(pod?.containers[0].env).toEqual([
      { name: 'DEVOP_AGENT_MODE', value: 'targetless' },
      { name: 'DEVOP_AGENT_PORT', value: '21000' },
      { name: 'DEVOP_AGENT_TOKEN', value: 't' },
      { name: 'DEVOP_AGENT_IDLE_SECONDS', value: '10' },
      { name: 'DEVOP_AGENT_ID', value: 'zz' },
    ]);
    expect(job.metadata?.labels?.['devop.dev/target-pod']).toBe('targetless');
  });
});
