// The agent's pod specs compared with literal expected manifests (a change to what devop creates in clusters shows
// here).
import { describe, expect, it } from 'vitest';
import {
  buildAgentEphemeralContainer,
  buildAgentJob,
  buildAgentSecret,
  buildTargetlessAgentJob,
  type AgentSpecInput,
} from './agent-manifest.js';

/** How every agent spec gets its token: by reference to the agent's own Secret, never as a value. */
const TOKEN_FROM_SECRET = {
  name: 'DEVOP_AGENT_TOKEN',
  valueFrom: { secretKeyRef: { name: 'devop-agent-ab12cd34ef', key: 'token' } },
};

const input: AgentSpecInput = {
  agentId: 'ab12cd34ef',
  namespace: 'shop',
  image: 'ghcr.io/devop/agent:0.1.0',
  port: 24567,
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
  createdBy: 'alice',
  flush: true,
  privileged: false,
  mirror: false,
};

describe('agent manifests', () => {
  it('builds the agent Job pinned to the target node: token by Secret reference, least capabilities, read-only', () => {
    // Given a resolved target and the settings of a session that steals
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
          'devop.dev/created-by': 'alice',
        },
      },
      spec: {
        backoffLimit: 0,
        activeDeadlineSeconds: 86400,
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
              'devop.dev/created-by': 'alice',
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
            volumes: [{ name: 'run', emptyDir: { medium: 'Memory', sizeLimit: '1Mi' } }],
            containers: [
              {
                name: 'devop-agent',
                image: 'ghcr.io/devop/agent:0.1.0',
                imagePullPolicy: 'IfNotPresent',
                env: [
                  { name: 'DEVOP_AGENT_MODE', value: 'job' },
                  { name: 'DEVOP_AGENT_PORT', value: '24567' },
                  { name: 'DEVOP_AGENT_NATIVE_PORT', value: '24568' },
                  TOKEN_FROM_SECRET,
                  { name: 'DEVOP_AGENT_CONTAINER_ID', value: 'containerd://0123abcd' },
                  { name: 'DEVOP_AGENT_IDLE_SECONDS', value: '10' },
                  { name: 'DEVOP_AGENT_FLUSH_CONNECTIONS', value: 'true' },
                  { name: 'DEVOP_AGENT_ID', value: 'ab12cd34ef' },
                ],
                securityContext: {
                  privileged: false,
                  runAsUser: 0,
                  readOnlyRootFilesystem: true,
                  seccompProfile: { type: 'RuntimeDefault' },
                  capabilities: { drop: ['ALL'], add: ['NET_ADMIN', 'SYS_ADMIN', 'SYS_PTRACE', 'DAC_READ_SEARCH'] },
                },
                resources: { requests: { cpu: '10m', memory: '48Mi' }, limits: { cpu: '1', memory: '256Mi' } },
                volumeMounts: [{ name: 'run', mountPath: '/run' }],
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
    expect(job.spec?.template.spec?.containers[0].securityContext).toEqual({
      privileged: true,
      runAsUser: 0,
      capabilities: { drop: ['ALL'], add: ['NET_ADMIN', 'SYS_ADMIN', 'SYS_PTRACE', 'DAC_READ_SEARCH'] },
    });
    expect(job.spec?.template.spec?.containers[0].env).toContainEqual({
      name: 'DEVOP_AGENT_LOG_LEVEL',
      value: 'debug',
    });
  });

  it('gives NET_RAW (the packet capture) to the agent of a session that mirrors, and to no other', () => {
    const mirroring = buildAgentJob({ ...input, mirror: true }).spec?.template.spec?.containers[0];
    expect(mirroring?.securityContext?.capabilities?.add).toEqual([
      'NET_ADMIN',
      'NET_RAW',
      'SYS_ADMIN',
      'SYS_PTRACE',
      'DAC_READ_SEARCH',
    ]);
  });

  it('builds the ephemeral agent container: no SYS_ADMIN (already in the netns), no privilege escalation', () => {
    expect(buildAgentEphemeralContainer(input)).toEqual({
      name: 'devop-agent-ab12cd34ef',
      image: 'ghcr.io/devop/agent:0.1.0',
      imagePullPolicy: 'IfNotPresent',
      targetContainerName: 'api',
      env: [
        { name: 'DEVOP_AGENT_MODE', value: 'ephemeral' },
        { name: 'DEVOP_AGENT_PORT', value: '24567' },
        { name: 'DEVOP_AGENT_NATIVE_PORT', value: '24568' },
        TOKEN_FROM_SECRET,
        { name: 'DEVOP_AGENT_CONTAINER_ID', value: 'containerd://0123abcd' },
        { name: 'DEVOP_AGENT_IDLE_SECONDS', value: '10' },
        { name: 'DEVOP_AGENT_FLUSH_CONNECTIONS', value: 'true' },
        { name: 'DEVOP_AGENT_ID', value: 'ab12cd34ef' },
        { name: 'XTABLES_LOCKFILE', value: '/dev/xtables.lock' },
      ],
      securityContext: {
        privileged: false,
        runAsUser: 0,
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        seccompProfile: { type: 'RuntimeDefault' },
        capabilities: { drop: ['ALL'], add: ['NET_ADMIN', 'SYS_PTRACE', 'DAC_READ_SEARCH'] },
      },
    });
  });

  it("builds the token's Secret, owned by the agent Job so that garbage collection removes it", () => {
    const secret = buildAgentSecret({
      agentId: 'ab12cd34ef',
      namespace: 'shop',
      token: 'secret-token',
      owner: { apiVersion: 'batch/v1', kind: 'Job', name: 'devop-agent-ab12cd34ef', uid: 'job-uid' },
      createdBy: 'alice',
    });
    expect(secret).toEqual({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name: 'devop-agent-ab12cd34ef',
        namespace: 'shop',
        labels: { 'app.kubernetes.io/name': 'devop-agent', 'app.kubernetes.io/managed-by': 'devop' },
        annotations: { 'devop.dev/agent-id': 'ab12cd34ef', 'devop.dev/created-by': 'alice' },
        ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: 'devop-agent-ab12cd34ef', uid: 'job-uid' }],
      },
      type: 'Opaque',
      immutable: true,
      data: { token: 'c2VjcmV0LXRva2Vu' },
    });
  });

  it('builds a targetless agent Job without host access', () => {
    const job = buildTargetlessAgentJob({
      agentId: 'zz',
      namespace: 'default',
      image: 'img',
      port: 21000,
      idleSeconds: 10,
      ttlSeconds: 30,
      owner: 'bob@h',
      createdBy: 'bob',
    });
    const pod = job.spec?.template.spec;
    expect(pod?.hostPID).toBeUndefined();
    expect(pod?.nodeName).toBeUndefined();
    expect(pod?.containers[0].securityContext).toEqual({
      runAsNonRoot: true,
      runAsUser: 65534,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(job.spec?.activeDeadlineSeconds).toBe(86400);
    expect(pod?.containers[0].env).toEqual([
      { name: 'DEVOP_AGENT_MODE', value: 'targetless' },
      { name: 'DEVOP_AGENT_PORT', value: '21000' },
      { name: 'DEVOP_AGENT_TOKEN', valueFrom: { secretKeyRef: { name: 'devop-agent-zz', key: 'token' } } },
      { name: 'DEVOP_AGENT_IDLE_SECONDS', value: '10' },
      { name: 'DEVOP_AGENT_ID', value: 'zz' },
    ]);
    expect(job.metadata?.labels?.['devop.dev/target-pod']).toBe('targetless');
  });
});
