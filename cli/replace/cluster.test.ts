// --replace, the pure parts: the copy pod and guard Job built from a workload, the patches that scale it to 0 and back
// (the recorded count survives a second session, a restore is idempotent), the guard's expiry by its own clock, and
// the one-line refusals (HPA, GitOps owner, a pod or targetless target, --all-pods).
import type { V1PodTemplateSpec, V1PolicyRule } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { createLog } from '../../agent/log.js';
import { LeaseWatch, deleteOwnJob, restoreWorkload, type GuardApi } from '../../agent/guard/replace-guard.js';
import { isUserError } from '../../shared/errors.js';
import {
  GUARD_ENV,
  REPLACE_ANNOTATIONS,
  restorePatch,
  scaleDownPatch,
  workloadApiPath,
} from '../../shared/replace-contract.js';
import { parseConfig } from '../config/schema.js';
import { mergeExecOptions } from '../services/exec-options.js';
import { WAITER_COMMAND, buildCopyPod, buildGuardAccess, buildGuardJob, isOurGuardAccess } from './manifest.js';
import { gitOpsOwner, scalingHpa } from './cluster.js';
import { replaceLeaseName } from './lease.js';

const template: V1PodTemplateSpec = {
  metadata: { labels: { app: 'api', 'pod-template-hash': '5d8f' }, annotations: { team: 'core' } },
  spec: {
    serviceAccountName: 'api',
    initContainers: [{ name: 'migrate', image: 'api:1', command: ['migrate'] }],
    containers: [
      {
        name: 'api',
        image: 'api:1',
        command: ['node', 'server.js'],
        args: ['--port', '3000'],
        env: [{ name: 'MODE', value: 'prod' }],
        ports: [{ containerPort: 3000 }],
        readinessProbe: { httpGet: { path: '/ready', port: 3000 } },
        livenessProbe: { httpGet: { path: '/live', port: 3000 } },
        lifecycle: { preStop: { exec: { command: ['drain'] } } },
        volumeMounts: [{ name: 'config', mountPath: '/etc/api' }],
      },
      { name: 'sidecar', image: 'proxy:1' },
    ],
    volumes: [{ name: 'config', configMap: { name: 'api' } }],
  },
};
const copyInput = {
  name: 'api-devop-replace-1234',
  namespace: 'ns',
  workload: { kind: 'deployment' as const, name: 'api' },
  template,
  container: 'api',
  agentImage: 'ghcr.io/devop/agent:1',
  owner: 'ada@laptop',
};

describe('the copy pod', () => {
  it("keeps the template (env, service account, volumes, sidecars) and puts a waiter in the container's place", () => {
    const pod = buildCopyPod({ ...copyInput, keepLabels: false });
    const [api, sidecar] = pod.spec!.containers;
    expect(api).toEqual({
      name: 'api',
      image: 'api:1',
      command: [...WAITER_COMMAND],
      args: [],
      env: [{ name: 'MODE', value: 'prod' }],
      ports: [{ containerPort: 3000 }],
      volumeMounts: [
        { name: 'config', mountPath: '/etc/api' },
        { name: 'devop-replace', mountPath: '/devop-replace', readOnly: true },
      ],
    });
    expect(sidecar).toEqual({ name: 'sidecar', image: 'proxy:1' });
    expect(pod.spec!.serviceAccountName).toBe('api');
    expect(pod.spec!.initContainers!.map((c) => c.name)).toEqual(['devop-replace-waiter', 'migrate']);
    expect(pod.spec!.initContainers![0]).toMatchObject({
      image: 'ghcr.io/devop/agent:1',
      command: ['/opt/devop/busybox', 'cp', '/opt/devop/busybox', '/devop-replace/busybox'],
      securityContext: { runAsNonRoot: true, runAsUser: 65532, allowPrivilegeEscalation: false },
    });
    expect(pod.spec!.volumes).toEqual([
      { name: 'config', configMap: { name: 'api' } },
      { name: 'devop-replace', emptyDir: {} },
    ]);
    // Without --steal no Service selects it: none of the workload's labels
    expect(pod.metadata!.labels).toEqual({
      'app.kubernetes.io/managed-by': 'devop',
      'devop.dev/replace-of': 'api',
      'devop.dev/replace-role': 'copy',
    });
  });

  it("keeps the workload's labels with --steal, but not the controller's (the ReplicaSet would adopt it)", () => {
    const labels = buildCopyPod({ ...copyInput, keepLabels: true }).metadata!.labels!;
    expect(labels.app).toBe('api');
    expect(labels['pod-template-hash']).toBeUndefined();
    expect(labels['devop.dev/replace-role']).toBe('copy');
  });
});

describe('the guard Job', () => {
  it("runs the agent image in guard mode with the session in its env, as the session's own service account", () => {
    const job = buildGuardJob({
      name: 'devop-replace-guard-1234',
      namespace: 'ns',
      workload: { kind: 'deployment', name: 'api', path: workloadApiPath('deployment', 'ns', 'api') },
      lease: 'devop-replace-deployment-api-0123456789',
      holder: 'ada@laptop#1234',
      copyPod: 'api-devop-replace-1234',
      agentImage: 'ghcr.io/devop/agent:1',
      owner: 'ada@laptop',
    });
    const pod = job.spec!.template.spec!;
    expect(pod.serviceAccountName).toBe('devop-replace-guard-1234');
    expect(job.spec?.suspend, 'its pod waits until its account and Role exist').toBe(true);
    expect(pod.restartPolicy).toBe('OnFailure');
    expect(pod.containers[0]).toMatchObject({
      image: 'ghcr.io/devop/agent:1',
      command: ['/bin/sh', '/opt/devop/entry.sh'],
      args: ['guard'],
      securityContext: { runAsNonRoot: true, runAsUser: 65532, capabilities: { drop: ['ALL'] } },
    });
    expect(Object.fromEntries(pod.containers[0].env!.map((e) => [e.name, e.value]))).toEqual({
      [GUARD_ENV.namespace]: 'ns',
      [GUARD_ENV.workloadPath]: '/apis/apps/v1/namespaces/ns/deployments/api',
      [GUARD_ENV.lease]: 'devop-replace-deployment-api-0123456789',
      [GUARD_ENV.holder]: 'ada@laptop#1234',
      [GUARD_ENV.copyPod]: 'api-devop-replace-1234',
      [GUARD_ENV.job]: 'devop-replace-guard-1234',
    });
  });
});

describe("the guard's account", () => {
  const input = {
    name: 'devop-replace-guard-1234',
    namespace: 'ns',
    session: '1234',
    workload: { group: 'apps', resource: 'deployments', name: 'api' },
    copyPod: 'api-devop-replace-1234',
    lease: 'devop-replace-deployment-api-0123456789',
    jobUid: 'uid-of-the-guard-job',
  };
  const metadata = {
    name: 'devop-replace-guard-1234',
    namespace: 'ns',
    labels: {
      'app.kubernetes.io/managed-by': 'devop',
      'devop.dev/replace-of': 'api',
      'devop.dev/replace-role': 'guard-access',
      'devop.dev/replace-session': '1234',
    },
    ownerReferences: [
      { apiVersion: 'batch/v1', kind: 'Job', name: 'devop-replace-guard-1234', uid: 'uid-of-the-guard-job' },
    ],
  };

  it("is one session's, owned by its guard Job, and may touch only the objects the guard restores, by name", () => {
    // Given one session's workload, copy pod, Lease and guard Job; When the account is built; Then it is exactly this
    // (what agent/guard/replace-guard.ts calls: GET+PATCH the workload, DELETE the copy, GET+DELETE the Lease, DELETE
    // the Job)
    expect(buildGuardAccess(input)).toEqual({
      account: { apiVersion: 'v1', kind: 'ServiceAccount', metadata },
      role: {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'Role',
        metadata,
        rules: [
          { apiGroups: ['apps'], resources: ['deployments'], resourceNames: ['api'], verbs: ['get', 'patch'] },
          { apiGroups: [''], resources: ['pods'], resourceNames: ['api-devop-replace-1234'], verbs: ['delete'] },
          {
            apiGroups: ['coordination.k8s.io'],
            resources: ['leases'],
            resourceNames: ['devop-replace-deployment-api-0123456789'],
            verbs: ['get', 'delete'],
          },
          { apiGroups: ['batch'], resources: ['jobs'], resourceNames: ['devop-replace-guard-1234'], verbs: ['delete'] },
        ],
      },
      binding: {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        metadata,
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'devop-replace-guard-1234' },
        subjects: [{ kind: 'ServiceAccount', name: 'devop-replace-guard-1234', namespace: 'ns' }],
      },
    });
  });

  it('has no rule without resourceNames and no verb that resourceNames cannot narrow (create, list, watch)', () => {
    // RBAC matches resourceNames against the request's name: a create or a list has none, so such a rule would be
    // namespace-wide (kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go, ResourceNameMatches)
    for (const rule of buildGuardAccess(input).role.rules ?? []) {
      expect(rule.resourceNames?.length, JSON.stringify(rule)).toBeGreaterThan(0);
      expect(rule.verbs.filter((v) => ['create', 'list', 'watch', 'deletecollection', '*'].includes(v))).toEqual([]);
    }
  });

  it("trusts an object found under its name (a 409) only when it is this session's", () => {
    const { account, role, binding } = buildGuardAccess(input);
    // Given what the API server answers for ours (its own field order, server-set fields)
    const served = {
      ...role,
      metadata: { ...role.metadata, uid: 'r1', resourceVersion: '7' },
      rules: role.rules?.map(({ verbs, apiGroups, resources, resourceNames }) => ({
        verbs,
        resourceNames,
        resources,
        apiGroups,
      })),
    };
    expect(isOurGuardAccess(role, served)).toBe(true);
    expect(isOurGuardAccess(account, { ...account, secrets: [] })).toBe(true);
    // Then a Role with a wider rule, other labels or another owner, and a binding to someone else, are not
    const wider = { ...role, rules: [{ apiGroups: ['*'], resources: ['*'], verbs: ['*'] }] };
    expect(isOurGuardAccess(role, wider)).toBe(false);
    expect(isOurGuardAccess(role, { ...role, metadata: { ...role.metadata, labels: { a: 'b' } } })).toBe(false);
    const otherOwner = [{ apiVersion: 'batch/v1', kind: 'Job', name: input.name, uid: 'another-uid' }];
    expect(isOurGuardAccess(role, { ...role, metadata: { ...role.metadata, ownerReferences: otherOwner } })).toBe(
      false,
    );
    const borrowed = { ...binding, subjects: [{ kind: 'ServiceAccount', name: 'mallory', namespace: 'ns' }] };
    expect(isOurGuardAccess(binding, borrowed)).toBe(false);
  });
});

describe("the guard's Role against the guard's own calls", () => {
  // RBAC as kube-apiserver evaluates one rule (kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go RuleAllows and
  // pkg/apis/rbac/v1/evaluation_helpers.go): verb, API group, resource, and the request's name among resourceNames.
  const allows = (rule: V1PolicyRule, call: { verb: string; group: string; resource: string; name: string }) =>
    rule.verbs.includes(call.verb) &&
    (rule.apiGroups ?? []).includes(call.group) &&
    (rule.resources ?? []).includes(call.resource) &&
    (!rule.resourceNames?.length || rule.resourceNames.includes(call.name));
  const VERBS: Record<string, string> = { GET: 'get', PATCH: 'patch', DELETE: 'delete' };
  /** A request path as RBAC sees it: /api/v1/namespaces/NS/RES/NAME or /apis/GROUP/VERSION/namespaces/NS/RES/NAME. */
  const attributes = (method: string, path: string) => {
    const parts = path.split('?')[0].split('/').filter(Boolean);
    const group = parts[0] === 'api' ? '' : parts[1];
    const [resource, name] = parts.slice(parts.indexOf('namespaces') + 2);
    return { verb: VERBS[method] ?? method, group, resource, name };
  };

  it("allows every call of a restore and of the guard's end, and holds no rule those calls do not use", async () => {
    // Given a session's guard and its Role
    const config = {
      namespace: 'ns',
      workloadPath: workloadApiPath('deployment', 'ns', 'api'),
      lease: 'devop-replace-deployment-api-0123456789',
      holder: 'ada@laptop#1234',
      copyPod: 'api-devop-replace-1234',
      job: 'devop-replace-guard-1234',
    };
    const { role } = buildGuardAccess({
      name: config.job,
      namespace: 'ns',
      session: '1234',
      workload: { group: 'apps', resource: 'deployments', name: 'api' },
      copyPod: config.copyPod,
      lease: config.lease,
      jobUid: 'uid',
    });
    const calls: { method: string; path: string }[] = [];
    const api: GuardApi = async (method, path) => {
      calls.push({ method, path });
      if (method === 'GET' && path.includes('/leases/'))
        return { status: 200, body: { spec: { holderIdentity: config.holder }, metadata: { resourceVersion: '3' } } };
      if (method === 'GET')
        return {
          status: 200,
          body: {
            metadata: {
              annotations: { [REPLACE_ANNOTATIONS.replicas]: '2', [REPLACE_ANNOTATIONS.holder]: config.holder },
            },
          },
        };
      return { status: 200, body: {} };
    };
    // When the guard restores the workload and ends
    await restoreWorkload(
      api,
      config,
      createLog('warn', () => undefined),
    );
    await deleteOwnJob(api, config);
    // Then each of its calls is allowed by a rule of the Role, and each rule's verbs are all used
    const requests = calls.map((c) => attributes(c.method, c.path));
    expect(requests.map((r) => `${r.verb} ${r.resource}/${r.name}`)).toEqual([
      'get deployments/api',
      'patch deployments/api',
      'delete pods/api-devop-replace-1234',
      'get leases/devop-replace-deployment-api-0123456789',
      'delete leases/devop-replace-deployment-api-0123456789',
      'delete jobs/devop-replace-guard-1234',
    ]);
    for (const r of requests)
      expect(
        role.rules?.some((rule) => allows(rule, r)),
        JSON.stringify(r),
      ).toBe(true);
    for (const rule of role.rules ?? [])
      for (const verb of rule.verbs)
        expect(
          requests.some((r) => allows({ ...rule, verbs: [verb] }, r)),
          `${verb} ${rule.resources}`,
        ).toBe(true);
  });
});

describe('the replica count on the workload', () => {
  it('records the count when scaling to 0, and keeps an earlier record (a session that died before restoring)', () => {
    expect(scaleDownPatch({ spec: { replicas: 3 } }, 'ada@laptop#1', 'copy-1')).toEqual({
      metadata: {
        annotations: {
          [REPLACE_ANNOTATIONS.replicas]: '3',
          [REPLACE_ANNOTATIONS.holder]: 'ada@laptop#1',
          [REPLACE_ANNOTATIONS.copy]: 'copy-1',
        },
      },
      spec: { replicas: 0 },
    });
    const again = scaleDownPatch(
      { metadata: { annotations: { [REPLACE_ANNOTATIONS.replicas]: '3' } }, spec: { replicas: 0 } },
      'bob@pc#2',
      'copy-2',
    ) as { metadata: { annotations: Record<string, string> } };
    expect(again.metadata.annotations[REPLACE_ANNOTATIONS.replicas]).toBe('3');
  });

  it('restores the recorded count once; an already restored or re-replaced workload is left alone', () => {
    const replaced = {
      metadata: { annotations: { [REPLACE_ANNOTATIONS.replicas]: '3', [REPLACE_ANNOTATIONS.holder]: 'ada@laptop#1' } },
      spec: { replicas: 0 },
    };
    expect(restorePatch(replaced, 'ada@laptop#1')).toEqual({
      metadata: {
        annotations: {
          [REPLACE_ANNOTATIONS.replicas]: null,
          [REPLACE_ANNOTATIONS.holder]: null,
          [REPLACE_ANNOTATIONS.copy]: null,
        },
      },
      spec: { replicas: 3 },
    });
    expect(restorePatch({ spec: { replicas: 3 } })).toBeUndefined();
    expect(restorePatch(replaced, 'bob@pc#2')).toBeUndefined();
    // `devop clean` restores whoever recorded it
    expect(restorePatch(replaced)).toMatchObject({ spec: { replicas: 3 } });
  });
});

describe('the guard follows the Lease by its own clock', () => {
  const lease = (renewTime: string, holderIdentity = 'ada@laptop#1') => ({
    spec: { holderIdentity, renewTime, leaseDurationSeconds: 15 },
  });

  it('is live while renewTime changes, ended 15 s after it last changed, whatever the holder clock says', () => {
    const watch = new LeaseWatch(0);
    // The holder's clock is an hour behind: renewTime alone would look expired
    expect(watch.observe(lease('2020-01-01T00:00:00Z'), 'ada@laptop#1', 1_000)).toBe('live');
    expect(watch.observe(lease('2020-01-01T00:00:05Z'), 'ada@laptop#1', 6_000)).toBe('live');
    expect(watch.observe(lease('2020-01-01T00:00:05Z'), 'ada@laptop#1', 20_000)).toBe('live');
    expect(watch.observe(lease('2020-01-01T00:00:05Z'), 'ada@laptop#1', 21_001)).toBe('ended');
  });

  it('is ended when the Lease is gone or another session holds it', () => {
    expect(new LeaseWatch(0).observe(undefined, 'ada@laptop#1', 1)).toBe('ended');
    expect(new LeaseWatch(0).observe(lease('t', 'bob@pc#2'), 'ada@laptop#1', 1)).toBe('ended');
  });
});

describe('what --replace refuses, in one line', () => {
  const config = parseConfig({}, 'devop.json');
  const refusal = (flags: Parameters<typeof mergeExecOptions>[0]): string => {
    try {
      mergeExecOptions(flags, config, ['node', 'main.js'], '/p');
    } catch (err) {
      if (isUserError(err)) return `${err.message} — fix: ${err.hint}`;
      throw err;
    }
    return 'accepted';
  };

  it('a pod target, targetless and --all-pods; a deploy target is accepted', () => {
    expect(refusal({ replace: true, target: 'pod/api-0' })).toMatch(
      /^--replace works on a deploy\/sts\/rollout, not on pod\/api-0/,
    );
    expect(refusal({ replace: true, target: 'targetless' })).toMatch(/^--replace needs a workload to replace/);
    expect(refusal({ replace: true, target: 'deploy/api', allPods: true })).toMatch(/^--replace and --all-pods/);
    expect(refusal({ replace: true, target: 'deploy/api' })).toBe('accepted');
  });

  it('an HPA that scales the workload, and a GitOps owner unless its sync is said to be paused', () => {
    const hpas = [{ metadata: { name: 'api' }, spec: { scaleTargetRef: { kind: 'Deployment', name: 'api' } } }];
    expect(scalingHpa(hpas, 'deployment', 'api')).toBe('api');
    expect(scalingHpa(hpas, 'statefulset', 'api')).toBeUndefined();
    expect(gitOpsOwner({ metadata: { labels: { 'argocd.argoproj.io/instance': 'shop' } } })).toBe(
      'the Argo CD Application "shop"',
    );
    expect(gitOpsOwner({ metadata: { labels: { 'kustomize.toolkit.fluxcd.io/name': 'apps' } } })).toBe(
      'the Flux Kustomization "apps"',
    );
    expect(
      gitOpsOwner({
        metadata: {
          labels: { 'argocd.argoproj.io/instance': 'shop' },
          annotations: { 'devop.dev/gitops-paused': 'true' },
        },
      }),
    ).toBeUndefined();
    expect(gitOpsOwner({ metadata: { labels: { app: 'api' } } })).toBeUndefined();
  });

  it('names one Lease per workload, at most 63 characters', () => {
    const name = replaceLeaseName('ns', 'deployment', 'a'.repeat(80));
    expect(name.length).toBeLessThanOrEqual(63);
    expect(name).toMatch(/^devop-replace-deployment-a+-[0-9a-f]{10}$/);
    expect(replaceLeaseName('ns', 'deployment', 'api')).not.toBe(replaceLeaseName('other', 'deployment', 'api'));
  });
});
